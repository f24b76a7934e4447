"""c: ms per decoding step of a setting at batch size b — the step curve plus the host's own work.

target      curve.target(b, T), T = tree nodes per step (root included); fused heads (Medusa) are in it
draft graph + extend(b, M): the step's accepted chain committed to the draft's cache, M ≈ E[τ] pairs
            + one expand(b, F_d) per tree level with children below the root (F_d = that level's
              frontier: EAGLE-1 the nodes with children, EAGLE-2 top_k for depth - 1 levels)
off         a 1-node budget turns the drafter off (`set_budget(1)`): the target step alone
host        + `Host.ms(b, units)`: what the decoding loop and the drafter do on the host per step, which
            no graph timing sees — base_ms per step, plus, when drafting, b · (draft_ms + per_unit_ms ·
            units) with units = EAGLE tree levels (draft calls) or Medusa / Lookahead draft nodes;
            measured on this host's engine (`builder.tune.host`); zero for a GPU roofline (not
            measurable here)

Which graphs a setting runs and how many units it drafts is its method's (`StepCost`: each `builder.tune.tuners.Tuner`
is one — static.py for Medusa and EAGLE-1, dynamic.py for EAGLE-2, lookahead.py, ngram.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence

from builder.tune.curve import StepCurve

Choice = tuple[int, ...]


@dataclass(frozen=True)
class Host:
    """Host work per step: base_ms (the loop, the engine's host side), and per drafting row draft_ms (a drafter
    that runs at all) + per_unit_ms per unit."""

    base_ms: float = 0.0
    per_unit_ms: float = 0.0
    source: str = "none"  # "measured" | "none"
    draft_ms: float = 0.0

    def ms(self, batch: int, units: int) -> float:
        return self.base_ms + (batch * (self.draft_ms + self.per_unit_ms * units) if units else 0.0)


class StepCost(Protocol):
    """A method's share of the cost model (a `Tuner` is one)."""

    @property
    def units(self) -> Callable[[Mapping[str, Any]], int]:
        """setting -> drafting units (`Host`): draft calls or draft nodes."""
        ...

    @property
    def graph_ms(self) -> Callable[[Mapping[str, Any], StepCurve, int, float], float]:
        """(setting, curve, batch, τ) -> ms of the graphs one step runs (target, and draft calls); no host work."""
        ...


def extend_ms(curve: StepCurve, batch: int, tau: float) -> float:
    """A draft graph's extend: the step's accepted chain (≈ τ pairs, within what was measured) into its cache."""
    most = min(max(row) for row in curve.extend.values())  # pairs measured at every batch size
    return curve.extend_ms(batch, min(max(1, round(tau)), most))


def step_ms(cost: StepCost, setting: Mapping[str, Any], curve: StepCurve, batch: int, tau: float, host: Host) -> float:
    """c: graphs + host work of one step. A setting without draft nodes (speculation off) drafts nothing."""
    if setting.get("off") or setting.get("choices") == []:
        return curve.target_ms(batch, 1) + host.ms(batch, 0)
    return cost.graph_ms(setting, curve, batch, tau) + host.ms(batch, cost.units(setting))


def static_cost(
    curve: StepCurve, batch: int, cost: StepCost, host: Host = Host()
) -> Callable[[Sequence[Choice], float], float]:
    """cost(choices, tau) -> ms of one step with this static tree (Medusa: fused heads; EAGLE-1: draft calls)."""
    return lambda choices, tau: step_ms(cost, {"choices": list(choices)}, curve, batch, tau, host)
