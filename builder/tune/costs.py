"""c: ms per decoding step of a setting at batch size b — the step curve plus the host's own work.

target      curve.target(b, T), T = tree nodes per step (root included); Medusa heads are in it
EAGLE       + extend(b, M): the step's accepted chain committed to the draft's cache, M ≈ E[τ] pairs
            + one expand(b, F_d) per tree level with children below the root (F_d = that level's
              frontier: EAGLE-1 the nodes with children, EAGLE-2 top_k for depth - 1 levels)
off         a 1-node budget turns the drafter off (`set_budget(1)`): the target step alone
host        + `Host.ms(b, units)`: what the decoding loop and the drafter do on the host per step, which
            no graph timing sees — base_ms per step, plus, when drafting, b · (draft_ms + per_unit_ms ·
            units) with units = EAGLE tree levels (draft calls) or Medusa / Lookahead draft nodes;
            measured on this host's engine (`builder.tune.host`); zero for a GPU roofline (not
            measurable here)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from builder.speculative.lookahead.config import lookahead_draft_len
from builder.tune.curve import StepCurve
from builder.tune.expect import level_widths

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


def _extend_ms(curve: StepCurve, batch: int, tau: float) -> float:
    most = min(max(row) for row in curve.extend.values())  # pairs measured at every batch size
    return curve.extend_ms(batch, min(max(1, round(tau)), most))


def units(key: str, setting: Mapping[str, Any]) -> int:
    """Drafting units of a setting (`Host`): EAGLE tree levels (draft calls), else draft nodes."""
    if key == "eagle1":
        return max((len(c) for c in setting["choices"]), default=0)
    if key == "eagle2":
        return min(setting["depth"], setting["total_nodes"])
    if key == "lookahead":
        return lookahead_draft_len(setting["window"], setting["ngram"], setting["verification_set"])
    return len(setting.get("choices", ()))


def graph_ms(key: str, setting: Mapping[str, Any], curve: StepCurve, batch: int, tau: float) -> float:
    """ms of the graphs one step of this setting runs (target, and EAGLE's draft calls); host work not included."""
    if key in ("medusa", "eagle1"):
        choices = [tuple(c) for c in setting["choices"]]
        ms = curve.target_ms(batch, len(choices) + 1)
        if key == "eagle1" and choices:
            ms += _extend_ms(curve, batch, tau) + sum(curve.expand_ms(batch, w) for w in level_widths(choices) if w)
        return ms
    if key == "eagle2":
        n, levels = setting["total_nodes"], min(setting["depth"], setting["total_nodes"])
        return (
            curve.target_ms(batch, n + 1)
            + _extend_ms(curve, batch, tau)
            + (levels - 1) * curve.expand_ms(batch, setting["top_k"])
        )
    if key == "lookahead":
        return curve.target_ms(batch, 1 + units(key, setting))
    return curve.target_ms(batch, 1)


def step_ms(key: str, setting: Mapping[str, Any], curve: StepCurve, batch: int, tau: float, host: Host) -> float:
    """c: graphs + host work of one step. A setting without draft nodes (speculation off) drafts nothing."""
    if setting.get("off") or setting.get("choices") == []:
        return curve.target_ms(batch, 1) + host.ms(batch, 0)
    return graph_ms(key, setting, curve, batch, tau) + host.ms(batch, units(key, setting))


def static_cost(
    curve: StepCurve, batch: int, key: str, host: Host = Host()
) -> Callable[[Sequence[Choice], float], float]:
    """cost(choices, tau) -> ms of one step with this static tree (Medusa: fused heads; EAGLE-1: draft calls)."""
    return lambda choices, tau: step_ms(key, {"choices": list(choices)}, curve, batch, tau, host)
