"""The tuner of EAGLE-2's dynamic tree (`EAGLE2`; `builder.tune.static.EAGLE` picks it for `tree.type: dynamic`).

A dynamic tree depends on the context, so no calibration tree describes it: τ is measured by a calibration decode
per setting (depth, top_k, total_nodes) of `grid` — the chains, small top_k-2 trees and the recipe's top_k at each
total_nodes — then per depth (±1, ±2) around the best tree that is no chain (a coordinate search). top_k may be
lowered (the draft graph is exported for the recipe's top_k; a smaller one uses its first ranks, `EagleDrafter`),
never raised. A top_k-1 setting is a chain, drafted exactly as EAGLE-1 drafts it (`EagleDrafter`'s `runnable`):
so the grid holds every chain EAGLE-1's tuner can pick (depth <= MAX_CHAIN), and a tuned EAGLE-2 is never below a
tuned EAGLE-1 for want of one. The chains' τ come from one decode, the deepest chain's: under greedy verification
a chain of d nodes accepts min(a, d) in a step where the deepest accepts a, so τ(d) = 1 + Σ_{j<=d} P(>= j
accepted) (`chain_tau`) — the same per-node argument as EAGLE-1's calibration tree (`builder.tune.acceptance`).
The draft schedule's options at batch b: speculation off and the measured truncations of the pick (fewer
total_nodes; a chain's shorter chains).

Step cost (`costs.StepCost`): the target step over total_nodes + 1 nodes, the draft's extend and levels - 1 expands
of top_k nodes (levels = min(depth, total_nodes)); units = levels (draft calls) — for a chain, EAGLE-1's figures.
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

TOTALS = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)  # total_nodes grid at the recipe's top_k (within the curve)
SMALL_TOP_K = 2  # the small trees' top_k
SMALL_TOTALS = (2, 3, 4, 6, 8)  # their total_nodes
MAX_CHAIN = 8  # the deepest chain in the grid: as deep as EAGLE-1's tuner looks (`builder.tune.static.EAGLE_DEPTH`)
MAX_DEPTH = 16  # the recipe's limit (`builder.speculative.eagle.config.DynamicTree.depth`)
KEYS = ("depth", "top_k", "total_nodes")

Key = tuple[int, int, int]  # (depth, top_k, total_nodes)


def most_nodes(depth: int, top_k: int) -> int:
    """Candidates `depth` levels of `top_k` children per expanded node produce (the recipe's own check)."""
    return top_k + (depth - 1) * top_k * top_k


def setting_key(depth: int, top_k: int, total_nodes: int) -> Key:
    """One key per tree: depth capped at total_nodes (deeper levels keep nothing); top_k 1 or one node: a chain; two
    nodes at top_k >= 2: top_k 2 (the root's best child and the better of its second child and its grandchild: the
    same two nodes, in the same order, for every top_k >= 2)."""
    depth = min(depth, total_nodes)
    if top_k == 1 or total_nodes == 1:
        return (depth, 1, depth)
    return (depth, 2, 2) if total_nodes == 2 else (depth, top_k, total_nodes)


def key_of(setting: Mapping[str, Any]) -> Key:
    return setting_key(*(int(setting[k]) for k in KEYS))


def chains(room: int) -> list[Key]:
    """Every chain the grid holds: d nodes at top_k 1, d = 1..min(MAX_CHAIN, room - 1)."""
    return [(d, 1, d) for d in range(1, min(MAX_CHAIN, room - 1) + 1)]


def grid(depth: int, top_k: int, total_nodes: int, room: int) -> list[Key]:
    """The settings scored first, within `room` tree nodes (root included) and the recipe's top_k (the draft graph's
    ranks): the chains (`chains`), top_k-2 trees of SMALL_TOTALS nodes, and the recipe's top_k at each of TOTALS
    and its own total_nodes — each at the recipe's depth (capped by its nodes) and at most the candidates that depth
    and top_k produce (`most_nodes`). Unique, in that order."""
    out = chains(room)
    families = [(SMALL_TOP_K, SMALL_TOTALS)] if 1 < SMALL_TOP_K < top_k else []
    families.append((top_k, (*TOTALS, total_nodes)))
    for k, totals in families:
        for n in sorted(set(totals)):
            key = setting_key(depth, k, n)
            if n < room and n <= most_nodes(key[0], k) and key not in out:
                out.append(key)
    return out


def around(key: Key) -> list[Key]:
    """The coordinate search's second round: `key`'s top_k and total_nodes at its depth ±1, ±2, where they exist
    (1..MAX_DEPTH, no deeper than its nodes, enough candidates). None for a chain: the chains are every depth
    already."""
    depth, k, n = key
    if k == 1:
        return []
    keys = [setting_key(d, k, n) for d in (depth - 2, depth - 1, depth + 1, depth + 2) if 1 <= d <= MAX_DEPTH]
    return [x for x in dict.fromkeys(keys) if x != key and n <= most_nodes(x[0], k)]


def chain_tau(deepest: TauStats, d: int) -> float:
    """τ of the d-node chain from the deepest chain's decode: 1 + Σ_{j<=d} (steps accepting >= j) / steps."""
    return 1.0 + sum(deepest.accepted_at_depth[:d]) / deepest.steps if deepest.steps else 1.0


def tune_dynamic(tuner: Tuner, cal: Calibration, curve: StepCurve, room: int, host: Host, say: Say) -> Tuned:
    spec = cal.loaded.recipe.speculative
    assert isinstance(spec.tree, DynamicTree)  # `ByTreeType` picks this tuner for dynamic trees
    t = spec.tree
    measured: dict[Key, TauStats] = {}  # one calibration decode each
    deepest = max(chains(room), default=None)

    def stats(key: Key) -> TauStats:
        if key not in measured:
            d, k, n = key
            say(f"calibration: EAGLE-2 depth {d}, top_k {k}, total_nodes {n}")
            config = set_path(spec, ("tree",), {"type": "dynamic", "depth": d, "top_k": k, "total_nodes": n})
            # the recipe's top_k ranks (the exported graph's) and tree slots for any depth: one net for the search
            measured[key] = measure_tau(cal, config, t.top_k, MAX_DEPTH * t.top_k)
        return measured[key]

    def tau(key: Key) -> float:
        if key[1] == 1 and deepest is not None and key[0] <= deepest[0]:
            return chain_tau(stats(deepest), key[0])
        return stats(key).tau

    scores: dict[Key, float] = {}

    def scored(b: int, key: Key) -> Scored:
        if key not in scores:
            scores[key] = tau(key)
        setting = dict(zip(KEYS, key))
        return Scored(key[2] + 1, scores[key], step_ms(tuner, setting, curve, b, scores[key], host), setting)

    first = [scored(1, key) for key in grid(t.depth, t.top_k, t.total_nodes, room)]
    trees = [s for s in first if s.setting["top_k"] > 1]
    if trees:  # other depths around the best tree that is no chain
        for key in around(key_of(best(trees).setting)):
            scored(1, key)
    table = [scored(1, key) for key in scores]
    pick = best(table)
    cur_key = setting_key(t.depth, t.top_k, t.total_nodes)
    cur = scored(1, cur_key) if cur_key in scores else pick
    pd, pk, pn = (pick.setting[k] for k in KEYS)

    def options(b: int) -> list[Scored]:  # the pick's measured truncations: fewer total_nodes (1: the 1-node chain)
        kept = [key for key in scores if key == setting_key(pd, pk, key[2]) and key[2] <= pn]
        return [off_option(curve, b, host)] + [scored(b, key) for key in sorted(kept, key=lambda x: x[2])]

    at_depth = stats(deepest if pk == 1 and deepest is not None else (pd, pk, pn))
    depth_share = [round(h / at_depth.steps, 4) for h in at_depth.accepted_at_depth[: pd if pk == 1 else None]]
    return Tuned(
        pick,
        cur,
        table,
        options,
        {"settings_measured": len(measured), "settings_scored": len(table), "accept_rate_by_depth": depth_share},
    )


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
