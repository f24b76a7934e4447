"""Host work per decoding step: the Python around the session calls, per method, at batch 1 and 16.

A step of the decoding loop (`builder.speculative.decoding.Decoder.step`) is the target session call, the
drafter (propose + update: for EAGLE also its draft-graph session calls) and the host work around them: the
loop's bookkeeping (roots, budgets, emitting tokens, retiring requests) and the engine's host side
(`builder.engines.batched.BatchedTarget`: checks, input filling, the verdict, KV compaction, results).
Each is timed separately on the real ONNX Runtime engine:

    wall            Decoder.step, one full-batch step
    target session  every `InferenceSession.run_with_iobinding` of the target's sessions (timed around the call)
    draft session   the same for the EAGLE draft graph's session
    drafter         inside drafter.propose + drafter.update
    engine          inside engine.step (or its shortcuts step_chain, step_plain)

    python    = wall - drafter - target session     the draft-free host work: loop + engine host side
    loop      = wall - drafter - engine
    engine host = engine - target session
    drafter host = drafter - draft session          (reported separately)

B requests (HumanEval prompts, no stop tokens) start together; only steps with all B in the batch count,
after one untimed warm-up round. A cProfile of further rounds says where the Python goes (per-step µs by
function, the session calls left out); cProfile's own overhead inflates those figures, so they explain the
measured ones rather than replace them. The timers add two Python calls per timed function. After a session
call the host code runs with cold caches (the bigger the fixture, the colder), so the plain rows also get
`fake_session_us`: the same step with a fake zero-cost session, the pure host cost.
"""

from __future__ import annotations

import contextlib
import cProfile
import platform
import pstats
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from builder.timing import markdown_table, repeat, timed

METHODS = ("none", "lookahead", "medusa", "eagle-1", "eagle-2", "ngram")
FIELDS = ("wall", "drafter", "engine", "target_session", "draft_session")


@dataclass
class _Clock:
    """Seconds spent in each timed part since the last `take`."""

    spent: dict[str, float] = field(default_factory=lambda: dict.fromkeys(FIELDS, 0.0))

    def take(self) -> dict[str, float]:
        out, self.spent = self.spent, dict.fromkeys(FIELDS, 0.0)
        return out

    def wrap(self, obj: Any, name: str, key: str) -> None:
        """Time every call of obj.name (an instance attribute shadows the method)."""
        fn = getattr(obj, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent[key] += time.perf_counter() - t0

        setattr(obj, name, timed)


@contextlib.contextmanager
def _session_clock(clock: _Clock, target_sessions: Sequence[Any]) -> Iterator[None]:
    """Time ONNX Runtime's run_with_iobinding, split into target and draft sessions."""
    import onnxruntime as ort

    original = ort.InferenceSession.run_with_iobinding
    target = {id(s) for s in target_sessions}

    def timed(session: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return original(session, *args, **kwargs)
        finally:
            key = "target_session" if id(session) in target else "draft_session"
            clock.spent[key] += time.perf_counter() - t0

    ort.InferenceSession.run_with_iobinding = timed  # type: ignore[method-assign]
    try:
        yield
    finally:
        ort.InferenceSession.run_with_iobinding = original  # type: ignore[method-assign]


def derived(parts: dict[str, float]) -> dict[str, float]:
    """Microseconds per step of the host shares (module docstring) from one step's seconds."""
    us = {k: 1e6 * v for k, v in parts.items()}
    return {
        "python_us": us["wall"] - us["drafter"] - us["target_session"],
        "loop_us": us["wall"] - us["drafter"] - us["engine"],
        "engine_host_us": us["engine"] - us["target_session"],
        "drafter_host_us": us["drafter"] - us["draft_session"],
        "target_session_us": us["target_session"],
        "draft_session_us": us["draft_session"],
        "wall_us": us["wall"],
    }


def _round(
    engine: Any, make_drafter: Callable[[], Any], prompts: Sequence[Sequence[int]], max_new: int, clock: _Clock | None
) -> tuple[list[dict[str, float]], float]:
    """One round of B requests started together; (seconds per full-batch step by part, τ)."""
    from builder.speculative.decoding import Decoder, Request

    drafter = make_drafter()
    loop = Decoder(engine, drafter)
    if clock is not None and drafter is not None:
        clock.wrap(drafter, "propose", "drafter")
        clock.wrap(drafter, "update", "drafter")
        for name in ("update_emitted", "propose_chain"):  # the loop's batch-1 shortcuts propose and learn there
            if getattr(type(drafter), name, None) is not None:
                clock.wrap(drafter, name, "drafter")
    loop.add([Request(tuple(p), max_new) for p in prompts])
    full: list[dict[str, float]] = []
    while loop.active:
        n = len(loop.active)
        if clock is not None:
            clock.take()
        wall, _ = timed(loop.step)
        if clock is not None and n == len(prompts):
            full.append(clock.take() | {"wall": wall})
    totals = loop.totals
    return full, (totals.emitted - len(prompts)) / max(totals.sequence_steps, 1)


def measure(
    engine: Any,
    make_drafter: Callable[[], Any],
    target_sessions: Sequence[Any],
    prompts: Sequence[Sequence[int]],
    max_new: int,
    rounds: int = 3,
) -> dict[str, Any]:
    """Per-step host shares (median and p90 over full-batch steps of `rounds` timed rounds, after a warm-up)."""
    _round(engine, make_drafter, prompts, max_new, None)  # warm-up: bindings, first shapes
    clock = _Clock()
    wrapped = ["step"] + [m for m in ("step_chain", "step_plain") if getattr(type(engine), m, None) is not None]
    for m in wrapped:  # step_chain: the Decoder's batch-1 steps of a chain; step_plain: its batches that do not draft
        clock.wrap(engine, m, "engine")
    steps: list[dict[str, float]] = []
    taus = []
    try:
        with _session_clock(clock, target_sessions):
            for _ in range(rounds):
                full, tau = _round(engine, make_drafter, prompts, max_new, clock)
                steps += full
                taus.append(tau)
    finally:
        for m in wrapped:
            delattr(engine, m)  # the instance attributes the clock set
    per = [derived(p) for p in steps]
    out: dict[str, Any] = {"full_batch_steps": len(per), "tau": round(statistics.mean(taus), 3)}
    for key in per[0] if per else ():
        vals = sorted(p[key] for p in per)
        out[key] = {"median": round(statistics.median(vals), 1), "p90": round(vals[int(0.9 * (len(vals) - 1))], 1)}
    return out


def profile(
    engine: Any, make_drafter: Callable[[], Any], prompts: Sequence[Sequence[int]], max_new: int, top: int = 12
) -> list[dict[str, Any]]:
    """cProfile of one round: the `top` functions by own time, µs per decoding step, session calls left out."""
    prof = cProfile.Profile()
    prof.runcall(_round, engine, make_drafter, prompts, max_new, None)
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]  # (file, line, name) -> (cc, calls, tt, ct, …)
    steps = max((v[1] for (f, _l, n), v in stats.items() if n == "step" and f.endswith("decoding.py")), default=1)
    rows = []
    for (file, line, name), (_cc, calls, tottime, cumtime, _callers) in stats.items():
        if "run_with_iobinding" in name:
            continue
        rows.append(
            {
                "function": f"{Path(file).name}:{line}({name})",
                "calls_per_step": round(calls / steps, 2),
                "own_us_per_step": round(1e6 * tottime / steps, 1),
                "cum_us_per_step": round(1e6 * cumtime / steps, 1),
            }
        )
    rows.sort(key=lambda r: -r["own_us_per_step"])
    return rows[:top]


def fake_session_us(engine: Any, batch: int, steps: int = 300, rounds: int = 5) -> float:
    """Median µs of a plain `Decoder.step` (loop + engine host) with a fake zero-cost session — ONNX Runtime's
    run_with_iobinding replaced by a no-op after three real steps, so the outputs stay those of the last real
    step (valid for plain decoding only). No session time to subtract, so no timer noise: the pure host cost."""
    import onnxruntime as ort

    from builder.speculative.decoding import Decoder, Request

    real = ort.InferenceSession.run_with_iobinding
    medians = []
    try:
        for _ in range(rounds):
            ort.InferenceSession.run_with_iobinding = real  # type: ignore[method-assign]
            loop = Decoder(engine, None)
            loop.add([Request((1, 2, 3, 4, 5), steps + 8) for _ in range(batch)])
            for _ in range(3):
                loop.step()
            ort.InferenceSession.run_with_iobinding = lambda self, io: None  # type: ignore[method-assign,assignment]
            medians.append(statistics.median(repeat(loop.step, steps)))
            ort.InferenceSession.run_with_iobinding = real  # type: ignore[method-assign]
            for s in list(loop.active):
                loop.cancel(s.index)
    finally:
        ort.InferenceSession.run_with_iobinding = real  # type: ignore[method-assign]
    return round(1e6 * statistics.median(medians), 1)


def bench_host(
    fixture: str,
    recipes_dir: Path,
    batches: Sequence[int] = (1, 16),
    methods: Sequence[str] = METHODS,
    max_new: int = 64,
    rounds: int = 3,
    top: int = 12,
) -> dict[str, Any]:
    """Every method × batch size on `fixture`'s recipes (`devtools.bench.decode.FIXTURES`); the report."""
    from builder.data.humaneval import heldout_prompts
    from builder.recipe.loader import load_recipe
    from builder.stages.decoders import build_decoder
    from devtools.bench.decode import resolve_recipes

    loaded = [load_recipe(p) for p in resolve_recipes([fixture], recipes_dir)]
    sources = _method_sources(loaded)
    rows = []
    for method in methods:
        if method not in sources:
            raise ValueError(f"the fixture {fixture} has no recipe for {method} (allowed: {', '.join(sources)})")
        rec, name = sources[method]
        for b in batches:
            dec = build_decoder(rec, name, max_batch_size=b)
            prompts = [dec.tokenizer.encode(p).ids for p in heldout_prompts(b)]
            sessions = list(getattr(dec.engine, "_sessions", {}).values())
            row = {"method": method, "label": dec.label, "batch": b, "max_new_tokens": max_new}
            row |= measure(dec.engine, dec.make_drafter, sessions, prompts, max_new, rounds)
            row["profile"] = profile(dec.engine, dec.make_drafter, prompts, max_new, top)
            if method == "none":
                row["fake_session_python_us"] = fake_session_us(dec.engine, b)
            rows.append(row)
    return {
        "benchmark": "host",
        "fixture": fixture,
        "rounds": rounds,
        "machine": platform.platform(),
        "processor": platform.processor(),
        "rows": rows,
    }


def _method_sources(loaded: Sequence[Any]) -> dict[str, tuple[Any, str]]:
    """method label -> (loaded recipe, method): none / lookahead / ngram from the first recipe (ngram: the
    fixture's n-gram recipe where the set has one), the rest from theirs."""
    out: dict[str, tuple[Any, str]] = {
        "none": (loaded[0], "none"),
        "lookahead": (loaded[0], "lookahead"),
        "ngram": (loaded[0], "ngram"),
    }
    for rec in loaded:
        spec = rec.recipe.speculative
        if spec.method == "ngram":
            out["ngram"] = (rec, "ngram")
        elif spec.method == "medusa":
            out.setdefault("medusa", (rec, "medusa"))
        elif spec.method == "eagle":
            out.setdefault(f"eagle-{spec.version}", (rec, "eagle"))
    return out


GOALS_US = {1: 30.0, 16: 150.0}  # draft-free Python per step (issue 15, item 4)


def table(report: dict[str, Any]) -> str:
    """Markdown: per method and batch size, median (p90) µs per step of each share."""
    lines = [
        f"host work per step on {report['fixture']} — median (p90) over full-batch steps of "
        f"{report['rounds']} rounds; python = loop + engine host (draft-free); goal: "
        + ", ".join(f"≤ {g:.0f} µs at B={b}" for b, g in GOALS_US.items()),
        "",
    ]
    shares = ("python_us", "loop_us", "engine_host_us", "drafter_host_us", "draft_session_us", "target_session_us")
    header = ("method", "B", "steps", "τ", *(k[:-3].replace("_", " ") + " µs" for k in shares))
    rows = [
        (
            r["label"],
            r["batch"],
            r["full_batch_steps"],
            f"{r['tau']:.2f}",
            *(f"{r[k]['median']:.1f} ({r[k]['p90']:.1f})" if k in r else "–" for k in shares),
        )
        for r in report["rows"]
    ]
    lines += markdown_table(header, rows)
    fake = [
        f"B={r['batch']} {r['fake_session_python_us']:.1f} µs" for r in report["rows"] if "fake_session_python_us" in r
    ]
    if fake:
        lines += [
            "",
            "plain Decoder.step with a fake zero-cost session (no session time, no timer noise; median): "
            + ", ".join(fake),
        ]
    lines += ["", "cProfile (one round; µs per step of own time, session calls left out):"]
    for r in report["rows"]:
        top = ", ".join(f"{p['function']} {p['own_us_per_step']:.1f}" for p in r["profile"][:6])
        lines.append(f"- {r['label']} B={r['batch']}: {top}")
    return "\n".join(lines)
