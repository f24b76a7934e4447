"""Table-driven bad recipes: each must exit 2, name the field path, and print no traceback."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from tests.unit.recipe_helpers import good, run, write


def _set(path: str, value: Any) -> Callable[[dict], None]:
    def mutate(d: dict) -> None:
        keys = path.split(".")
        node = d
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value

    return mutate


def _del(path: str) -> Callable[[dict], None]:
    def mutate(d: dict) -> None:
        keys = path.split(".")
        node = d
        for k in keys[:-1]:
            node = node[k]
        del node[keys[-1]]

    return mutate


def _many(*fns: Callable[[dict], None]) -> Callable[[dict], None]:
    def mutate(d: dict) -> None:
        for fn in fns:
            fn(d)

    return mutate


# (case id, mutation, field path expected in the message, another substring expected)
CASES: list[tuple[str, Callable[[dict], None], str, str]] = [
    ("dtype-literal", _set("model.dtype", "bf17"), "model.dtype", "'bf16'"),
    ("family-literal", _set("model.family", "mistral"), "model.family", "llama3"),
    ("model-unknown-key", _set("model.chekpoint", "x"), "model.chekpoint", "allowed: family, checkpoint"),
    ("top-unknown-section", _set("buidl", {}), "buidl", "allowed: model, quantization"),
    ("checkpoint-missing-field", _del("model.checkpoint"), "model.checkpoint", "required"),
    ("checkpoint-bad-scheme", _set("model.checkpoint", "s3://bucket/x"), "model.checkpoint", "hf://org/name"),
    ("checkpoint-bad-hf", _set("model.checkpoint", "hf://justname"), "model.checkpoint", "hf://org/name"),
    ("quant-mode", _set("quantization.mode", "int4"), "quantization.mode", "'fp8'"),
    ("kv-cache-literal", _set("quantization.kv_cache", "int8"), "quantization.kv_cache", "'model_dtype'"),
    (
        "calib-builtin",
        _set("quantization.calibration.source", "builtin:wiki"),
        "quantization.calibration.source",
        "builtin:stdlib",
    ),
    (
        "calib-samples",
        _set("quantization.calibration.num_samples", 0),
        "quantization.calibration.num_samples",
        "greater than 0",
    ),
    ("method-unknown", _set("speculative.method", "hydra"), "speculative.method", "'medusa'"),
    ("medusa-heads-zero", _set("speculative.num_heads", 0), "speculative.num_heads", "greater than 0"),
    ("medusa-unknown-key", _set("speculative.window", 4), "speculative.window", "allowed: method, checkpoint"),
    (
        "medusa-depth",
        _set("speculative.tree", [[0], [0, 0], [0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0, 0]]),
        "speculative.tree",
        "depth 5 > num_heads 4",
    ),
    ("medusa-dup", _set("speculative.tree", [[0], [1], [0]]), "speculative.tree", "duplicate"),
    ("medusa-prefix", _set("speculative.tree", [[0], [1, 2]]), "speculative.tree", "lacks its prefix [1]"),
    ("medusa-preset", _set("speculative.tree", "mc_sim_99"), "speculative.tree", "mc_sim_7b_63"),
    ("medusa-tree-file", _set("speculative.tree", "missing_tree.json"), "speculative.tree", "not found"),
    ("verification-mode", _set("speculative.verification", "typical"), "speculative.verification", "'greedy'"),
    (
        "eagle-version",
        _set("speculative", {"method": "eagle", "checkpoint": "hf://a/b", "version": 3}),
        "speculative.version",
        "1",
    ),
    (
        "eagle-tree-type",
        _set("speculative", {"method": "eagle", "checkpoint": "hf://a/b", "version": 1, "tree": {"type": "dynamic"}}),
        "speculative.tree.type",
        "static",
    ),
    (
        "eagle-tree-tag",
        _set("speculative", {"method": "eagle", "checkpoint": "hf://a/b", "tree": {"type": "random"}}),
        "speculative.tree.type",
        "'static'",
    ),
    (
        "eagle-total-nodes",
        _set(
            "speculative",
            {
                "method": "eagle",
                "checkpoint": "hf://a/b",
                "tree": {"type": "dynamic", "depth": 2, "top_k": 2, "total_nodes": 7},
            },
        ),
        "speculative.tree.total_nodes",
        "1..6",
    ),
    (
        "eagle-draft-vocab-big",
        _set("speculative", {"method": "eagle", "checkpoint": "hf://a/b", "draft_vocab": 200000}),
        "speculative.draft_vocab",
        "vocab_size=128256",
    ),
    (
        "eagle-draft-vocab-small",
        _set("speculative", {"method": "eagle", "checkpoint": "hf://a/b", "draft_vocab": 8}),
        "speculative.draft_vocab",
        ">= 10",
    ),
    (
        "eagle-draft-vocab-zero",
        _set("speculative", {"method": "eagle", "checkpoint": "hf://a/b", "draft_vocab": 0}),
        "speculative.draft_vocab",
        "greater than or equal to 1",
    ),
    (
        "eagle-draft-weights-gpu",
        _set("speculative", {"method": "eagle", "checkpoint": "hf://a/b", "draft_weights": "int8"}),
        "speculative.draft_weights",
        "cpu targets",
    ),
    (
        "medusa-draft-weights-literal",
        _set("speculative", {"method": "medusa", "checkpoint": "hf://a/b", "num_heads": 4, "draft_weights": "fp8"}),
        "speculative.draft_weights",
        "'int8'",
    ),
    (
        "lookahead-draft-len",
        _many(
            _set("speculative", {"method": "lookahead", "window": 4, "ngram": 4, "verification_set": 4}),
            _set("build.max_draft_len", 20),
        ),
        "build.max_draft_len",
        "allowed: 23",
    ),
    (
        "lookahead-window-zero",
        _set("speculative", {"method": "lookahead", "window": 0}),
        "speculative.window",
        "greater than 0",
    ),
    ("draft-too-small", _set("build.max_draft_len", 2), "build.max_draft_len", ">= 3"),
    (
        "none-with-draft",
        _many(_set("speculative", {"method": "none"}), _set("build.max_draft_len", 4)),
        "build.max_draft_len",
        "allowed: 0",
    ),
    ("seq-vs-input", _set("build.max_seq_len", 1024), "build.max_seq_len", "must exceed max_input_len"),
    ("tokens-per-block", _set("build.tokens_per_block", 48), "build.tokens_per_block", "power of two"),
    ("batch-negative", _set("build.max_batch_size", -1), "build.max_batch_size", "greater than 0"),
    (
        "num-tokens",
        _many(_set("build.max_num_tokens", 16), _set("build.max_batch_size", 8)),
        "build.max_num_tokens",
        ">= 32",
    ),
    ("tp-heads", _many(_set("parallelism.tp", 3), _set("target.gpus", 3)), "parallelism.tp", "1, 2, 4, 8"),
    ("tp-kv-heads", _many(_set("parallelism.tp", 16), _set("target.gpus", 16)), "parallelism.tp", "num_kv_heads=8"),
    ("gpus-mismatch", _set("parallelism.tp", 2), "target.gpus", "tp × pp = 2"),
    ("fp8-a100", _set("target.device", "a100"), "quantization.mode", "compute capability"),
    (
        "fp8-kv-a100",
        _many(_set("target.device", "a100"), _set("quantization.mode", "none"), _set("quantization.kv_cache", "fp8")),
        "quantization.kv_cache",
        "8.0",
    ),
    # TensorRT's KV-cache update takes float32/float16/bfloat16 caches only: no FP8 KV on the own backend
    (
        "fp8-kv-own-tensorrt",
        _set("quantization.kv_cache", "fp8"),
        "quantization.kv_cache",
        "allowed: model_dtype, or target.backend: trtllm",
    ),
    (
        "fp8-kv-own-tensorrt-explicit",
        _many(_set("quantization.kv_cache", "fp8"), _set("target.backend", "tensorrt")),
        "quantization.kv_cache",
        "float32/float16/bfloat16",
    ),
    ("device-literal", _set("target.device", "tpu"), "target.device", "'h200'"),
    (
        "backend-cpu-trt",
        _many(_set("target.device", "cpu"), _set("target.backend", "tensorrt")),
        "target.backend",
        "onnxruntime",
    ),
    ("backend-gpu-ort", _set("target.backend", "onnxruntime"), "target.backend", "tensorrt"),
    ("cpu-tp", _many(_set("target.device", "cpu"), _set("parallelism.tp", 2)), "parallelism", "tp and pp must be 1"),
    (
        "kv-fraction",
        _set("triton.kv_cache_free_gpu_mem_fraction", 1.5),
        "triton.kv_cache_free_gpu_mem_fraction",
        "less than or equal to 1",
    ),
    ("model-name", _set("triton.model_name", "bad name!"), "triton.model_name", "pattern"),
    ("port-range", _set("triton.ports.http", 70000), "triton.ports.http", "less than 65536"),
    ("bench-concurrency", _set("bench.concurrency", [1, 0]), "bench.concurrency.1", "greater than 0"),
    ("bench-empty", _set("bench.concurrency", []), "bench.concurrency", "at least 1"),
    (
        "arch-heads",
        _set("model.architecture.num_attention_heads", 0),
        "model.architecture.num_attention_heads",
        "greater than 0",
    ),
    ("arch-missing", _del("model.architecture.vocab_size"), "model.architecture.vocab_size", "required"),
    ("section-not-mapping", _set("build", [1, 2]), "build", "valid dictionary"),
    # every number has a bound an engine can represent, shown as the allowed range
    ("seq-len-beyond-int32", _set("build.max_seq_len", 2**31), "build.max_seq_len", "allowed: 1..1048576"),
    ("input-len-huge", _set("build.max_input_len", 10**30), "build.max_input_len", "allowed: 1..1048576"),
    ("num-tokens-huge", _set("build.max_num_tokens", 2**40), "build.max_num_tokens", "allowed: 1..16777216"),
    ("draft-len-huge", _set("build.max_draft_len", 10**6), "build.max_draft_len", "allowed: 0..2048"),
    (
        "vocab-huge",
        _set("model.architecture.vocab_size", 2**32),
        "model.architecture.vocab_size",
        "allowed: 1..1048576",
    ),
    ("rope-nan", _set("model.architecture.rope_theta", float("nan")), "model.architecture.rope_theta", "finite number"),
    ("rope-inf", _set("model.architecture.rope_theta", float("inf")), "model.architecture.rope_theta", "0 < x ≤ 1e+12"),
    ("reserve-inf", _set("target.runtime_reserve_gib", float("-inf")), "target.runtime_reserve_gib", "finite number"),
    (
        "kv-fraction-nan",
        _set("triton.kv_cache_free_gpu_mem_fraction", float("nan")),
        "triton.kv_cache_free_gpu_mem_fraction",
        "0 < x ≤ 1",
    ),
    (
        "queue-delay-huge",
        _set("triton.max_queue_delay_us", 10**12),
        "triton.max_queue_delay_us",
        "allowed: 0..60000000",
    ),
    (
        "window-ms-huge",
        _set("bench.measurement_window_ms", 10**10),
        "bench.measurement_window_ms",
        "allowed: 1..3600000",
    ),
    ("concurrency-item-huge", _set("bench.concurrency", [1, 10**9]), "bench.concurrency.1", "allowed: 1..4096"),
    ("concurrency-too-many", _set("bench.concurrency", list(range(1, 100))), "bench.concurrency", "at most 64"),
    ("output-len-huge", _set("bench.output_len", 2**31), "bench.output_len", "allowed: 1..1048576"),
    (
        "checkpoint-too-long",
        _set("model.checkpoint", "hf://a/" + "b" * 5000),
        "model.checkpoint",
        "at most 4096 characters",
    ),
    ("tree-too-big", _set("speculative.tree", [[i] for i in range(1025)]), "speculative.tree", "at most 1024"),
    ("tree-rank-huge", _set("speculative.tree", [[0], [10**40]]), "speculative.tree", "ranks 0..1023"),
    (
        "lookahead-window-huge",
        _set("speculative", {"method": "lookahead", "window": 10**20}),
        "speculative.window",
        "allowed: 1..64",
    ),
    (
        "eagle-depth-huge",
        _set("speculative", {"method": "eagle", "checkpoint": "hf://a/b", "tree": {"type": "dynamic", "depth": 2**63}}),
        "speculative.tree.depth",
        "allowed: 1..16",
    ),
]


@pytest.mark.parametrize("mutate,field,expect", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_recipe(tmp_path, mutate, field, expect):
    data = good()
    mutate(data)
    path = write(tmp_path / "recipe.yaml", data)
    result = run("validate", str(path))
    out = result.stderr
    assert result.exit_code == 2, (result.output, out)
    assert "Traceback" not in out and "Traceback" not in result.output
    assert f": {field}: " in out, out
    assert expect in out, out
    assert str(path) in out or "recipe.yaml:" in out, out  # located in the file


def test_good_recipe_is_ok(tmp_path):
    path = write(tmp_path / "recipe.yaml", good())
    result = run("validate", str(path))
    assert result.exit_code == 0, result.stderr
    assert "ok:" in result.output


def test_line_and_column_point_at_the_value(tmp_path):
    text = "model:\n  checkpoint: hf://a/b\n  architecture: null\n  dtype: bf17\n"
    path = write(tmp_path / "r.yaml", text)
    result = run("validate", str(path))
    assert result.exit_code == 2
    assert "r.yaml:4:10: model.dtype: " in result.stderr


def test_all_errors_reported_at_once(tmp_path):
    data = good()
    data["model"]["dtype"] = "x"
    data["target"]["device"] = "y"
    result = run("validate", str(write(tmp_path / "r.yaml", data)))
    assert result.exit_code == 2
    assert "model.dtype" in result.stderr and "target.device" in result.stderr


@pytest.mark.parametrize(
    "text,expect",
    [
        ("model: [unclosed\n", "invalid YAML"),
        ("- a list\n", "must be a mapping"),
        ("model: !!python/object:os.system {}\n", "YAML tag !!python/object:os.system is not allowed"),
    ],
)
def test_malformed_yaml(tmp_path, text, expect):
    result = run("validate", str(write(tmp_path / "r.yaml", text)))
    assert result.exit_code == 2
    assert expect in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_file():
    result = run("validate", "/nonexistent/recipe.yaml")
    assert result.exit_code == 2
    assert "recipe not found" in result.stderr


def test_speculation_with_big_batch_warns(tmp_path):
    data = good()
    data["build"]["max_batch_size"] = 128
    data["build"]["max_num_tokens"] = 16384
    result = run("validate", str(write(tmp_path / "r.yaml", data)))
    assert result.exit_code == 0, result.stderr
    assert "warning:" in result.stderr and "build.max_batch_size" in result.stderr
    strict = run("validate", "--strict", str(tmp_path / "r.yaml"))
    assert strict.exit_code == 2


def test_fp8_kv_cache_is_refused_only_on_the_own_tensorrt_backend(tmp_path):
    """TensorRT-LLM keeps an FP8 KV cache; the own TensorRT backend cannot (TensorRT's KV-cache update takes
    float32/float16/bfloat16 caches only) and says where to go instead."""
    data = good()
    data["quantization"]["kv_cache"] = "fp8"
    refused = run("validate", str(write(tmp_path / "own.yaml", data)))
    assert refused.exit_code == 2 and "Traceback" not in refused.stderr
    assert ": quantization.kv_cache: " in refused.stderr and "target.backend: trtllm" in refused.stderr
    data["target"]["backend"] = "trtllm"
    data["speculative"]["verification"] = "greedy"
    accepted = run("validate", str(write(tmp_path / "trtllm.yaml", data)))
    assert accepted.exit_code == 0, accepted.stderr
