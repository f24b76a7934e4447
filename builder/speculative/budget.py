"""The draft budget rule: per step, the node budget that emits the most tokens per millisecond for the live batch.

A step over b sequences pads every row to one tree size T (the batched target graph takes [B, T]), so one budget n
(tree nodes, root included; 1 = no draft, a plain step) serves the whole step. With the acceptance table τ(n) —
tokens a sequence emits per step under budget n, the bonus token included, measured on calibration prompts — and
the measured cost c(b, n) of a whole step (target, drafter and host work) at batch size b, the rule is

    n*(b) = argmax_n  b · τ(n) / c(b, n)            (ties: the smaller n)

which is the exact optimum over per-sequence budgets too: with one padded T per step a row given fewer nodes than
the widest saves nothing (the step costs c(b, max n_i)) and, τ being non-decreasing in n (a smaller budget keeps a
subset of the tree), loses tokens; `best_padded` states it for per-sequence tables, which
tests/unit/test_draft_budget.py holds to a brute-force search. Budget 1 is a plain step, so a drafter's budget is
never worse than plain decoding by the table's own numbers — the cost of n = 1 is measured through the same loop as a
request that does not speculate.

`BudgetRule` answers `budget(batch)` as `DraftSchedule` does (`builder.speculative.requests`): `Decoder` asks one or
the other per step. A recipe's `triton.draft_schedule` pins the budgets; otherwise the engine folder's measured
table (engine.json "draft_budget", `builder.engines.draft_budget`) decides. Between measured batch sizes the cost is
linear in b; past the largest, it grows in proportion to b from there (one more sequence costs what the last one did
on average), so a batch the table never saw still gets an answer.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

MARGIN = 0.05  # a draft must beat no draft by more than this share of its rate: the table's own noise (±3-5 %)
PRIOR_STEPS = 32  # sequence steps the measured τ counts as, at least, against served steps (`BudgetRule.observe`)
REFRESH_STEPS = 256  # served sequence steps of one budget between two refinements of its τ


def best_padded(taus: Sequence[Mapping[int, float]], cost: Mapping[int, float]) -> tuple[int, float]:
    """(n, tokens per ms) of the best padded step: rows with acceptance tables `taus` (budget -> τ, one per row) under
    one tree size n, a row using at most n nodes (its best budget <= n), the step costing cost[n]."""
    top: tuple[int, float] | None = None
    for n in sorted(cost):
        tokens = sum(max((t for m, t in tau.items() if m <= n), default=1.0) for tau in taus)
        rate = tokens / cost[n]
        if top is None or rate > top[1] * (1 + 1e-12):
            top = (n, rate)
    if top is None:
        raise ValueError("no budget to choose from")
    return top


@dataclass
class BudgetRule:
    """The measured rule (module docstring): τ per budget, c(b, n) per measured batch size, and the pick per batch.
    `observe` refines τ online from the steps a decoding loop takes (a `Decoder` calls it): τ(n) is then the pooled
    rate of the calibration's sequence steps and the served ones."""

    tau: dict[int, float]  # budget n -> tokens emitted per sequence step (1 -> 1.0)
    cost: dict[int, dict[int, float]]  # batch b -> {budget n: ms per step}
    source: str = "measured"  # "measured" (this host) | "roofline" (a prediction for a GPU)
    about: dict[str, Any] = field(default_factory=dict)  # where and how it was measured
    live_tau: dict[int, float] = field(default_factory=dict, init=False)  # τ refined by the steps decoded (`observe`)
    _picks: dict[int, int] = field(default_factory=dict, init=False, repr=False)
    _seen: dict[int, list[float]] = field(
        default_factory=dict, init=False, repr=False
    )  # n -> [tokens, steps] folded in
    _pending: dict[int, list[float]] = field(
        default_factory=dict, init=False, repr=False
    )  # n -> [tokens, steps] not yet

    def __post_init__(self) -> None:
        if not self.cost or 1 not in self.tau:
            raise ValueError("a budget table needs τ(1) and at least one batch size's costs")
        for b, row in self.cost.items():
            if b < 1 or not row or any(n not in self.tau for n in row):
                raise ValueError(f"budget table: batch {b}'s budgets {sorted(row)} need a τ each ({sorted(self.tau)})")
        self.live_tau = dict(self.tau)
        measured = (self.about or {}).get("sequence_steps") or {}
        for n, t in self.tau.items():  # the table counts as PRIOR_STEPS sequence steps at least
            w = max(PRIOR_STEPS, int(measured.get(str(n), 0)))
            self._seen[n] = [t * w, float(w)]
            self._pending[n] = [0.0, 0.0]

    def observe(self, n: int, tokens: float, steps: int) -> None:
        """Fold in `steps` drafting sequence steps taken at budget n that emitted `tokens` (bonus tokens included):
        served traffic refines the calibration's τ(n); the picks follow every REFRESH_STEPS sequence steps of one
        budget. A budget the table does not hold (a pinned one) and budget 1 (τ = 1 by definition) teach nothing."""
        pend = self._pending.get(n)
        if pend is None or n == 1:
            return
        pend[0] += tokens
        pend[1] += steps
        if pend[1] >= REFRESH_STEPS:
            seen = self._seen[n]
            seen[0] += pend[0]
            seen[1] += pend[1]
            pend[0] = pend[1] = 0.0
            self.live_tau[n] = seen[0] / seen[1]
            self._picks.clear()

    @property
    def budgets(self) -> list[int]:
        return sorted(self.tau)

    def cost_at(self, batch: int) -> dict[int, float]:
        """c(batch, n) for every budget: measured, linear in b between measured batch sizes, proportional past them."""
        bs = sorted(self.cost)
        if batch in self.cost:
            return self.cost[batch]
        i = bisect.bisect_left(bs, batch)
        if i == 0:
            return {n: ms * batch / bs[0] for n, ms in self.cost[bs[0]].items()}
        if i == len(bs):
            return {n: ms * batch / bs[-1] for n, ms in self.cost[bs[-1]].items()}
        lo, hi = bs[i - 1], bs[i]
        w = (batch - lo) / (hi - lo)
        both = self.cost[lo].keys() & self.cost[hi].keys()
        return {n: self.cost[lo][n] + (self.cost[hi][n] - self.cost[lo][n]) * w for n in both}

    def budget(self, batch: int) -> int:
        """The node budget for a step of `batch` sequences (1: no draft, also where the best draft's predicted gain is
        within MARGIN: measurement noise, and a plain step is the very loop of a request that does not speculate)."""
        n = self._picks.get(batch)
        if n is None:
            cost = self.cost_at(batch)
            n, rate = best_padded([self.live_tau] * batch, cost)
            if n > 1 and 1 in cost and rate < (1 + MARGIN) * batch / cost[1]:
                n = 1
            self._picks[batch] = n
        return n

    def picks(self, batches: Sequence[int]) -> dict[int, int]:
        """{b: n*(b)} (the report's and the metrics' view)."""
        return {b: self.budget(b) for b in batches}

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "unit": "ms",
            "tau": {str(n): round(t, 4) for n, t in sorted(self.tau.items())},
            "cost": {
                str(b): {str(n): round(ms, 5) for n, ms in sorted(r.items())} for b, r in sorted(self.cost.items())
            },
            "about": self.about,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BudgetRule:
        return cls(
            {int(n): float(t) for n, t in data["tau"].items()},
            {int(b): {int(n): float(ms) for n, ms in row.items()} for b, row in data["cost"].items()},
            str(data.get("source", "measured")),
            dict(data.get("about") or {}),
        )
