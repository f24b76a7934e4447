"""`StepCurve`: what one decoding step costs, as data (engine.json's "step_curve", timed by the engine stage with
`builder.engines.step_curve.measure_folder`; or the roofline's prediction, `builder.tune.roofline`).

    target[b][T]   ms of one target step over b sequences with T tree nodes each (verification and the
                   KV commit included; Medusa heads are fused into the target graph, so they are in it)
    expand[b][F]   ms of one EAGLE draft call over F tentative nodes per sequence (`EagleNet.expand`)
    extend[b][M]   ms of one EAGLE draft call committing M new pairs per sequence (`EagleNet.extend`)

Between measured points the cost is linear in T (F, M) and in b; outside the measured range a curve
answers nothing (`OutOfRange`): the tuner only considers tree sizes the curve covers, which are the sizes
the recipe's engine allows. JSON keys are strings (engine.json); `from_json` reads them back.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any, Mapping

from builder.timing import isotonic

Table = dict[int, dict[int, float]]  # batch -> {size: ms}


class OutOfRange(ValueError):
    """A cost asked for outside the measured (or predicted) range."""


@dataclass(frozen=True)
class StepCurve:
    source: str  # "measured" (this host) | "roofline" (a prediction for a GPU)
    target: Table
    expand: Table = field(default_factory=dict)  # empty: no EAGLE draft graph
    extend: Table = field(default_factory=dict)
    about: dict[str, Any] = field(default_factory=dict)  # host / GPU, threads, context length, rates

    def target_ms(self, batch: int, nodes: int) -> float:
        return _lookup(self.target, batch, nodes, "target")

    def expand_ms(self, batch: int, nodes: int) -> float:
        return _lookup(self.expand, batch, nodes, "EAGLE expand")

    def extend_ms(self, batch: int, pairs: int) -> float:
        return _lookup(self.extend, batch, pairs, "EAGLE extend")

    @property
    def max_nodes(self) -> int:
        return min(max(row) for row in self.target.values())

    @property
    def batches(self) -> list[int]:
        return sorted(self.target)

    def to_json(self) -> dict[str, Any]:
        def tab(t: Table) -> dict[str, dict[str, float]]:
            return {str(b): {str(n): round(ms, 5) for n, ms in sorted(row.items())} for b, row in sorted(t.items())}

        return {
            "source": self.source,
            "unit": "ms",
            "target": tab(self.target),
            "expand": tab(self.expand),
            "extend": tab(self.extend),
            "about": self.about,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], smooth: bool = True) -> "StepCurve":
        """Read engine.json's curve; `smooth` makes each row non-decreasing in size (`isotonic`)."""

        def tab(t: Any) -> Table:
            rows = {int(b): {int(n): float(ms) for n, ms in row.items()} for b, row in (t or {}).items()}
            return {b: isotonic(row) for b, row in rows.items()} if smooth else rows

        curve = cls(
            str(data["source"]),
            tab(data["target"]),
            tab(data.get("expand")),
            tab(data.get("extend")),
            dict(data.get("about") or {}),
        )
        if not curve.target or any(not row for row in curve.target.values()):
            raise ValueError("a step curve needs at least one target point per batch size")
        return curve


def _lookup(table: Table, batch: int, size: int, what: str) -> float:
    """Linear in size on each measured batch, then linear in batch between the two around it."""
    if not table:
        raise OutOfRange(f"no {what} costs in this curve")
    batches = sorted(table)
    if batch in table:
        return _linear(table[batch], size, what)
    i = bisect.bisect_left(batches, batch)
    if i == 0 or i == len(batches):
        raise OutOfRange(f"{what} cost at batch {batch}: measured batches are {batches}")
    lo, hi = batches[i - 1], batches[i]
    a, b = _linear(table[lo], size, what), _linear(table[hi], size, what)
    return a + (b - a) * (batch - lo) / (hi - lo)


def _linear(row: Mapping[int, float], x: int, what: str) -> float:
    xs = sorted(row)
    if x in row:
        return row[x]
    i = bisect.bisect_left(xs, x)
    if i == 0 or i == len(xs):
        raise OutOfRange(f"{what} cost at {x} nodes: measured {xs[0]}..{xs[-1]}")
    lo, hi = xs[i - 1], xs[i]
    return row[lo] + (row[hi] - row[lo]) * (x - lo) / (hi - lo)
