"""Step-time measurement of the exported target graph's variants (used by scripts/bench_export_variants.py).

One target step = one `session.run_with_iobinding` with 1 ORT thread, B rows of T nodes (a random tree)
after `past_len` committed slots, caches bound as shared past/present buffers (in place), greedy graph.
Reported per (variant, T): median and 10th/90th percentile wall time over `repeats` runs after a
warm-up, and node counts (canonical graph, ORT-ready graph, and after ORT's own graph optimizations).
Numbers depend on this machine and its load; the JSON records both.

Measured (2 shared cores, load avg ~1.9; tiny fixture: C 256, 4 layers, 8/2 heads, D 32, V 4096;
past_len 300, CAP 1024, greedy graph, median ms per step, two runs of 500 each):

    B  T    standard   ort          node counts (per layer / whole graph)
    1  1    0.26       0.27-0.28    standard: 22-23 / 138 canonical, 175 ORT-ready (TreeVerify decomposed)
    1  4    0.33-0.34  0.32-0.33    ort:      10    /  90 canonical, 127 ORT-ready
    1  13   0.76-0.78  0.78-0.79    (after ORT's own optimizations: 175 and 115)
    1  24   1.15-1.16  1.21-1.24
    4  1    0.46       0.53
    4  24   4.58       4.64

A tie within ~5 %: the step is GEMM-bound, and the standard variant's extra nodes (reshapes,
transposes, splits, slices on small tensors) cost about what GroupQueryAttention's extra work costs
(measured alone at S = 301: GQA with rotary 20 µs vs Attention 12.5 µs at T = 1). A wider random model
(C 1024, 16/4 heads, D 64, 4 layers, V 8192) ties as well (5.2-5.4 ms at T = 1, 20.4-20.8 ms at T = 24).
Neither variant's step time depends on CAP (512 vs 4096 equal). Per-graph nodes (attention mask,
TreeVerify decomposition, LM head on the verify rows) are ~1/3 of ORT's kernel time at T = 1.

The table above is the `ort` variant before issue 15. The lean `ort` graph (`builder.export.ort_variant`:
61 nodes on the tiny fixture, 10 per layer, an If for plain steps) and its ORT-profiler comparison with
ONNX Runtime GenAI's graph: scripts/profile_step.py (`devtools.bench.profile`).
"""

from __future__ import annotations

import os
import platform
import statistics
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from builder.model.llama import Llama
from builder.timing import repeat


def step_feeds(model: Llama, batch: int, nodes: int, past_len: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs of one greedy step: each row a random topological tree of `nodes` nodes."""
    gen = np.random.default_rng(seed)
    parents = [-1] + [int(gen.integers(max(0, i - 3), i)) for i in range(1, nodes)]
    mask = np.eye(nodes, dtype=bool)  # [T, T] ancestor-or-self
    for i in range(1, nodes):
        mask[i] |= mask[parents[i]]
    depth = mask.sum(1) - 1  # [T]
    leaves = [i for i in range(nodes) if i not in set(parents[1:])]
    width = int(depth.max()) + 1
    paths = np.full((len(leaves), width), -1, np.int32)  # [P, W]
    for p, leaf in enumerate(leaves):
        chain = np.flatnonzero(mask[leaf])  # ancestors in topological (= depth) order
        paths[p, : len(chain)] = chain
    tile = lambda x: np.ascontiguousarray(np.broadcast_to(x, (batch, *x.shape)))  # noqa: E731
    return dict(
        tokens=gen.integers(0, model.cfg.vocab_size, (batch, nodes)).astype(np.int64),
        position_ids=tile(past_len + depth.astype(np.int64)),
        tree_mask=tile(mask),
        past_len=np.full(batch, past_len, np.int64),
        num_nodes=np.full(batch, nodes, np.int64),
        verify_index=tile(np.arange(nodes, dtype=np.int64)),
        paths=tile(paths),
    )


class StepTimer:
    """An ORT session over one exported graph with preallocated caches bound in place."""

    def __init__(
        self, graph: Path, model: Llama, batch: int, capacity: int, optimized: Path | None = None, threads: int = 1
    ) -> None:
        import onnxruntime as ort  # type: ignore[import-untyped]

        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        so.log_severity_level = 3
        if optimized is not None:
            so.optimized_model_filepath = str(optimized)
        self.sess = ort.InferenceSession(str(graph), so, providers=["CPUExecutionProvider"])
        cfg = model.cfg
        gen = np.random.default_rng(1)
        shape = (cfg.num_hidden_layers, batch, cfg.num_key_value_heads, capacity, cfg.head_dim)
        self.k = gen.standard_normal(shape, dtype=np.float32)  # finite values everywhere (contract)
        self.v = gen.standard_normal(shape, dtype=np.float32)
        self.cache = [
            (ort.OrtValue.ortvalue_from_numpy(self.k[i]), ort.OrtValue.ortvalue_from_numpy(self.v[i]))
            for i in range(cfg.num_hidden_layers)
        ]

    def time(self, feeds: dict[str, np.ndarray], warmup: int, repeats: int) -> list[float]:
        io = self.sess.io_binding()
        for name, value in feeds.items():
            io.bind_cpu_input(name, value)
        for i, (k, v) in enumerate(self.cache):
            io.bind_ortvalue_input(f"past_key_{i}", k)
            io.bind_ortvalue_output(f"present_key_{i}", k)
            io.bind_ortvalue_input(f"past_value_{i}", v)
            io.bind_ortvalue_output(f"present_value_{i}", v)
        for out in self.sess.get_outputs():
            if not out.name.startswith("present_"):
                io.bind_output(out.name)
        return repeat(lambda: self.sess.run_with_iobinding(io), repeats, warmup=warmup)


def bench_variants(
    model: Llama,
    *,
    variants: tuple[str, ...],
    nodes: tuple[int, ...],
    past_len: int,
    batch: int,
    capacity: int,
    warmup: int,
    repeats: int,
) -> dict[str, Any]:
    """Export each variant (greedy) into a temp folder and time a step at each node count."""
    import onnx

    from builder.export.graph import node_counts
    from builder.export.target import export_target

    rows, graphs = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for variant in variants:
            res = export_target(model, Path(tmp) / variant, variant=variant, mode="greedy", max_seq_len=capacity)
            optimized = Path(tmp) / f"{variant}.optimized.onnx"
            timer = StepTimer(res.ort, model, batch, capacity, optimized)
            opt = node_counts(onnx.load(str(optimized), load_external_data=False))
            graphs[variant] = {
                "canonical": res.node_counts["canonical"].as_dict(),
                "ort": res.node_counts["ort"].as_dict(),
                "ort_optimized": opt.as_dict(),
            }
            for t in nodes:
                times = timer.time(step_feeds(model, batch, t, past_len), warmup, repeats)
                q = statistics.quantiles(times, n=10)
                rows.append(
                    {
                        "variant": variant,
                        "T": t,
                        "median_ms": 1e3 * statistics.median(times),
                        "p10_ms": 1e3 * q[0],
                        "p90_ms": 1e3 * q[-1],
                    }
                )
    return {
        "settings": {
            "past_len": past_len,
            "batch": batch,
            "capacity": capacity,
            "warmup": warmup,
            "repeats": repeats,
            "ort_threads": 1,
        },
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "load_avg": os.getloadavg(),
        },
        "graphs": graphs,
        "steps": rows,
    }


def table(report: dict[str, Any]) -> str:
    """The step timings and node counts as a plain-text table."""
    s = report["settings"]
    lines = [
        f"one target step, B={s['batch']}, past_len={s['past_len']}, CAP={s['capacity']}, 1 ORT thread "
        f"(load avg {report['machine']['load_avg'][0]:.2f})",
        "",
        f"{'variant':<9} {'T':>3} {'median ms':>10} {'p10':>7} {'p90':>7}",
    ]
    for r in report["steps"]:
        lines.append(f"{r['variant']:<9} {r['T']:>3} {r['median_ms']:>10.3f} {r['p10_ms']:>7.3f} {r['p90_ms']:>7.3f}")
    lines += ["", f"{'variant':<9} {'graph':<14} {'nodes':>6} {'per layer':<16} {'non-layer':>9}"]
    for variant, graphs in report["graphs"].items():
        for kind, c in graphs.items():
            per = c["per_layer"]
            lines.append(f"{variant:<9} {kind:<14} {c['total']:>6} {str(per):<16} {c['total'] - sum(per):>9}")
    return "\n".join(lines)
