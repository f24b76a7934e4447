"""The per-method tuners: acceptance from calibration decodes, cost from the step curve, the best setting.

Each returns a `Tuned`: the pick (the best speculative setting at batch 1 within the curve's tree sizes; where
speculation off beats every setting, the draft schedule says so with a 1-node budget),
the recipe's current setting scored the same way, every candidate scored, the candidates a node budget
leaves at batch size b (for the draft schedule: truncations of the pick and speculation off) and the
acceptance statistics.

    static (Medusa, EAGLE-1)  P(c) per node of a calibration tree (`acceptance.node_stats`), E[τ] exact,
                              the tree from `choose.choose_static` (depth <= num_heads for Medusa)
    EAGLE-2                   τ measured per total_nodes at the recipe's depth, then per depth (±1, ±2) at the
                              best total_nodes; top_k kept (the draft graph is exported for it)
    Lookahead                 τ measured per (W, N, G) on a grid (W 1,2,4 × N 3,4,5 × G 1,2,4 and the recipe's)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from builder.speculative.drafters import NGRAM_KEYS
from builder.speculative.eagle.config import DynamicTree, EagleConfig
from builder.speculative.lookahead.config import LookaheadConfig, lookahead_draft_len
from builder.speculative.medusa.config import MedusaConfig
from builder.speculative.tree import sort_choices
from builder.tune.acceptance import TauStats, calibration_choices, node_stats, tau_stats
from builder.tune.calibrate import Calibration
from builder.tune.choose import Scored, best, choose_static
from builder.tune.costs import Host, static_cost, step_ms
from builder.tune.curve import StepCurve
from builder.tune.expect import expected_tau, truncated, truncated_tau

CAL_RANKS = 8  # top-k ranks per depth in the calibration tree
EAGLE_DEPTH = 8  # deepest EAGLE-1 level considered
TOTALS = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)  # EAGLE-2 total_nodes grid (within the curve)
LOOKAHEAD_GRID = [(w, n, g) for w in (1, 2, 4) for n in (3, 4, 5) for g in (1, 2, 4)]

Say = Callable[[str], None]


@dataclass
class Tuned:
    pick: Scored
    current: Scored
    table: list[Scored]  # every candidate at batch 1
    options: Callable[[int], list[Scored]]  # the budgets' candidates at batch size b
    stats: dict[str, Any]


def _off(curve: StepCurve, b: int, host: Host) -> Scored:
    return Scored(1, 1.0, curve.target_ms(b, 1) + host.ms(b, 0), {"off": True})


def current_setting(loaded: Any) -> dict[str, Any]:
    """The recipe's own setting in the tuners' terms (choices | depth, top_k, total_nodes | window, ngram, G)."""
    from builder.stages.parts import Parts

    spec = loaded.recipe.speculative
    if spec.method == "lookahead":
        return {"window": spec.window, "ngram": spec.ngram, "verification_set": spec.verification_set}
    if spec.method == "ngram":
        return dict(zip(NGRAM_KEYS, spec.settings))
    if spec.method == "eagle" and spec.tree.type == "dynamic":
        return {"depth": spec.tree.depth, "top_k": spec.tree.top_k, "total_nodes": spec.tree.total_nodes}
    return {"choices": [list(c) for c in Parts(loaded, spec.method).choices()]}


def tune_static(cal: Calibration, curve: StepCurve, room: int, host: Host, say: Say) -> Tuned:
    spec = cal.loaded.recipe.speculative
    eagle = spec.method == "eagle"
    key = "eagle1" if eagle else "medusa"
    current = [tuple(c) for c in cal.parts.choices()]
    depth = spec.num_heads if isinstance(spec, MedusaConfig) else max(EAGLE_DEPTH, max(len(c) for c in current))
    wide = calibration_choices(depth, CAL_RANKS, min(max(2 * room, 48), 160))
    calib = sort_choices(list(set(wide) | set(current)))
    ranks = 1 + max(c[-1] for c in calib)
    config = {"method": "eagle", "version": 1, "choices": calib} if eagle else {"method": "medusa", "choices": calib}
    say(f"calibration: {len(cal.prompts)} prompts × {cal.max_new} tokens with a {len(calib)}-node tree")
    engine = cal.engine(0 if eagle else ranks)
    stats = node_stats(
        engine, cal.drafters(config, ranks, len(calib) + 1), calib, cal.prompts, cal.max_new, cal.stop_ids
    )
    prob = stats.probability()
    _, table = choose_static(prob, static_cost(curve, 1, key, host), room, depth)
    pick = best(r for r in table if r.nodes > 1)  # a tree to write; the schedule turns it off where off is best
    cur_tau = expected_tau(current, prob)
    cur = Scored(
        len(current) + 1,
        cur_tau,
        static_cost(curve, 1, key, host)(current, cur_tau),
        {"choices": [list(c) for c in current]},
    )
    chosen = [tuple(c) for c in pick.setting["choices"]]

    def options(b: int) -> list[Scored]:
        cost = static_cost(curve, b, key, host)
        out = [_off(curve, b, host)]
        for n in range(2, pick.nodes + 1):
            tau = truncated_tau(chosen, prob, n)
            out.append(Scored(n, tau, cost(truncated(chosen, n), tau)))
        return out

    return Tuned(pick, cur, table, options, {"calibration_tree_nodes": len(calib), **stats.to_json()})


def _measure(cal: Calibration, config: dict[str, Any], top_k: int = 0, tentative: int = 0) -> TauStats:
    engine = cal.engine(0)
    return tau_stats(engine, cal.drafters(config, top_k, tentative), cal.prompts, cal.max_new, cal.stop_ids)


def tune_dynamic(cal: Calibration, curve: StepCurve, room: int, host: Host, say: Say) -> Tuned:
    spec = cal.loaded.recipe.speculative
    assert isinstance(spec, EagleConfig) and isinstance(spec.tree, DynamicTree)  # TUNERS["eagle2"]
    t, k = spec.tree, spec.tree.top_k
    totals = sorted({n for n in TOTALS if n < room} | ({t.total_nodes} if t.total_nodes < room else set()))
    taus: dict[tuple[int, int], TauStats] = {}

    def scored(b: int, d: int, n: int) -> Scored:
        if (d, n) not in taus:
            say(f"calibration: EAGLE-2 depth {d}, top_k {k}, total_nodes {n}")
            dyn = {"depth": d, "top_k": k, "total_nodes": n}
            taus[(d, n)] = _measure(cal, {"method": "eagle", "version": 2, "dynamic": dyn}, k, d * k)
        tau, setting = taus[(d, n)].tau, {"depth": d, "top_k": k, "total_nodes": n}
        return Scored(n + 1, tau, step_ms("eagle2", setting, curve, b, tau, host), setting)

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
        return [_off(curve, b, host)] + [scored(b, min(pd, n), n) for n in kept]

    depth_share = [round(h / taus[(pd, pn)].steps, 4) for h in taus[(pd, pn)].accepted_at_depth]
    return Tuned(pick, cur, table, options, {"settings_measured": len(taus), "accept_rate_by_depth": depth_share})


def _lookahead_nodes(w: int, n: int, g: int) -> int:
    return 1 + lookahead_draft_len(w, n, g)


def tune_lookahead(cal: Calibration, curve: StepCurve, room: int, host: Host, say: Say) -> Tuned:
    s = cal.loaded.recipe.speculative
    assert isinstance(s, LookaheadConfig)  # TUNERS["lookahead"]
    current = (s.window, s.ngram, s.verification_set)
    grid = [c for c in dict.fromkeys([*LOOKAHEAD_GRID, current]) if _lookahead_nodes(*c) <= room]
    taus: dict[tuple[int, int, int], TauStats] = {}
    for w, n, g in grid:
        say(f"calibration: Lookahead W={w} N={n} G={g}")
        taus[(w, n, g)] = _measure(cal, {"method": "lookahead", "window": w, "ngram": n, "verification_set": g})

    def scored(b: int, w: int, n: int, g: int) -> Scored:
        tau, setting = taus[(w, n, g)].tau, {"window": w, "ngram": n, "verification_set": g}
        return Scored(_lookahead_nodes(w, n, g), tau, step_ms("lookahead", setting, curve, b, tau, host), setting)

    table = [scored(1, *c) for c in taus]
    pick = best(table)
    cur = scored(1, *current) if current in taus else pick
    pw, pn, pg = (pick.setting[k] for k in ("window", "ngram", "verification_set"))

    def options(b: int) -> list[Scored]:
        return [_off(curve, b, host)] + [scored(b, w, n, g) for w, n, g in taus if (w, n) == (pw, pn) and g <= pg]

    st = taus[(pw, pn, pg)]
    depth_share = [round(h / st.steps, 4) for h in st.accepted_at_depth]
    return Tuned(pick, cur, table, options, {"settings_measured": len(taus), "accept_rate_by_depth": depth_share})


TUNERS = {"medusa": tune_static, "eagle1": tune_static, "eagle2": tune_dynamic, "lookahead": tune_lookahead}
