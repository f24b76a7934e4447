"""Tuners of static trees: Medusa (`MEDUSA`) and EAGLE-1 (`EAGLE1`); `EAGLE` picks EAGLE-1's or EAGLE-2's
(`builder.tune.dynamic`) by the recipe's tree type. Named by the methods' `tune` paths
(builder/speculative/medusa/method.py, builder/speculative/eagle/method.py).

One calibration decode with a wide tree holding the recipe's (`acceptance.calibration_choices`, top CAL_RANKS ranks
per depth, depth <= the method's `Facts.max_depth` — Medusa: one head per level — else EAGLE_DEPTH) measures P(c) per
node (`acceptance.node_stats`); E[τ] of any subtree is then exact (`expect`), and `choose.choose_static` picks the
tree. The draft schedule's options at batch b: speculation off and the pick's truncations (its first n nodes).

Step cost (`costs.StepCost`): Medusa's heads are fused into the target step (`target(b, T)`, units = draft nodes);
EAGLE-1 adds its draft graph's extend and one expand per level with children (units = levels, i.e. draft calls).
"""

from __future__ import annotations

from typing import Any, Mapping

from builder.speculative.method import FUSED_HEADS, set_path
from builder.speculative.tree import sort_choices
from builder.tune.acceptance import calibration_choices, node_stats
from builder.tune.calibrate import Calibration
from builder.tune.choose import Scored, best, choose_static
from builder.tune.costs import Host, extend_ms, static_cost
from builder.tune.curve import StepCurve
from builder.tune.dynamic import EAGLE2
from builder.tune.expect import expected_tau, level_widths, truncated, truncated_tau
from builder.tune.tuners import ByTreeType, Say, Tuned, Tuner, off_option

CAL_RANKS = 8  # top-k ranks per depth in the calibration tree
EAGLE_DEPTH = 8  # deepest level considered where the method sets no limit (EAGLE-1)


def tune_static(tuner: Tuner, cal: Calibration, curve: StepCurve, room: int, host: Host, say: Say) -> Tuned:
    """P(c) per node of a calibration tree, E[τ] exact, the tree from `choose_static` (module docstring)."""
    spec = cal.loaded.recipe.speculative
    m = cal.parts.method_of
    current = [tuple(c) for c in cal.parts.choices()]
    limit = m.facts(cal.parts.drafter_config()).max_depth
    depth = limit if limit is not None else max(EAGLE_DEPTH, max(len(c) for c in current))
    wide = calibration_choices(depth, CAL_RANKS, min(max(2 * room, 48), 160))
    calib = sort_choices(list(set(wide) | set(current)))
    ranks = 1 + max(c[-1] for c in calib)
    path = m.tree_path(spec)
    assert path is not None, f"{m.name}: a static tuner needs a static tree"
    config = set_path(spec, path, [list(c) for c in calib])  # the recipe's drafter over the calibration tree
    say(f"calibration: {len(cal.prompts)} prompts × {cal.max_new} tokens with a {len(calib)}-node tree")
    engine = cal.engine(ranks if m.exports == FUSED_HEADS else 0)  # fused heads return `ranks` candidates each
    stats = node_stats(
        engine, cal.drafters(config, ranks, len(calib) + 1), calib, cal.prompts, cal.max_new, cal.stop_ids
    )
    prob = stats.probability()
    _, table = choose_static(prob, static_cost(curve, 1, tuner, host), room, depth)
    pick = best(r for r in table if r.nodes > 1)  # a tree to write; the schedule turns it off where off is best
    cur_tau = expected_tau(current, prob)
    cur = Scored(
        len(current) + 1,
        cur_tau,
        static_cost(curve, 1, tuner, host)(current, cur_tau),
        {"choices": [list(c) for c in current]},
    )
    chosen = [tuple(c) for c in pick.setting["choices"]]

    def options(b: int) -> list[Scored]:
        cost = static_cost(curve, b, tuner, host)
        out = [off_option(curve, b, host)]
        for n in range(2, pick.nodes + 1):
            tau = truncated_tau(chosen, prob, n)
            out.append(Scored(n, tau, cost(truncated(chosen, n), tau)))
        return out

    return Tuned(pick, cur, table, options, {"calibration_tree_nodes": len(calib), **stats.to_json()})


def current_tree(loaded: Any) -> dict[str, Any]:
    """The recipe's static tree (inline, a preset or a file) as the setting {"choices": [[…], …]}."""
    from builder.stages.parts import Parts

    return {"choices": [list(c) for c in Parts(loaded, loaded.recipe.speculative.method).choices()]}


def small_tree(current: Mapping[str, Any]) -> dict[str, Any]:
    """One drafting unit: the recipe's tree cut to its first node (`builder.tune.host`)."""
    return {"choices": [list(c) for c in truncated([tuple(c) for c in current["choices"]], 2)]}


def fused_heads_ms(setting: Mapping[str, Any], curve: StepCurve, batch: int, _tau: float) -> float:
    """The target step over the tree (root included): the heads run inside it."""
    return curve.target_ms(batch, len(setting["choices"]) + 1)


def draft_graph_ms(setting: Mapping[str, Any], curve: StepCurve, batch: int, tau: float) -> float:
    """The target step over the tree, the draft's extend and one expand per level with children below the root."""
    choices = [tuple(c) for c in setting["choices"]]
    ms = curve.target_ms(batch, len(choices) + 1)
    if choices:
        ms += extend_ms(curve, batch, tau) + sum(curve.expand_ms(batch, w) for w in level_widths(choices) if w)
    return ms


MEDUSA = Tuner(
    key="medusa",
    search=tune_static,
    current=current_tree,
    overlay=lambda s: {"tree": s["choices"]},  # speculative.tree: [[0], [0, 0], …] (inline choices)
    units=lambda s: len(s.get("choices", ())),  # draft nodes
    graph_ms=fused_heads_ms,
    small=small_tree,
)

EAGLE1 = Tuner(
    key="eagle1",
    search=tune_static,
    current=current_tree,
    overlay=lambda s: {"tree": {"type": "static", "choices": s["choices"]}},
    units=lambda s: max((len(c) for c in s["choices"]), default=0),  # tree levels: draft calls
    graph_ms=draft_graph_ms,
    small=small_tree,
)

EAGLE = ByTreeType(static=EAGLE1, dynamic=EAGLE2)
