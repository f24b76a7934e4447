"""The host's share of a step (`builder.tune.costs.Host`), measured on this host's ONNX Runtime engine.

The step curve times the graphs alone; the decoding loop, the engine's host side and the drafter's
bookkeeping (EAGLE's extend and per-level tree growth, Lookahead's window and pool) add time per step that
the curve does not see. Three decodes of calibration prompts on the recipe's engine measure it (wall ms
per step after prefill, minus what the curve says the step's graphs take, `graph_ms` at the measured τ):

    plain        drafter off                                    -> base_ms
    small        one drafting unit: the recipe's drafter at a 2-node budget (`DraftSchedule`), Lookahead
                 W=1 N=2 G=1                                    -> base_ms + draft_ms + per_unit_ms · 1
    current      the recipe's own setting, u units              -> base_ms + draft_ms + per_unit_ms · u

(units: EAGLE tree levels, i.e. draft calls; Medusa and Lookahead draft nodes; n-gram: the plain decode alone,
its drafter's lookup per step being the same whatever the setting.) The method's `Tuner` says which: its `small`
setting (None: the plain decode alone), `small_config` (the small setting run as the drafter instead of the
folder's at a 2-node budget), `units` and `graph_ms`. The decodes step one step at a time (no batch-1 burst of plain
steps, `Decoder.run`): the share is what a drafting step pays. Each share is floored at 0; other settings are then
charged by that line. Batch 1, one thread, one untimed warm-up prompt per decode.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from builder.tune.costs import Host
from builder.tune.curve import StepCurve
from builder.tune.tuners import Tuner


def _per_step(opened: Any, schedule: Any, prompts: Sequence[Sequence[int]], max_new: int) -> tuple[float, float]:
    """(wall ms per step after prefill, τ) of decoding prompts[1:] (prompts[0] is an untimed warm-up)."""
    from builder.speculative.decoding import Decoder as Loop
    from builder.speculative.decoding import Request

    Loop(opened.engine, opened.make_drafter(), schedule).run([Request(tuple(prompts[0]), max_new)], burst=False)
    loop = Loop(opened.engine, opened.make_drafter(), schedule)
    t0 = time.perf_counter()
    gens = loop.run([Request(tuple(p), max_new) for p in prompts[1:]], burst=False)  # a step's share, as drafts pay it
    wall = time.perf_counter() - t0 - loop.timing.prefill
    steps = sum(g.steps for g in gens)
    tokens = sum(g.steps + sum(g.accepted_per_step) for g in gens)
    return 1e3 * wall / max(steps, 1), tokens / max(steps, 1)


def measure_host(
    folder: Path,
    tuner: Tuner,
    current: Mapping[str, Any],
    curve: StepCurve,
    prompts: Sequence[Sequence[int]],
    max_new: int,
    threads: int = 1,
) -> Host:
    """The `Host` of the engine folder `folder` (the recipe's own, tuned by `tuner`) on this host; `prompts`: at
    least two."""
    from builder.engines.ort.load import open_ort_engine
    from builder.speculative.decoding import DraftSchedule

    def run(drafter: Any, budget: int | None = None) -> tuple[float, float]:
        opened = open_ort_engine(folder, drafter, 1, threads)
        return _per_step(opened, DraftSchedule([[1, budget]] if budget else ()), prompts, max_new)

    wall, _ = run({"method": "none"})
    base = max(0.0, wall - curve.target_ms(1, 1))
    if tuner.small is None:  # its drafter's host work is the same whatever the setting: charged as base only
        return Host(round(base, 5), 0.0, "measured", 0.0)
    small = tuner.small(current)
    if tuner.small_config is not None:
        wall_small, tau_small = run(tuner.small_config(small))
    else:
        wall_small, tau_small = run(None, budget=2)
    wall_cur, tau_cur = run(None)
    h1 = wall_small - tuner.graph_ms(small, curve, 1, tau_small) - base  # draft_ms + per_unit · u1
    h2 = wall_cur - tuner.graph_ms(current, curve, 1, tau_cur) - base  # draft_ms + per_unit · u2
    draft, per_unit = fit_line((tuner.units(small), h1), (tuner.units(current), h2))
    return Host(round(base, 5), round(per_unit, 5), "measured", round(draft, 5))


def fit_line(small: tuple[int, float], current: tuple[int, float]) -> tuple[float, float]:
    """(draft_ms, per_unit_ms) through two (units, host ms beyond base) points, each floored at 0."""
    (u1, h1), (u2, h2) = small, current
    per_unit = max(0.0, (h2 - h1) / (u2 - u1)) if u2 > u1 else 0.0
    return max(0.0, h1 - per_unit * u1), per_unit
