"""The step-cost curve of an engine folder, timed on this host: engine.json's "step_curve", read back by
`builder.tune.curve.StepCurve` (what `trtspec tune` weighs E[τ] by), and where it was measured (`host_about`).

For every batch size b (`batch_grid`) and tree size T (`size_grid`, up to the nodes the engine has room for) one
target step over b sequences with a T-node chain each is timed: the median of a few steps after one warm-up
(bindings are built on first use), after a random prompt of CURVE_PAST tokens per sequence. A chain costs what any
T-node tree costs: the graph's work depends on T, not on the mask's shape. EAGLE engines also time their draft
graph: `expand` over F tentative nodes and `extend` committing M pairs, each as a decoding loop runs it —
`extend`, a step's first draft call, right after a plain target step (`plain_steps`), whose weights stream through
the cache first (a regime fixture's draft level stays in the L3 only back to back: its int8 extend took
0.17-0.29 ms so, 0.52-0.81 ms after a target step), the `expand` levels back to back, as they follow one another.
Bounded: each point gets budget / points seconds (MIN..MAX_REPEATS steps, plus the target steps before each
extend), so a tiny engine's curve costs about a second. Token ids are drawn from the target's vocabulary, the one
the draft graph's token inputs index too (the EAGLE draft embeds target tokens).

The engine stage times an ONNX Runtime folder as it builds it, as TensorRT times tactics (`builder.stages.engine`);
`trtspec tune --curve now` times it again right before it measures the host's share of a step. Both run through
the `Engine` / `EagleNet` protocols (`builder.speculative.protocols`), so any engine host layer can be timed here.
"""

from __future__ import annotations

import contextlib
import os
import platform
from pathlib import Path
from typing import Any, Callable, Iterator

from builder.timing import median_ms

CURVE_BUDGET_S = 1.0  # seconds of target steps timed per engine (plus half that for an EAGLE draft graph)
MIN_REPEATS, MAX_REPEATS = 3, 15
CURVE_PAST = 128  # prompt tokens before the timed steps (HumanEval prompts are ~100-200 tokens)


def size_grid(room: int) -> list[int]:
    """Tree sizes to time for an engine with room for `room` nodes: every size to 8, then ~1.25x apart, and room."""
    sizes, n = [], 1
    while n < room:
        sizes.append(n)
        n = n + 1 if n < 8 else max(n + 1, round(n * 1.25))
    return sizes + [room]


def batch_grid(max_batch: int) -> list[int]:
    """Batch sizes to time: powers of two below max_batch, and max_batch."""
    out, b = [], 1
    while b < max_batch:
        out.append(b)
        b *= 2
    return out + [max_batch]


def point_ms(fn: Callable[[], Any], seconds: float, before: Callable[[], Any] | None = None) -> float:
    """Median ms of fn() over MIN..MAX_REPEATS calls fitting in `seconds`, after one warm-up call; `before`: run
    (untimed) before each call."""
    return median_ms(fn, seconds, min_repeats=MIN_REPEATS, max_repeats=MAX_REPEATS, before=before)


def _start(engine: Any, b: int, past: int, rng: Any) -> tuple[list[int], list[int]]:
    from builder.speculative.protocols import SamplingBatch

    seqs, pre = engine.start(
        [rng.integers(0, engine.vocab_size, past).tolist() for _ in range(b)], SamplingBatch.all_greedy(b, 1)
    )
    return seqs, [int(x) for x in pre.tokens]


def target_table(engine: Any, sizes: list[int], batches: list[int], budget_s: float) -> dict[str, dict[str, float]]:
    """{batch: {T: median ms of one step}} over the `Engine` protocol; sequences restart before they would overflow."""
    import numpy as np

    from builder.speculative.protocols import Draft, SamplingBatch
    from builder.speculative.tree import tree_from_parents

    rng = np.random.default_rng(0)
    per_point, most = budget_s / (len(sizes) * len(batches)), (MAX_REPEATS + 1) * max(sizes)
    past = max(1, min(CURVE_PAST, engine.max_seq_len - most - 1))  # a fresh start always fits
    out: dict[str, dict[str, float]] = {}
    for b in batches:
        seqs, roots = _start(engine, b, past, rng)
        out[str(b)] = {}
        for t in sizes:
            if max(engine.committed_len(s) for s in seqs) + (MAX_REPEATS + 1) * t + 1 > engine.max_seq_len:
                for s in seqs:
                    engine.release(s)
                seqs, roots = _start(engine, b, past, rng)
            tree, greedy = tree_from_parents([-1] + list(range(t - 1))), SamplingBatch.all_greedy(b, t)

            def step() -> None:
                drafts = [
                    Draft(
                        np.concatenate([[r], rng.integers(0, engine.vocab_size, t - 1)]).astype(np.int64),
                        tree.mask,
                        tree.depth,
                        tree.paths,
                    )
                    for r in roots
                ]
                res = engine.step(seqs, drafts, greedy)
                roots[:] = [int(res.tokens[i, int(res.accepted_len[i]) - 1]) for i in range(b)]

            out[str(b)][str(t)] = round(point_ms(step, per_point), 5)
        for s in seqs:
            engine.release(s)
    return out


def draft_tables(
    net: Any,
    vocab_size: int,
    widths: list[int],
    pairs: list[int],
    batches: list[int],
    budget_s: float,
    after_target: Callable[[], Any] | None = None,
) -> tuple[dict, dict]:
    """({batch: {F: ms}}, {batch: {M: ms}}) of an `EagleNet`'s expand (F tentative nodes) and extend (M pairs),
    fed token ids from [0, vocab_size) (the vocabulary its token inputs index: the target's); each extend timed
    right after `after_target()` (a target step, as in a decoding loop; module docstring)."""
    import numpy as np

    rng = np.random.default_rng(0)
    per_point = budget_s / ((len(widths) + len(pairs)) * len(batches))
    expand: dict[str, dict[str, float]] = {}
    extend: dict[str, dict[str, float]] = {}
    for b in batches:
        seqs = list(range(10_000, 10_000 + b))  # sequence ids of our own: the net keeps its own rows
        net.start(seqs)
        tokens = rng.integers(0, vocab_size, (b, CURVE_PAST)).astype(np.int64)  # [B, M]
        hidden = rng.standard_normal((b, CURVE_PAST, net.hidden_size)).astype(np.float32)  # [B, M, C]
        net.extend(seqs, tokens, hidden, np.full(b, CURVE_PAST, dtype=np.int64))
        expand[str(b)], extend[str(b)] = {}, {}
        for f in widths:
            pos = np.array([[net.committed_len(s)] * f for s in seqs], dtype=np.int64)  # [B, F]
            mask = np.broadcast_to(np.eye(f, dtype=bool), (b, f, f)).copy()  # [B, F, F] each node itself
            toks, hid = tokens[:, :1].repeat(f, 1), hidden[:, :1].repeat(f, 1)
            expand[str(b)][str(f)] = round(point_ms(lambda: net.expand(seqs, toks, hid, pos, 0, mask), per_point), 5)
        for m in pairs:
            if max(net.committed_len(s) for s in seqs) + (MAX_REPEATS + 1) * m + 1 > net.capacity:
                break
            toks, hid, n = tokens[:, :m], hidden[:, :m], np.full(b, m, dtype=np.int64)
            extend[str(b)][str(m)] = round(point_ms(lambda: net.extend(seqs, toks, hid, n), per_point, after_target), 5)
        for s in seqs:
            net.release(s)
    return expand, extend


@contextlib.contextmanager
def plain_steps(engine: Any) -> Iterator[Callable[[], None]]:
    """A callable that runs one plain target step (T = 1) of a sequence of its own (restarted before it would
    overflow, released at the end): what precedes a step's first draft call in a decoding loop."""
    import numpy as np

    from builder.speculative.protocols import Draft, SamplingBatch
    from builder.speculative.tree import tree_from_parents

    rng, tree, greedy = np.random.default_rng(1), tree_from_parents([-1]), SamplingBatch.all_greedy(1, 1)
    state: dict[str, int] = {}

    def step() -> None:
        if not state or engine.committed_len(state["seq"]) + 2 > engine.max_seq_len:
            if state:
                engine.release(state["seq"])
            seqs, roots = _start(engine, 1, CURVE_PAST, rng)
            state.update(seq=seqs[0], root=roots[0])
        draft = Draft(np.array([state["root"]], np.int64), tree.mask, tree.depth, tree.paths)
        state["root"] = int(engine.step([state["seq"]], [draft], greedy).tokens[0, 0])

    try:
        yield step
    finally:
        if state:
            engine.release(state["seq"])


def host_about(threads: int) -> dict[str, Any]:
    """Where a curve was measured (a curve from another host does not describe this one): the CPU's model name,
    the instruction-set level its kernels run at (`isa_level`) and the threads."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cpu": cpu, "isa": isa_level(), "cpus": os.cpu_count(), "threads": threads, "past": CURVE_PAST}


def isa_level() -> str:
    """The x86-64 level (v1-v4: v3 = AVX2 + FMA, v4 = AVX-512) this process's CPUID reports, as ONNX Runtime's
    MLAS and NumPy pick their kernels by it: a virtual machine can hide AVX-512 and keep the CPU's model name,
    and its fp32 steps then run at about half the FLOP per cycle (README: "Other x86 CPUs"). NumPy's view of
    CPUID; the machine name elsewhere."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:  # NumPy < 2
        try:
            from numpy.core._multiarray_umath import __cpu_features__ as features  # type: ignore[no-redef]
        except ImportError:
            return platform.machine()
    levels = [v for v in (4, 3, 2) if features.get(f"X86_V{v}")]
    if levels:
        return f"x86-64-v{levels[0]}"
    return "x86-64" if features.get("SSE2") else platform.machine()


def measure_folder(folder: Path, max_batch: int, threads: int = 1, budget_s: float = CURVE_BUDGET_S) -> dict[str, Any]:
    """The step curve (engine.json form) of an ONNX Runtime engine folder: its target graph for T = 1..room and,
    for EAGLE, its draft graph, opened with room for `max_batch` sequences."""
    from builder.engines.ort.eagle import OrtEagleNet
    from builder.engines.ort.load import open_ort_engine

    opened = open_ort_engine(folder, max_batch_size=max_batch, threads=threads, trees=True)
    meta, batches = opened.meta, batch_grid(max_batch)
    room = meta["capacity"] - meta["max_seq_len"]
    target = target_table(opened.engine, size_grid(room), batches, budget_s)
    curve = {
        "source": "measured",
        "unit": "ms",
        "target": target,
        "expand": {},
        "extend": {},
        "about": host_about(threads),
    }
    e = meta.get("eagle")
    if e is not None:  # a level's frontier holds at most room - 1 nodes
        net = OrtEagleNet(
            folder / e["graph"],
            layers=e["layers"],
            kv_heads=e["kv_heads"],
            head_dim=e["head_dim"],
            hidden_size=e["hidden"],
            top_k=e["top_k"],
            capacity=e["capacity"],
            max_batch_size=max_batch,
            threads=threads,
        )
        widths = size_grid(max(room - 1, 1))
        with plain_steps(opened.engine) as after_target:
            curve["expand"], curve["extend"] = draft_tables(
                net, opened.engine.vocab_size, widths, [1, 2, 4, 8], batches, budget_s / 2, after_target
            )
    return curve
