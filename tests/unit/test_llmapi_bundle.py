"""`trtspec deploy` of trtllm-llmapi recipes on this machine: the tiny fixture and the 8B / 70B (tp 2, tp 4) EAGLE-3
recipes over a random Llama of each recipe's head layout, scaled down (heads and KV heads as the recipe, head_dim 4,
8 layers so upstream's default aux ids {1, N/2-1, N-4} exist), with a random EAGLE-3 draft — real FP8 PTQ (modelopt,
CPU), real stages, real files; TensorRT-LLM itself is absent.

Oracles: the repository pre-check (`repo.precheck`: files, config.pbtxt parsed as a ModelConfig, model.yaml's keys
against the committed llm_args table), upstream's FP8 format read back with `quant_config_of`, the draft's config.json
keys TensorRT-LLM reads (draft_vocab_size, eagle_config ids), and the launch scripts run with a stand-in trtllm-serve
that records its argv (compared with `serve_command`).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from builder.model.config import LlamaConfig
from builder.quantize.hf_quant import quant_config_of
from builder.speculative.eagle3.draft_model import random_draft
from builder.trtllm.llmapi.repo import precheck
from tests.unit.model_utils import hf_model, save_checkpoint
from tests.unit.recipe_helpers import run
from tests.unit.scratch import scratch_dir

pytest.importorskip("tritonclient.grpc", reason="the serve extra (tritonclient[grpc]) renders configs")

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures" / "tiny-llama3" / "base"
SCALED = {  # recipe -> (heads, kv heads, tp)
    "llama3-8b-1xh100-fp8-llmapi-eagle3.yaml": (32, 8, 1),
    "llama3-70b-tp2-h200-fp8-llmapi-eagle3.yaml": (64, 8, 2),
    "llama3-70b-tp4-h100-fp8-llmapi-eagle3.yaml": (64, 8, 4),
}
QUICK = ("--set", "quantization.calibration.num_samples=2", "--set", "quantization.calibration.seq_len=16")


@functools.lru_cache(maxsize=None)
def _root() -> Path:
    return scratch_dir("trtspec-llmapi-")


@functools.lru_cache(maxsize=None)
def scaled_target(heads: int, kv: int) -> tuple[Path, Path]:
    """A random HF Llama with the recipe's heads and KV heads (head_dim 4, 8 layers, the fixture's vocabulary) and a
    random EAGLE-3 draft for it with upstream's default aux ids."""
    base = _root() / f"target-{heads}-{kv}"
    model = hf_model(
        3,
        vocab_size=4096,
        hidden_size=4 * heads,
        intermediate_size=64,
        num_hidden_layers=8,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=4,
        max_position_embeddings=4096,
    )
    save_checkpoint(model, base)
    cfg = LlamaConfig.from_hf_dict(json.loads((base / "config.json").read_text()))
    draft = _root() / f"draft-{heads}-{kv}"
    random_draft(cfg, (1, 3, 4), draft_vocab=512, seed=2).save(draft)
    return base, draft


@functools.lru_cache(maxsize=None)
def deployed(recipe: str) -> Path:
    out = _root() / f"out-{recipe}"
    if recipe in SCALED:
        heads, kv, _ = SCALED[recipe]
        base, draft = scaled_target(heads, kv)
        sets = (
            "--set",
            f"model.checkpoint={base}",
            "--set",
            "model.architecture=null",
            "--set",
            f"model.tokenizer={FIX}",
            "--set",
            f"speculative.checkpoint={draft}",
            "--set",
            "speculative.allow_pickle=false",
            *QUICK,
        )
    else:
        draft = _root() / "tiny-draft"
        cfg = LlamaConfig.from_hf_dict(json.loads((FIX / "config.json").read_text()))
        random_draft(cfg, (0, 1, 2), draft_vocab=64, seed=1).save(draft)
        sets = ("--set", f"speculative.checkpoint={draft}")
    res = run(
        "deploy", str(REPO / "recipes" / recipe), *sets, "--cache-dir", str(_root() / "cache"), "--out", str(out), "-q"
    )
    assert res.exit_code == 0, res.output[-3000:]
    return out


ALL = ["tiny-llama3-llmapi-eagle3.yaml", *SCALED]


@pytest.mark.parametrize("recipe", ALL)
def test_deploy_renders_a_repository_that_passes_the_precheck(recipe):
    out = deployed(recipe)
    assert precheck(out / "repository") == []
    doc = yaml.safe_load((out / "repository" / "tensorrt_llm" / "1" / "model.yaml").read_text())
    opts = yaml.safe_load((out / "bundle" / "llm_api_options.yaml").read_text())
    assert doc["model"] == "/trtspec/checkpoint/model" and doc["backend"] == "pytorch"
    assert {k: v for k, v in doc.items() if k not in ("model", "backend", "triton_config")} == opts
    tp = SCALED.get(recipe, (0, 0, 1))[2]
    assert opts["tensor_parallel_size"] == tp
    spec = opts["speculative_config"]
    assert spec["speculative_model_dir"] == "/trtspec/checkpoint/draft" and spec["max_draft_len"] == 3
    draft_cfg = json.loads((out / "checkpoint" / "draft" / "config.json").read_text())
    assert draft_cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == spec["eagle3_layers_to_capture"]
    assert draft_cfg["draft_vocab_size"] in (64, 512)
    k8s = list(yaml.safe_load_all((out / "bundle" / "k8s.yaml").read_text()))
    assert k8s[0]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == tp
    assert f"--gpus {tp}" in (out / "bundle" / "docker-run.sh").read_text().replace("\\\n", " ").replace("  ", " ")


@pytest.mark.parametrize("recipe", list(SCALED))
def test_the_scaled_recipes_serve_modelopts_fp8_checkpoint(recipe):
    out = deployed(recipe)
    model = out / "checkpoint" / "model"
    q = quant_config_of(model)["quantization"]
    assert q["quant_algo"] == "FP8" and q["kv_cache_quant_algo"] == "FP8"
    assert (model / "tokenizer.json").is_file()
    header = json.loads((out / "checkpoint" / "checkpoint.json").read_text())
    assert header["aux_layers"] == [1, 3, 4]  # upstream's default {1, N/2-1, N-4} for the 8-layer stand-in


def test_launch_sh_runs_trtllm_serve_with_the_options_file(tmp_path):
    from builder.trtllm.llmapi.bundle import serve_command

    out = deployed("tiny-llama3-llmapi-eagle3.yaml")
    argv_file = tmp_path / "argv"
    fake = tmp_path / "trtllm-serve"
    fake.write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$0" "$@" > {argv_file}\n')
    fake.chmod(0o755)
    env = {
        **os.environ,
        "TRTLLM_SERVE": str(fake),
        "MODEL_DIR": str(out / "checkpoint" / "model"),
        "OPTIONS": str(out / "bundle" / "llm_api_options.yaml"),
        "HTTP_PORT": "18000",
    }
    res = subprocess.run(["bash", str(out / "bundle" / "launch.sh")], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    subst = {
        "TRTLLM_SERVE": str(fake),
        "MODEL_DIR": env["MODEL_DIR"],
        "HOST": "0.0.0.0",
        "HTTP_PORT": "18000",
        "OPTIONS": env["OPTIONS"],
    }
    want = [subst.get(w.strip("@"), w) for w in serve_command()]
    assert argv_file.read_text().splitlines() == want
    env["MODEL_DIR"] = str(tmp_path / "absent")
    res = subprocess.run(["bash", str(out / "bundle" / "launch.sh")], env=env, capture_output=True, text=True)
    assert res.returncode == 2 and "no model folder" in res.stderr


def test_launch_triton_sh_adds_the_containers_model_py_and_refuses_without_it(tmp_path):
    out = deployed("tiny-llama3-llmapi-eagle3.yaml")
    model_py = tmp_path / "model.py"
    model_py.write_text("# upstream's model.py stands here\n")
    argv_file = tmp_path / "argv"
    fake = tmp_path / "mpirun"
    fake.write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$@" > {argv_file}\n')
    fake.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{tmp_path}:{os.environ['PATH']}",
        "MODEL_REPO": str(out / "repository"),
        "LLMAPI_MODEL_PY": str(model_py),
        "WORK_DIR": str(tmp_path / "work"),
    }
    res = subprocess.run(["bash", str(out / "bundle" / "launch-triton.sh")], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    served = tmp_path / "work" / "repository"
    assert (served / "tensorrt_llm" / "1" / "model.py").read_text() == model_py.read_text()
    argv = argv_file.read_text().splitlines()
    assert f"--model-repository={served}" in argv and "--disable-auto-complete-config" not in argv
    env["LLMAPI_MODEL_PY"] = str(tmp_path / "absent.py")
    res = subprocess.run(["bash", str(out / "bundle" / "launch-triton.sh")], env=env, capture_output=True, text=True)
    assert res.returncode == 2 and "model.py" in res.stderr


def test_bundle_scripts_parse_and_the_precheck_can_fail(tmp_path):
    out = deployed("tiny-llama3-llmapi-eagle3.yaml")
    for name in ("launch.sh", "launch-triton.sh", "docker-run.sh", "bench.sh"):
        res = subprocess.run(["bash", "-n", str(out / "bundle" / name)], capture_output=True, text=True)
        assert res.returncode == 0, (name, res.stderr)
    import shutil

    bad = tmp_path / "repo"
    shutil.copytree(out / "repository", bad)
    y = bad / "tensorrt_llm" / "1" / "model.yaml"
    doc = yaml.safe_load(y.read_text())
    doc["kv_cache_config"]["free_gpu_mem_fraction"] = 0.5  # the engine flow's name
    y.write_text(yaml.safe_dump(doc))
    assert precheck(bad) == ["model.yaml: free_gpu_mem_fraction is not a field of KvCacheConfig"]
    (bad / "tensorrt_llm" / "config.pbtxt").unlink()
    assert precheck(bad) == ["missing tensorrt_llm/config.pbtxt"]
