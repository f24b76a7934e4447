"""target.backend: trtllm — the recipe rules TensorRT-LLM 1.2 imposes, each refusal naming the field and
upstream's limit (exit 2, no traceback), and the shipped trtllm recipes validating and planning.

The expectations are upstream's rules written out by hand (sources in builder/recipe/trtllm_checks.py):
kv heads duplicated when fewer than tp ranks, greedy-only verification for Medusa/EAGLE/Lookahead, no
EAGLE-2 through Triton, tensor parallelism only with speculation, 4-bit choice encoding, EAGLE limits.
"""

from __future__ import annotations

import glob
from typing import Any, Callable

import pytest

from tests.unit.recipe_helpers import good, run, write


def _trtllm(**over: Any) -> dict:
    data = good()
    data["target"]["backend"] = "trtllm"
    data["speculative"]["verification"] = "greedy"
    for path, value in over.items():
        node = data
        keys = path.split("__")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value
    return data


ARCH_24 = {
    "num_layers": 8,
    "hidden_size": 1536,
    "num_attention_heads": 24,
    "num_kv_heads": 4,
    "intermediate_size": 4096,
    "vocab_size": 32000,
    "rope_theta": 500000,
}
LOOKAHEAD = {"method": "lookahead", "window": 4, "ngram": 4, "verification_set": 4, "verification": "greedy"}
EAGLE1 = {
    "method": "eagle",
    "checkpoint": "hf://a/b",
    "version": 1,
    "verification": "greedy",
    "tree": {"type": "static", "choices": [[0], [1], [0, 0]]},
}

# (id, recipe, field named, text expected in the message)
CASES: list[tuple[str, Callable[[], dict], str, str]] = [
    ("version-1.3", lambda: _trtllm(trtllm__version="1.3.0"), "trtllm.version", "no TensorRT engine path"),
    ("version-old", lambda: _trtllm(trtllm__version="1.1.0"), "trtllm.version", "allowed: 1.2.0, 1.2.1"),
    ("version-unknown", lambda: _trtllm(trtllm__version="1.2.7"), "trtllm.version", "not in trtspec's release table"),
    ("tp-heads", lambda: _trtllm(parallelism__tp=3, target__gpus=3), "parallelism.tp", "does not divide"),
    (
        "kv-dup-impossible",
        lambda: _trtllm(model__architecture=ARCH_24, parallelism__tp=6, target__gpus=6),
        "parallelism.tp",
        "dup_kv_weight",
    ),
    (
        "medusa-sampling",
        lambda: _trtllm(speculative__verification="rejection"),
        "speculative.verification",
        "allowed: greedy",
    ),
    (
        "eagle-draft-vocab",
        lambda: _trtllm(speculative={**EAGLE1, "draft_vocab": 32768}),
        "speculative.draft_vocab",
        "no draft-to-target token map",
    ),
    (
        "eagle2-triton",
        lambda: _trtllm(speculative={**EAGLE1, "version": 2, "tree": {"type": "dynamic"}}),
        "speculative.tree.type",
        "EAGLE-2 dynamic trees are not served through Triton",
    ),
    (
        "speculation-pp",
        lambda: _trtllm(speculative=LOOKAHEAD, parallelism__pp=2, target__gpus=2),
        "parallelism.pp",
        "tensor parallelism only",
    ),
    (
        "lookahead-n1",
        lambda: _trtllm(speculative={**LOOKAHEAD, "ngram": 1, "window": 2, "verification_set": 0}),
        "speculative.ngram",
        "ngram=1 requires window=1",
    ),
    ("choice-rank-16", lambda: _trtllm(speculative__tree=[[0], [16]]), "speculative.tree", "ranks 0..15"),
    (
        "eagle-batch",
        lambda: _trtllm(speculative=EAGLE1, build__max_batch_size=600, build__max_num_tokens=8192),
        "build.max_batch_size",
        "1..512",
    ),
    (
        "eagle-draft-len",
        lambda: _trtllm(speculative=EAGLE1, build__max_draft_len=300, build__max_num_tokens=8 * 301),
        "speculative.tree.choices",
        "at most 256",
    ),
    (
        "chunked-no-paged",
        lambda: _trtllm(trtllm__use_paged_context_fmha=False),
        "trtllm.enable_chunked_context",
        "paged context FMHA",
    ),
    (
        "gemm-fp8-bf16",
        lambda: _trtllm(quantization__mode="none", quantization__kv_cache="model_dtype", trtllm__gemm_plugin="fp8"),
        "trtllm.gemm_plugin",
        "FP8 weights",
    ),
    (
        "fp8-fmha-no-fp8-kv",
        lambda: _trtllm(quantization__kv_cache="model_dtype", trtllm__use_fp8_context_fmha=True),
        "trtllm.use_fp8_context_fmha",
        "FP8 KV cache",
    ),
    ("draft-schedule", lambda: _trtllm(triton__draft_schedule=[[2, 12]]), "triton.draft_schedule", "C++ runtime"),
    ("workers", lambda: _trtllm(trtllm__workers=2), "trtllm.workers", "1..1"),
    (
        "cpu-target",
        lambda: _trtllm(target__device="cpu", quantization__mode="none", quantization__kv_cache="model_dtype"),
        "target.backend",
        "needs a GPU target",
    ),
    ("unknown-key", lambda: _trtllm(trtllm__use_cuda_graphs=True), "trtllm.use_cuda_graphs", "allowed: version"),
]


@pytest.mark.parametrize("make,field,expect", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_trtllm_rule_refuses(tmp_path, make, field, expect):
    path = write(tmp_path / "recipe.yaml", make())
    result = run("validate", str(path))
    assert result.exit_code == 2, (result.output, result.stderr)
    assert "Traceback" not in result.stderr
    assert f": {field}: " in result.stderr, result.stderr
    assert expect in result.stderr, result.stderr


def test_kv_heads_below_tp_are_duplicated_not_refused(tmp_path):
    """8 KV heads on 16 ranks: TensorRT-LLM duplicates each KV head twice; trtspec's own engine refuses it."""
    data = _trtllm(parallelism__tp=16, target__gpus=16)
    assert run("validate", str(write(tmp_path / "a.yaml", data))).exit_code == 0
    data["target"]["backend"] = "tensorrt"
    data["speculative"]["verification"] = "rejection"
    result = run("validate", str(write(tmp_path / "b.yaml", data)))
    assert result.exit_code == 2 and "num_kv_heads=8" in result.stderr


def test_fp8_eagle_warns_and_strict_refuses(tmp_path):
    path = write(tmp_path / "r.yaml", _trtllm(speculative=EAGLE1))
    result = run("validate", str(path))
    assert result.exit_code == 0 and "warning:" in result.stderr and "EAGLE support matrix" in result.stderr
    assert run("validate", "--strict", str(path)).exit_code == 2


TRTLLM_RECIPES = sorted(glob.glob("recipes/*trtllm*.yaml"))


def test_trtllm_variants_of_every_gpu_deployment_and_method_ship():
    for deploy in ("llama3-8b-1xh100-fp8", "llama3-70b-tp2-h200-fp8", "llama3-70b-tp4-h100-fp8"):
        for method in ("none", "medusa", "eagle", "lookahead"):
            assert f"recipes/{deploy}-trtllm-{method}.yaml" in TRTLLM_RECIPES


@pytest.mark.parametrize("recipe", TRTLLM_RECIPES)
def test_shipped_trtllm_recipes_validate_and_plan(recipe, tmp_path):
    assert run("validate", recipe).exit_code == 0
    result = run("plan", recipe, "--json", "--cache-dir", str(tmp_path))
    assert result.exit_code == 0, result.stderr
    import json

    report = json.loads(result.stdout)
    assert report["backend"] == "trtllm"
    assert [s["name"] for s in report["stages"]][-3:] == ["checkpoint", "engine", "repo"]
    assert "export" not in [s["name"] for s in report["stages"]]
    m = report["memory"]
    assert m["fits"] and m["kv_blocks"] > 0
    assert not any("rejection engine" in c["name"] for c in m["components"])


def test_parallelism_on_trtspecs_own_engines_points_to_trtllm(tmp_path):
    data = _trtllm(parallelism__tp=2, target__gpus=2)
    data["target"]["backend"] = "tensorrt"
    result = run("validate", str(write(tmp_path / "r.yaml", data)))
    assert result.exit_code == 2 and ": parallelism: " in result.stderr and "target.backend: trtllm" in result.stderr
    data["target"]["backend"] = "trtllm"
    assert run("validate", str(write(tmp_path / "r.yaml", data))).exit_code == 0
