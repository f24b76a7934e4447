"""Step-cost curve: one engine step over T nodes, T = 1…64, beside the roofline floor of this machine.

    floor(T) = max(weight bytes / copy bandwidth, 2 · T · active params / GEMM FLOP/s)

Both rates are measured in the same run on the same thread count (a NumPy copy of 512 MiB; an fp32
torch GEMM of the model's own widths), so the ratio step(T) / floor(T) says how much a step costs
beyond its arithmetic and memory traffic: what per-op dispatch and glue add. Active params are the
ones a step multiplies (decoder linears and the LM head, not the embedding table). The step is the
ORT engine's (`builder.engines.ort`, both graph variants) over a chain of T nodes after a prompt of
`past` tokens, batch 1, timed as the median of repeated steps.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from builder.model.llama import Llama
from builder.speculative.protocols import Draft, SamplingBatch
from builder.speculative.tree import tree_from_parents
from builder.timing import markdown_table, repeat
from devtools.ort_engines import target_engine

TS = (1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64)


def copy_bandwidth(mib: int = 512, repeats: int = 5) -> float:
    """Bytes per second moved by a large NumPy copy (read + write counted), best of `repeats`."""
    src = np.ones(mib * 2**20 // 4, dtype=np.float32)
    dst = np.empty_like(src)
    best = min(repeat(lambda: np.copyto(dst, src), repeats))
    return 2 * src.nbytes / best


def gemm_flops(m: int, k: int, n: int, repeats: int = 5) -> float:
    """fp32 FLOP/s of torch matmul [m, k] @ [k, n] (this thread count), best of `repeats`."""
    a, b = torch.randn(m, k), torch.randn(k, n)
    torch.matmul(a, b)
    best = min(repeat(lambda: torch.matmul(a, b), repeats))
    return 2 * m * k * n / best


def active_params(model: Llama) -> int:
    """Parameters a step multiplies: every linear of the decoder and the LM head (no embedding lookup)."""
    n = sum(p.numel() for name, p in model.named_parameters() if "embed_tokens" not in name)
    if model.cfg.tie_word_embeddings:
        n += model.lm_head.weight.numel()
    return n


def chain(t: int, root: int) -> Draft:
    tree = tree_from_parents([-1] + list(range(t - 1)))
    tokens = np.full(t, root, dtype=np.int64)
    return Draft(tokens, tree.mask, tree.depth, tree.paths)


@dataclass
class Curve:
    variant: str
    step_ms: dict[int, float]


def step_curve(
    model: Llama,
    folder: Path,
    variant: str,
    ts: tuple[int, ...] = TS,
    past: int = 300,
    repeats: int = 30,
    threads: int = 1,
) -> Curve:
    """Median ms of one engine step over a T-node chain, for each T."""
    max_t = max(ts)
    engine = target_engine(
        model, folder, max_seq_len=past + (repeats + 3) * max_t + 8, max_nodes=max_t, variant=variant, threads=threads
    )
    rng = np.random.default_rng(0)
    out: dict[int, float] = {}
    for t in ts:
        (seq,), pre = engine.start(
            [rng.integers(0, model.cfg.vocab_size, past).tolist()], SamplingBatch.all_greedy(1, 1)
        )
        greedy, state = SamplingBatch.all_greedy(1, t), {"root": int(pre.tokens[0]), "res": None}

        def step() -> None:  # (called within this iteration only)
            state["res"] = engine.step([seq], [chain(t, state["root"])], greedy)

        def next_root() -> None:  # untimed: the next chain's root is the last token the step emitted
            if (res := state["res"]) is not None:
                state["root"] = int(res.tokens[0, int(res.accepted_len[0]) - 1])

        times = repeat(step, repeats, warmup=3, before=next_root)  # warm-up: bindings are built on first use
        out[t] = 1e3 * statistics.median(times)
        engine.release(seq)
    return Curve(variant, out)


def report(
    name: str,
    model: Llama,
    folder: Path,
    variants: tuple[str, ...],
    threads: int,
    ts: tuple[int, ...] = TS,
    past: int = 300,
) -> dict[str, Any]:
    torch.set_num_threads(threads)
    c = model.cfg
    bw = copy_bandwidth()
    flops = gemm_flops(64, c.hidden_size, c.intermediate_size)
    params = active_params(model)
    weight_bytes = params * 4
    floor = {t: 1e3 * max(weight_bytes / bw, 2 * t * params / flops) for t in ts}
    curves = [step_curve(model, folder / v, v, ts, past, threads=threads) for v in variants]
    rows = [
        {
            "T": t,
            "floor_ms": round(floor[t], 4),
            **{f"{cv.variant}_ms": round(cv.step_ms[t], 4) for cv in curves},
            **{f"{cv.variant}_x_floor": round(cv.step_ms[t] / floor[t], 2) for cv in curves},
        }
        for t in ts
    ]
    return {
        "model": name,
        "threads": threads,
        "past": past,
        "active_params": params,
        "weight_bytes": weight_bytes,
        "copy_bandwidth_GBps": round(bw / 1e9, 2),
        "gemm_GFLOPs": round(flops / 1e9, 2),
        "gemm_shape": [64, c.hidden_size, c.intermediate_size],
        "rows": rows,
    }


def table(rep: dict[str, Any]) -> str:
    variants = [k[:-3] for k in rep["rows"][0] if k.endswith("_ms") and k != "floor_ms"]
    head = (
        f"{rep['model']}: {rep['active_params'] / 1e6:.1f} M active params ({rep['weight_bytes'] / 2**20:.1f} MiB "
        f"fp32), copy {rep['copy_bandwidth_GBps']} GB/s, GEMM {rep['gemm_GFLOPs']} GFLOP/s, {rep['threads']} "
        f"thread(s), past {rep['past']} tokens"
    )
    header = ["T", "floor ms", *(c for v in variants for c in (f"{v} ms", f"{v} ×floor"))]
    rows = [
        [
            r["T"],
            f"{r['floor_ms']:.3f}",
            *(c for v in variants for c in (f"{r[v + '_ms']:.3f}", f"{r[v + '_x_floor']:.2f}×")),
        ]
        for r in rep["rows"]
    ]
    return "\n".join([head, "", *markdown_table(header, rows)])
