#!/usr/bin/env python3
"""What could still move the tiny fixture's n-gram margin, measured (not a test): three checks in one run.

    .venv/bin/python scripts/bench_tiny_limits.py [--parts lm_head,attention,replay] [--rows 1,2,4,8,12,16,24]
        [--past 300] [--runs 300] [--num-prompts 20] [--max-new-tokens 128] [--out out/bench_tiny_limits.json]

1. lm_head — the fixture's LM head (256 × 4096) as our graphs run it (float32 MatMul) against an int8 MatMulNBits
   (block 32, accuracy level 4: int8 activations and dot products, as `speculative.draft_weights: int8` makes the
   drafts), M = rows of a chain step; one thread, the two sessions alternating, medians; GFLOP/s of the float32 one.
2. attention — GroupQueryAttention as the engine runs it (per-head kernel, rotary inside, in-place KV, past `--past`)
   against a bare folded core over the same sizes (the 4 query heads of each KV head as 4·T rows: FusedMatMul(QKᵀ),
   Add(bias), Softmax, MatMul(V); no rotary, no cache write, no slicing: less work than any real replacement).
3. replay — HF greedy decodes of HumanEval's first prompts, replayed (`builder.tune.ngram.replay`) under the n-gram
   recipe's setting and charged the tiny-llama3-ngram engine's step curve, timed at batch 1 right before (as
   `trtspec tune --curve now` does; builder.engines.step_curve.measure_folder): tokens per ms of
   the recipe's setting, of the best setting in the tuner's grid, of a perfect draft-length oracle (each step drafts
   exactly what it will accept), and of a REST-style datastore (the shared pool seeded with the fixture's training
   text before the first prompt).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path
from typing import Any

import numpy as np

from builder.timing import alternate, markdown_table

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "tiny-llama3" / "base"


def _session(nodes: list[Any], inputs: list[Any], outputs: list[Any], inits: list[Any]) -> Any:
    import onnxruntime as ort  # type: ignore[import-untyped]
    from onnx import helper

    from builder.engines.ort.session import gqa_per_head_kernel, session_options

    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    with gqa_per_head_kernel():
        return ort.InferenceSession(model.SerializeToString(), session_options(1), providers=["CPUExecutionProvider"])


def _alternate(calls: dict[str, Any], runs: int) -> dict[str, float]:
    """Median µs per call, the calls alternating one by one."""
    return {k: statistics.median(v) * 1e6 for k, v in alternate(calls, runs).items()}


def lm_head(rows: list[int], runs: int) -> list[dict[str, Any]]:
    from onnx import TensorProto as TP
    from onnx import helper, numpy_helper
    from safetensors.numpy import load_file

    from builder.export.nbits import ACCURACY_LEVEL, BLOCK, quantize_blocks

    w = np.ascontiguousarray(load_file(str(FIXTURE / "model.safetensors"))["lm_head.weight"].T)  # [K, N]
    k, n = w.shape
    packed, scales, _ = quantize_blocks(w, 8)
    x = helper.make_tensor_value_info("x", TP.FLOAT, [None, k])
    y = helper.make_tensor_value_info("y", TP.FLOAT, [None, n])
    fp32 = _session([helper.make_node("MatMul", ["x", "w"], ["y"])], [x], [y], [numpy_helper.from_array(w, "w")])
    int8 = _session(
        [
            helper.make_node(
                "MatMulNBits",
                ["x", "p", "s"],
                ["y"],
                domain="com.microsoft",
                K=k,
                N=n,
                bits=8,
                block_size=BLOCK,
                accuracy_level=ACCURACY_LEVEL,
            )
        ],
        [x],
        [y],
        [numpy_helper.from_array(packed, "p"), numpy_helper.from_array(scales, "s")],
    )
    out = []
    for m in rows:
        a = np.random.default_rng(m).standard_normal((m, k)).astype(np.float32)
        us = _alternate({"fp32": lambda: fp32.run(None, {"x": a}), "int8": lambda: int8.run(None, {"x": a})}, runs)
        out.append(
            {"rows": m, "fp32_us": us["fp32"], "int8_us": us["int8"], "fp32_gflops": 2 * m * k * n / us["fp32"] / 1e3}
        )
    return out


def attention(rows: list[int], past: int, runs: int) -> list[dict[str, Any]]:
    import onnxruntime as ort  # type: ignore[import-untyped]
    from onnx import TensorProto as TP
    from onnx import helper, numpy_helper

    cfg = json.loads((FIXTURE / "config.json").read_text())
    h, kv, d = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    cap, g = 1024, h // kv
    rng = np.random.default_rng(0)
    cos, sin = (rng.standard_normal((cap, d // 2)).astype(np.float32) for _ in range(2))
    f, i32, i64 = TP.FLOAT, TP.INT32, TP.INT64
    info = helper.make_tensor_value_info
    gqa = _session(
        [
            helper.make_node(
                "GroupQueryAttention",
                ["qkv", "", "", "pk", "pv", "sk", "tot", "cos", "sin", "pos", "", "", "", "", "", "", "qs"],
                ["y", "pk_o", "pv_o"],
                domain="com.microsoft",
                num_heads=h,
                kv_num_heads=kv,
                do_rotary=1,
                causal=1,
            )
        ],
        [
            info("qkv", f, [1, None, (h + 2 * kv) * d]),
            info("pk", f, [1, kv, cap, d]),
            info("pv", f, [1, kv, cap, d]),
            info("sk", i32, [1]),
            info("tot", i32, []),
            info("pos", i64, [1, None]),
            info("qs", i32, [1]),
        ],
        [info(o, f, None) for o in ("y", "pk_o", "pv_o")],
        [numpy_helper.from_array(cos, "cos"), numpy_helper.from_array(sin, "sin")],
    )
    core = _session(
        [
            helper.make_node("FusedMatMul", ["q", "k"], ["s"], domain="com.microsoft", transB=1, alpha=d**-0.5),
            helper.make_node("Add", ["s", "bias"], ["sb"]),
            helper.make_node("Softmax", ["sb"], ["p"], axis=-1),
            helper.make_node("MatMul", ["p", "v"], ["y"]),
        ],
        [
            info("q", f, [kv, None, d]),
            info("k", f, [kv, None, d]),
            info("v", f, [kv, None, d]),
            info("bias", f, [None, None]),
        ],
        [info("y", f, None)],
        [],
    )
    pk, pv = (rng.standard_normal((1, kv, cap, d)).astype(np.float32) for _ in range(2))
    out = []
    for t in rows:
        io = gqa.io_binding()
        feeds = {
            "qkv": rng.standard_normal((1, t, (h + 2 * kv) * d)).astype(np.float32),
            "sk": np.array([past + t - 1], np.int32),
            "tot": np.array(past + t, np.int32),
            "pos": np.arange(past, past + t)[None].astype(np.int64),
            "qs": np.array([t], np.int32),
        }
        for name, v in feeds.items():
            io.bind_cpu_input(name, v)
        caches = [ort.OrtValue.ortvalue_from_numpy(c) for c in (pk, pv)]
        for (src, dst), c in zip((("pk", "pk_o"), ("pv", "pv_o")), caches):
            io.bind_ortvalue_input(src, c)
            io.bind_ortvalue_output(dst, c)
        io.bind_output("y")
        s = past + t
        bias = np.where(np.arange(s)[None] <= past + np.tile(np.arange(t), g)[:, None], 0, -np.inf).astype(np.float32)
        folded = {
            "q": rng.standard_normal((kv, g * t, d)).astype(np.float32),
            "k": pk[0, :, :s].copy(),
            "v": pv[0, :, :s].copy(),
            "bias": bias,
        }
        us = _alternate({"gqa": lambda: gqa.run_with_iobinding(io), "core": lambda: core.run(None, folded)}, runs)
        out.append({"T": t, "gqa_us": us["gqa"], "folded_core_us": us["core"]})
    return out


def replay_limits(num_prompts: int, max_new: int) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM

    from builder.data.corpus import load_corpus
    from builder.data.humaneval import heldout_prompts
    from builder.engines.step_curve import measure_folder
    from builder.recipe.loader import load_recipe
    from builder.speculative.ngram.pool import shared_pool_for
    from builder.stages.decoders import cache_dir
    from builder.stages.parts import load_tokenizer
    from builder.stages.runner import build
    from builder.tune.curve import StepCurve
    from builder.tune.ngram import TUNER, grid, replay

    recipe = load_recipe(REPO / "recipes" / "tiny-llama3-ngram.yaml")
    folder = build(recipe, cache_dir(), until="engine").folder("engine")
    curve = StepCurve.from_json(measure_folder(folder, 1))  # timed now, as `trtspec tune --curve now` does
    setting = TUNER.current(recipe)
    tok = load_tokenizer(FIXTURE)
    model = AutoModelForCausalLM.from_pretrained(str(FIXTURE), dtype=torch.float32).eval()
    settings = grid(setting, curve.max_nodes)
    extra = max(s["max_draft"] for s in settings) + 1
    texts = []
    for prompt in heldout_prompts(num_prompts):
        ids = tok.encode(prompt).ids
        with torch.no_grad():
            out = model.generate(
                torch.tensor([ids]), max_new_tokens=max_new + extra, do_sample=False, eos_token_id=None, pad_token_id=1
            )
        texts.append((ids, out[0, len(ids) :].tolist()))

    def per_ms(nodes: Any, tokens: int) -> float:
        return tokens / sum(curve.target_ms(1, t) for t in nodes)

    runs = [(s, replay(texts, s, max_new)) for s in settings]
    base = next((r for s, r in runs if s == setting), None) or replay(texts, setting, max_new)
    scored = sorted(((per_ms(r.nodes, r.tokens), s) for s, r in runs), key=lambda x: -x[0])
    oracle = per_ms([a + 1 for a in base.accepted], base.tokens)
    docs = [tok.encode(f.text).ids for f in load_corpus().train]
    pool = shared_pool_for(setting["max_match"], capacity=2 * sum(map(len, docs)) + (1 << 16))  # room for all of it
    for d in docs:
        pool.add(d)
    store = replay(texts, {**setting, "shared_pool": True}, max_new, pool=pool)
    return {
        "setting": setting,
        "curve_c1_ms": curve.target_ms(1, 1),
        "curve_cmax_ms": curve.target_ms(1, curve.max_nodes),
        "curve_max_nodes": curve.max_nodes,
        "recipe": {
            "tokens_per_ms": per_ms(base.nodes, base.tokens),
            "tau": base.tau,
            "mean_nodes": float(np.mean(base.nodes)),
        },
        "grid_best": {"tokens_per_ms": scored[0][0], "setting": scored[0][1]},
        "length_oracle": {"tokens_per_ms": oracle},
        "datastore": {
            "tokens_per_ms": per_ms(store.nodes, store.tokens),
            "tau": store.tau,
            "mean_nodes": float(np.mean(store.nodes)),
            "training_tokens": sum(map(len, docs)),
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="lm_head,attention,replay")
    ap.add_argument("--rows", default="1,2,4,8,12,16,24", help="M (LM head rows) and T (attention rows)")
    ap.add_argument("--past", type=int, default=300)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--num-prompts", type=int, default=20)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--out", type=Path, default=REPO / "out" / "bench_tiny_limits.json")
    args = ap.parse_args()
    parts, known = set(args.parts.split(",")), {"lm_head", "attention", "replay"}
    if not parts <= known:
        ap.error(f"--parts: unknown {sorted(parts - known)} (allowed: {', '.join(sorted(known))})")
    try:
        rows = [int(x) for x in args.rows.split(",") if x]
    except ValueError:
        ap.error(f"--rows: comma-separated positive integers, got {args.rows!r}")
    if not rows or min(rows) < 1 or args.runs < 1 or args.past < 0 or args.num_prompts < 1 or args.max_new_tokens < 1:
        ap.error("--rows, --runs, --num-prompts and --max-new-tokens must be positive, --past at least 0")
    report: dict[str, Any] = {"benchmark": "bench_tiny_limits", "load_avg": os.getloadavg(), "past": args.past}
    if "lm_head" in parts:
        report["lm_head"] = lm_head(rows, args.runs)
        head = ("LM head rows", "float32 MatMul µs (GFLOP/s)", "int8 MatMulNBits µs", "int8 / float32")
        cells = [
            (
                r["rows"],
                f"{r['fp32_us']:.1f} ({r['fp32_gflops']:.0f})",
                f"{r['int8_us']:.1f}",
                f"{r['int8_us'] / r['fp32_us']:.2f}",
            )
            for r in report["lm_head"]
        ]
        print("\n".join(markdown_table(head, cells)))
    if "attention" in parts:
        report["attention"] = attention(rows, args.past, args.runs)
        cells = [
            (r["T"], f"{r['gqa_us']:.1f}", f"{r['folded_core_us']:.1f}", f"{r['folded_core_us'] / r['gqa_us']:.2f}")
            for r in report["attention"]
        ]
        print("\n" + "\n".join(markdown_table(("T", "GroupQueryAttention µs", "folded core µs", "core / GQA"), cells)))
    if "replay" in parts:
        rep = report["replay"] = replay_limits(args.num_prompts, args.max_new_tokens)
        base = rep["recipe"]["tokens_per_ms"]
        print(
            f"\nreplay on the engine's curve (c(1) {rep['curve_c1_ms']:.2f} ms, "
            f"c({rep['curve_max_nodes']}) {rep['curve_cmax_ms']:.2f} ms):"
        )
        settings = (
            ("the recipe's", "recipe"),
            ("best of the tuner's grid", "grid_best"),
            ("perfect draft-length oracle", "length_oracle"),
            ("training-text datastore", "datastore"),
        )
        cells = [
            (label, f"{rep[k]['tokens_per_ms']:.3f}", f"{rep[k]['tokens_per_ms'] / base:.3f}×") for label, k in settings
        ]
        print("\n".join(markdown_table(("setting", "tokens per ms", "vs the recipe's"), cells)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=str))
    print(f"\nJSON: {args.out}")


if __name__ == "__main__":
    main()
