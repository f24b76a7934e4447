"""The tuner of EAGLE-2's dynamic tree (`EAGLE2`; `builder.tune.static.EAGLE` picks it for `tree.type: dynamic`).

A dynamic tree depends on the context, so no calibration tree describes it: τ is measured per total_nodes at the
recipe's depth, then per depth (±1, ±2) at the best total_nodes (a coordinate search); top_k is kept (the draft
graph is exported for it). The draft schedule's options at batch b: speculation off and the measured truncations of
the pick (fewer total_nodes).

Step cost (`costs.StepCost`): the target step over total_nodes + 1 nodes, the draft's extend and depth - 1 expands of
top_k nodes; units = levels (draft calls).
"""

from __future__ import annotations

from typing import Any, Mapping

from builder.speculative.eagle.config import DynamicTree
from builder.speculative.method import set_path
from builder.tune.acceptance import TauStats
from builder.tune.calibrate import Calibration
from builder.tune.choose import Scored, best
from builder.tune.costs import Host, extend_ms, step_ms
from builder.tune.curve import StepCurve
from builder.tune.tuners import Say, Tuned, Tuner, measure_tau, off_option

TOTALS = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)  # total_nodes grid (within the curve)
KEYS = ("depth", "top_k", "total_nodes")


def tune_dynamic(tuner: Tuner, cal: Calibration, curve: StepCurve, room: int, host: Host, say: Say) -> Tuned:
    spec = cal.loaded.recipe.speculative
    assert isinstance(spec.tree, DynamicTree)  # `ByTreeType` picks this tuner for dynamic trees
    t, k = spec.tree, spec.tree.top_k
    totals = sorted({n for n in TOTALS if n < room} | ({t.total_nodes} if t.total_nodes < room else set()))
    taus: dict[tuple[int, int], TauStats] = {}

    def scored(b: int, d: int, n: int) -> Scored:
        if (d, n) not in taus:
            say(f"calibration: EAGLE-2 depth {d}, top_k {k}, total_nodes {n}")
            config = set_path(spec, ("tree",), {"type": "dynamic", "depth": d, "top_k": k, "total_nodes": n})
            taus[(d, n)] = measure_tau(cal, config, k, d * k)
        tau, setting = taus[(d, n)].tau, {"depth": d, "top_k": k, "total_nodes": n}
        return Scored(n + 1, tau, step_ms(tuner, setting, curve, b, tau, host), setting)

    # total_nodes at the recipe's depth, then other depths at the best total_nodes (a coordinate search)
    first = best(scored(1, min(t.depth, n), n) for n in totals)
    n1 = first.setting["total_nodes"]
    for d in (t.depth - 2, t.depth - 1, t.depth + 1, t.depth + 2):
        if 1 <= d <= 16:
            scored(1, min(d, n1), n1)
    table = [scored(1, d, n) for d, n in taus]
    pick = best(table)
    cur_key = (min(t.depth, t.total_nodes), t.total_nodes)
    cur = scored(1, *cur_key) if cur_key in taus else pick
    pd, pn = pick.setting["depth"], pick.setting["total_nodes"]

    def options(b: int) -> list[Scored]:
        kept = [n for n in totals if n <= pn and (min(pd, n), n) in taus]  # measured truncations of the pick
        return [off_option(curve, b, host)] + [scored(b, min(pd, n), n) for n in kept]

    depth_share = [round(h / taus[(pd, pn)].steps, 4) for h in taus[(pd, pn)].accepted_at_depth]
    return Tuned(pick, cur, table, options, {"settings_measured": len(taus), "accept_rate_by_depth": depth_share})


def levels(setting: Mapping[str, Any]) -> int:
    """Draft calls per step: one per level, no more levels than nodes."""
    return min(setting["depth"], setting["total_nodes"])


def graph_ms(setting: Mapping[str, Any], curve: StepCurve, batch: int, tau: float) -> float:
    return (
        curve.target_ms(batch, setting["total_nodes"] + 1)
        + extend_ms(curve, batch, tau)
        + (levels(setting) - 1) * curve.expand_ms(batch, setting["top_k"])
    )


def current(loaded: Any) -> dict[str, Any]:
    tree = loaded.recipe.speculative.tree
    return {k: getattr(tree, k) for k in KEYS}


EAGLE2 = Tuner(
    key="eagle2",
    search=tune_dynamic,
    current=current,
    overlay=lambda s: {"tree": {"type": "dynamic", **{k: s[k] for k in KEYS}}},
    units=levels,
    graph_ms=graph_ms,
    small=lambda cur: {"depth": 1, "top_k": cur["top_k"], "total_nodes": 1},
)
