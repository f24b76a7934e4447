"""ONNX Runtime's own profiler on one plain decoding step: our target graph(s) beside ONNX Runtime GenAI's.

One plain step = T=1 new token after `past_len` committed tokens, batch 1, one intra-op thread, full graph
optimisation, caches preallocated and bound as past and present alike (in place: ours by the I/O
contract, `builder.export.contract`; GenAI's as its runtime does with `past_present_share_buffer: true`,
its default for this model: past/present [1, KV, max_length, D], `attention_mask` [1, past_len + 1]).

ORT's profiler (`SessionOptions.enable_profiling`) writes a Chrome-trace JSON: one `Session`/`model_run`
event per run and one `Node` event `<node>_kernel_time` per executed kernel, with its `op_name`. The
warm-up runs are dropped by time (only kernels inside the last `runs` model_run intervals count), so
per op type: kernel microseconds per run and kernels per run; in all: kernel time per run (= per token
at T=1; median and mean over runs), model_run wall time per run (kernels + the executor's own overhead),
and node counts (in the graph file, and executed after ORT's own fusions). With n graphs there are n passes,
each making the sessions in a rotated order so that every graph is made at every place once, and the figures are
the mean over the passes (`combined`: where a session's weights land in memory moved a memory-bound step by up to
~10 %, and later sessions landed better); each pass runs its sessions in rotating turns. The JSON keeps the passes.

GenAI's graph is the model builder's output (`devtools.bench.peers.convert_ortgenai`: onnxruntime-genai
0.18, `-p fp32 -e cpu`); its inputs and KV layout are read from its `genai_config.json`
(model.decoder.inputs / outputs names, search.max_length). Upstream: onnxruntime-genai
`src/python/py/models/builders/base.py` (what the graph holds) and `src/models/kv_cache.cpp` (share buffer).
"""

from __future__ import annotations

import functools
import json
import os
import platform
import statistics
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

CacheBind = tuple[str, str, np.ndarray]  # (past input name, present output name, the shared buffer)


@dataclass
class OpTime:
    us: float  # kernel microseconds per run (median over runs)
    kernels: float  # kernels of this type executed per run (median over runs)


@dataclass
class Profile:
    label: str
    graph: str  # the file profiled
    nodes: int  # nodes in the graph file
    kernels: int  # kernels executed per run (after ORT's own fusions)
    kernel_ms_median: float  # per run (= per token at T=1)
    kernel_ms_mean: float
    run_ms_median: float  # model_run events: kernels + the executor's overhead
    by_op: dict[str, OpTime] = field(default_factory=dict)  # most expensive first


CONTROL_FLOW = ("If", "Loop", "Scan")  # kernels that run a subgraph: their events enclose the subgraph's


def parse_trace(events: list[dict[str, Any]], runs: int) -> tuple[list[float], list[float], dict[str, OpTime], int]:
    """(kernel µs per run, model_run µs per run, per-op times, kernels per run) over the last `runs` runs; an op
    type's time is the median over runs of its kernels' sum in the run (robust to a noisy neighbour). A
    control-flow kernel (an If) counts only its own time: its event's span minus the subgraph kernels inside it,
    which count as themselves (so nothing is counted twice)."""
    spans = sorted(
        (e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"
    )[-runs:]
    if len(spans) < runs:
        raise ValueError(f"the trace holds {len(spans)} model runs, fewer than {runs}")
    starts = [s for s, _ in spans]
    kernels: list[list[tuple[int, int, str]]] = [[] for _ in range(runs)]  # per run: (ts, dur, op)
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        i = int(np.searchsorted(starts, e["ts"], side="right")) - 1
        if i >= 0 and e["ts"] <= spans[i][1]:  # else a warm-up run's kernel
            kernels[i].append((e["ts"], e["dur"], e["args"]["op_name"]))
    per_run: list[dict[str, list[float]]] = [{} for _ in range(runs)]  # op -> [µs, kernels] per run
    for run, ks in zip(per_run, kernels):
        for ts, dur, op in ks:
            own = float(dur)
            if op in CONTROL_FLOW:
                own -= sum(d for t, d, o in ks if ts <= t and t + d <= ts + dur and (t, d, o) != (ts, dur, op))
            acc = run.setdefault(op, [0.0, 0.0])
            acc[0] += own
            acc[1] += 1
    totals = [sum(t for t, _ in run.values()) for run in per_run]
    counts = [sum(n for _, n in run.values()) for run in per_run]
    names = {op for run in per_run for op in run}
    ops = {
        op: OpTime(
            statistics.median(run.get(op, [0.0])[0] for run in per_run),
            statistics.median(run.get(op, [0.0, 0.0])[1] for run in per_run),
        )
        for op in names
    }
    ops = dict(sorted(ops.items(), key=lambda kv: -kv[1].us))
    return totals, [float(b - a) for a, b in spans], ops, round(statistics.median(counts))


class Profiled:
    """One graph in an ORT session under the profiler: inputs bound once, caches in place (module docstring)."""

    def __init__(
        self,
        label: str,
        graph: Path,
        feeds: dict[str, np.ndarray],
        caches: Sequence[CacheBind],
        threads: int = 1,
        as_engine: bool = True,
    ) -> None:
        import onnxruntime as ort  # type: ignore[import-untyped]

        from builder.engines.ort.session import make_session, session_options

        self.label, self.graph, self.runs = label, graph, 0
        self._tmp = tempfile.TemporaryDirectory(prefix="trtspec-profile-")
        so = session_options(threads)  # as our engine's sessions
        so.enable_profiling, so.profile_file_prefix = True, str(Path(self._tmp.name) / "ort")
        if as_engine:
            self.sess = make_session(graph, options=so)  # GroupQueryAttention as our engine runs it
        else:
            self.sess = ort.InferenceSession(str(graph), so, providers=["CPUExecutionProvider"])
        self.io = self.sess.io_binding()
        for name, value in feeds.items():
            self.io.bind_cpu_input(name, value)
        self._values = [ort.OrtValue.ortvalue_from_numpy(buf) for _, _, buf in caches]
        for (past, present, _), value in zip(caches, self._values):
            self.io.bind_ortvalue_input(past, value)
            self.io.bind_ortvalue_output(present, value)
        bound = {c[1] for c in caches}
        for out in self.sess.get_outputs():
            if out.name not in bound:
                self.io.bind_output(out.name)

    def run(self, n: int) -> None:
        for _ in range(n):
            self.sess.run_with_iobinding(self.io)
        self.runs += n

    def result(self, runs: int) -> Profile:
        """The profile of the last `runs` runs (ends profiling)."""
        import onnx

        trace = json.loads(Path(self.sess.end_profiling()).read_text())
        self._tmp.cleanup()
        totals, spans, ops, kernels = parse_trace(trace, runs)
        nodes = len(onnx.load(str(self.graph), load_external_data=False).graph.node)
        return Profile(
            self.label,
            str(self.graph),
            nodes,
            kernels,
            statistics.median(totals) / 1e3,
            statistics.mean(totals) / 1e3,
            statistics.median(spans) / 1e3,
            ops,
        )


def profile_all(sessions: Sequence[Profiled], *, runs: int, warmup: int, rounds: int = 20) -> list[Profile]:
    """Warm every session up, then run them in turns (`rounds` turns of runs / rounds each), so a machine whose
    speed drifts (other processes, frequency) weighs on every graph alike; each turn starts one session later
    (a rotation), so no graph always runs right after the same one."""
    for s in sessions:
        s.run(warmup)
    per = max(1, runs // rounds)
    n = len(sessions)
    for r in range(rounds):
        for i in range(n):
            sessions[(r + i) % n].run(per)
    return [s.result(per * rounds) for s in sessions]


def cache_buffers(layers: int, kv_heads: int, capacity: int, head_dim: int, seed: int = 1) -> list[np.ndarray]:
    """2·layers finite cache buffers [1, KV, CAP, D] (key, value per layer): random, so no kernel meets zeros."""
    gen = np.random.default_rng(seed)
    return [gen.standard_normal((1, kv_heads, capacity, head_dim), dtype=np.float32) for _ in range(2 * layers)]


def ours(label: str, graph: Path, model: Any, past_len: int, capacity: int, nodes: int = 1) -> Profiled:
    """Our exported target graph (`target.ort.onnx`), greedy, one step of a `nodes`-node chain (1: a plain step;
    a chain is what n-gram speculation drafts, and what ORT GenAI's n-gram step runs)."""
    from builder.export.contract import cache_names
    from devtools.bench.export_variants import step_feeds

    cfg = model.cfg
    bufs = cache_buffers(cfg.num_hidden_layers, cfg.num_key_value_heads, capacity, cfg.head_dim)
    caches = []
    for layer in range(cfg.num_hidden_layers):
        pk, pv, ok, ov = cache_names(layer)
        caches += [(pk, ok, bufs[2 * layer]), (pv, ov, bufs[2 * layer + 1])]
    feeds = step_feeds(model, 1, nodes, past_len)
    feeds["tree_mask"] = np.tril(np.ones((1, nodes, nodes), bool))  # a chain: node i attends nodes 0..i
    feeds["position_ids"] = (past_len + np.arange(nodes, dtype=np.int64))[None]
    feeds["paths"] = np.arange(nodes, dtype=np.int32)[None, None]
    return Profiled(label, graph, feeds, caches)


def graph_capacity(graph: Path) -> int:
    """CAP of one of our exported graphs (past_key_0's third dim)."""
    import onnx

    dims = next(i for i in onnx.load(str(graph), load_external_data=False).graph.input if i.name == "past_key_0")
    return int(dims.type.tensor_type.shape.dim[2].dim_value)


def genai(folder: Path, past_len: int, nodes: int = 1) -> Profiled:
    """ORT GenAI's converted graph, one step of `nodes` new tokens as its runtime runs it (module docstring)."""
    conf = json.loads((folder / "genai_config.json").read_text())
    dec, cap = conf["model"]["decoder"], int(conf["search"]["max_length"])
    if not conf["search"].get("past_present_share_buffer", False):
        raise ValueError(f"{folder}: profiled only with past_present_share_buffer (the CPU default)")
    names_in, names_out = dec["inputs"], dec["outputs"]
    bufs = cache_buffers(dec["num_hidden_layers"], dec["num_key_value_heads"], cap, dec["head_size"])
    caches = []
    for layer in range(dec["num_hidden_layers"]):
        caches += [
            (names_in["past_key_names"] % layer, names_out["present_key_names"] % layer, bufs[2 * layer]),
            (names_in["past_value_names"] % layer, names_out["present_value_names"] % layer, bufs[2 * layer + 1]),
        ]
    gen = np.random.default_rng(0)
    feeds = {
        names_in["input_ids"]: gen.integers(0, conf["model"]["vocab_size"], (1, nodes)).astype(np.int64),
        names_in["attention_mask"]: np.ones((1, past_len + nodes), np.int64),
    }
    return Profiled("ORT GenAI", folder / dec["filename"], feeds, caches, as_engine=False)


def profile_fixture(
    hf_dir: Path,
    *,
    variants: Sequence[str],
    past_len: int,
    capacity: int,
    runs: int,
    warmup: int,
    with_genai: bool = True,
    graphs: Mapping[str, Path] | None = None,
    nodes: int = 1,
) -> dict[str, Any]:
    """Export our greedy target graph per variant (temp folder), convert GenAI's (cached), profile all; `graphs`:
    more of our greedy `target.ort.onnx` graphs of the same checkpoint by label (e.g. an older exporter's);
    `nodes`: profile a step of a chain of that many nodes instead of a plain step."""
    from builder.export.target import export_target
    from builder.model.loader import load_model
    from devtools.bench import peers

    model = load_model(hf_dir)
    with tempfile.TemporaryDirectory(prefix="trtspec-profile-export-") as tmp:
        makers: list[Callable[[], Profiled]] = []  # one per graph, in table order
        for variant in variants:
            res = export_target(model, Path(tmp) / variant, variant=variant, mode="greedy", max_seq_len=capacity)
            makers.append(functools.partial(ours, f"ours {variant}", res.ort, model, past_len, capacity, nodes))
            if res.plain is not None:  # what method none (and n-gram chains) run: builder.export.verify.plain_twin
                makers.append(
                    functools.partial(ours, f"ours {variant} plain", res.plain, model, past_len, capacity, nodes)
                )
        for label, graph in (graphs or {}).items():
            makers.append(
                functools.partial(ours, label, Path(graph), model, past_len, graph_capacity(Path(graph)), nodes)
            )
        if with_genai:
            makers.append(functools.partial(genai, peers.convert_ortgenai(hf_dir), past_len, nodes))
        passes = []
        for k in range(len(makers)):  # sessions made later ran faster on one machine: every graph made at every place
            sessions = [make() for make in makers[k:] + makers[:k]]
            passes.append({p.label: p for p in profile_all(sessions, runs=runs, warmup=warmup)})
            del sessions
        profiles = [combined([ps[label] for ps in passes]) for label in passes[0]]
    return {
        "benchmark": "profile_step",
        "checkpoint": str(hf_dir),
        "settings": {
            "T": nodes,
            "batch": 1,
            "past_len": past_len,
            "capacity": capacity,
            "runs": runs,
            "warmup": warmup,
            "threads": 1,
        },
        "machine": {
            "platform": platform.platform(),
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "load_avg": os.getloadavg(),
        },
        "versions": _versions(),
        "profiles": [asdict(p) for p in profiles],
        "passes": [[asdict(p) for p in ps.values()] for ps in passes],
    }


def combined(runs: Sequence[Profile]) -> Profile:
    """One graph's profile from several passes (its session made at a different place in each): the mean of their
    figures. Where a session's weights land in memory moved one graph's MatMuls by up to ~10 % on a machine with
    AVX2 kernels, and sessions made later landed better (README, "A second machine of the kind"); averaging over
    the places gives every graph each of them once."""
    n = len(runs)
    mean = lambda xs: sum(xs) / n  # noqa: E731
    ops = {
        op: OpTime(
            mean([r.by_op[op].us if op in r.by_op else 0.0 for r in runs]),
            mean([r.by_op[op].kernels if op in r.by_op else 0.0 for r in runs]),
        )
        for op in {op for r in runs for op in r.by_op}
    }
    first = runs[0]
    return Profile(
        first.label,
        first.graph,
        first.nodes,
        round(mean([r.kernels for r in runs])),
        mean([r.kernel_ms_median for r in runs]),
        mean([r.kernel_ms_mean for r in runs]),
        mean([r.run_ms_median for r in runs]),
        dict(sorted(ops.items(), key=lambda kv: -kv[1].us)),
    )


def _versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for dist in ("onnxruntime", "onnxruntime-genai"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = None
    return out


def table(report: dict[str, Any], top: int = 12) -> str:
    """Side by side: per op type kernel µs per run (kernels per run), then the totals."""
    profs = report["profiles"]
    s = report["settings"]
    ops: dict[str, float] = {}
    for p in profs:
        for op, t in p["by_op"].items():
            ops[op] = max(ops.get(op, 0.0), t["us"])
    order = sorted(ops, key=lambda op: -ops[op])
    head = f"{'op type (µs per run, kernels)':<34}" + "".join(f"{p['label']:>20}" for p in profs)
    what = "one plain step: T=1" if s.get("T", 1) == 1 else f"one step of a {s['T']}-node chain"
    lines = [
        f"{what}, past_len {s['past_len']}, batch 1, 1 thread, median of {s['runs']} runs, "
        f"mean over creation orders "
        f"(load avg {report['machine']['load_avg'][0]:.2f})",
        "",
        head,
    ]
    for op in order[:top]:
        cells = []
        for p in profs:
            t = p["by_op"].get(op)
            cells.append(f"{t['us']:>11.1f} ({t['kernels']:>4.0f})" if t else f"{'-':>18}")
        lines.append(f"{op:<34}" + "".join(f"{c:>20}" for c in cells))
    rest = order[top:]
    if rest:
        cells = [sum(p["by_op"][op]["us"] for op in rest if op in p["by_op"]) for p in profs]
        lines.append(f"{'other (' + str(len(rest)) + ' op types)':<34}" + "".join(f"{c:>13.1f}{'':>7}" for c in cells))
    for key, name, fmt in (
        ("kernel_ms_median", "kernel ms per token (median)", "{:.3f}"),
        ("kernel_ms_mean", "kernel ms per token (mean)", "{:.3f}"),
        ("run_ms_median", "model_run ms (median)", "{:.3f}"),
        ("nodes", "nodes in the graph file", "{}"),
        ("kernels", "kernels executed", "{}"),
    ):
        lines.append(f"{name:<34}" + "".join(f"{fmt.format(p[key]):>20}" for p in profs))
    return "\n".join(lines)
