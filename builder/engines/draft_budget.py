"""The draft budget table of an engine folder, measured on this host: engine.json's "draft_budget", read back by
`builder.speculative.budget.BudgetRule` (the rule the decoding loop applies per step).

For every batch size b (`step_curve.batch_grid`) and node budget n (`budget_grid`: every size to 8, then ~1.25x
apart, up to the drafter's whole tree) b calibration prompts are prefilled together and the decoding loop itself
(`Decoder`, with the drafter capped at n by a pinned schedule) runs a few steps with every row drafting: the wall
time of a whole step — target, drafter, host — and the tokens it emitted. τ(n) pools the tokens of every batch size
(greedy acceptance does not depend on the batch a sequence shares); c(b, n) is the median step time at that point.
Budget 1 runs the same requests under a 1-node budget: the loop's own "no draft" step, which is what a step the
rule turns off costs. Bounded like the step curve: budget_s / points seconds per point, MIN..MAX_STEPS timed steps
(plus one untimed warm-up step after the prefill), so a tiny engine's table costs a second or two.

Measured rather than modelled: the step curve (`builder.engines.step_curve`) times the graphs; what a method's
drafter adds on the host per step (EAGLE's levels, n-gram lookups, Lookahead's pools) differs by method and by
host, and the rule must not trust a model where a measurement is cheap. A method installed from another
distribution gets its table the same way.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Sequence

from builder.engines.step_curve import MAX_REPEATS, batch_grid, host_about, size_grid
from builder.speculative.budget import BudgetRule
from builder.speculative.requests import Request
from builder.timing import isotonic

BUDGET_S = 2.0  # seconds of timed steps per engine
MIN_STEPS, MAX_STEPS = 4, MAX_REPEATS
TAU_STEPS = 24  # steps per budget at the largest batch (τ's sample: 24 × max_batch sequence steps at least)


def budget_grid(max_nodes: int) -> list[int]:
    """Node budgets to measure for a drafter of `max_nodes` nodes (root included): 1, every size to 8, ~1.25x apart,
    and max_nodes."""
    return size_grid(max_nodes) if max_nodes > 1 else [1]


def measure_table(
    engine: Any,
    make_drafter: Callable[[], Any],
    prompts: Sequence[Sequence[int]],
    max_nodes: int,
    max_batch: int,
    budget_s: float = BUDGET_S,
    say: Callable[[str], None] = lambda _m: None,
    threads: int = 1,
) -> BudgetRule:
    """The measured `BudgetRule` of `engine` with drafters from `make_drafter` (module docstring); `prompts` are
    cycled to fill the largest batch, which also runs TAU_STEPS steps per budget for τ."""
    budgets, batches = budget_grid(max_nodes), batch_grid(max_batch)
    per_point = budget_s / (len(budgets) * len(batches))
    tokens: dict[int, int] = dict.fromkeys(budgets, 0)
    rows: dict[int, int] = dict.fromkeys(budgets, 0)
    cost: dict[int, dict[int, float]] = {}
    longest = max(len(p) for p in prompts)
    for b in batches:
        say(f"draft budgets at batch {b}: {budgets}")
        row: dict[int, float] = {}
        for n in budgets:
            least = max(MIN_STEPS, TAU_STEPS if b == batches[-1] else 0)
            max_new = max(1, min(engine.max_seq_len - longest - max_nodes - 2, (max(least, MAX_STEPS) + 2) * n))
            reqs = [Request(tuple(prompts[i % len(prompts)]), max_new) for i in range(b)]
            times, emitted, seq_steps = _point(engine, make_drafter(), reqs, max_batch, n, least, per_point)
            row[n] = statistics.median(times)
            tokens[n] += emitted
            rows[n] += seq_steps
        cost[b] = isotonic(row)  # (a step over a bigger budget never costs less: a dip is noise)
    tau = isotonic({n: (tokens[n] / rows[n] if rows[n] and n > 1 else 1.0) for n in budgets})
    about = {
        **host_about(threads),
        "prompts": len(prompts),
        "sequence_steps": {str(n): rows[n] for n in budgets},
    }
    return BudgetRule(tau, cost, "measured", about)


def _point(
    engine: Any, drafter: Any, reqs: list[Any], max_batch: int, n: int, least: int, seconds: float
) -> tuple[list[float], int, int]:
    """One (b, n) point: ms of each timed step, and the tokens emitted over the sequence steps of the steps in which
    no row finished (a finishing row emits fewer than it accepted)."""
    from builder.speculative.decoding import Decoder, DraftSchedule

    b = len(reqs)
    dec = Decoder(engine, drafter, DraftSchedule([(max_batch, n)]))
    seqs = dec.add(reqs)
    times: list[float] = []
    emitted = seq_steps = 0
    try:
        dec.step()  # warm-up: the first drafted step after the prefill (bindings are built on first use)
        t_end = time.perf_counter() + seconds
        while len(dec.active) == b and (len(times) < least or (len(times) < MAX_STEPS and time.perf_counter() < t_end)):
            before = sum(len(s.gen.token_ids) for s in seqs)
            t0 = time.perf_counter()
            dec.step()
            times.append((time.perf_counter() - t0) * 1e3)
            if len(dec.active) == b:
                emitted += sum(len(s.gen.token_ids) for s in seqs) - before
                seq_steps += b
    finally:
        for s in list(dec.active):
            dec.cancel(s.index)
    return times, emitted, seq_steps
