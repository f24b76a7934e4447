"""The Lookahead tuner (`TUNER`, named by builder/speculative/lookahead/method.py): τ measured per (W, N, G) on a
grid (W 1,2,4 × N 3,4,5 × G 1,2,4 and the recipe's), each setting decoded; the draft schedule's options at batch b:
speculation off and the pick's W and N with G no larger.

Step cost (`costs.StepCost`): the target step over its draft, T = 1 + (N-2) + (W-1+G)(N-1); units = draft nodes. The
host's small decode runs W=1 N=2 G=1 as the drafter (one draft node).
"""

from __future__ import annotations

from typing import Any, Mapping

from builder.speculative.lookahead.config import LookaheadConfig, lookahead_draft_len
from builder.tune.acceptance import TauStats
from builder.tune.calibrate import Calibration
from builder.tune.choose import Scored, best
from builder.tune.costs import Host, step_ms
from builder.tune.curve import StepCurve
from builder.tune.tuners import Say, Tuned, Tuner, measure_tau, off_option, section_fields

KEYS = ("window", "ngram", "verification_set")
GRID = [(w, n, g) for w in (1, 2, 4) for n in (3, 4, 5) for g in (1, 2, 4)]


def nodes(w: int, n: int, g: int) -> int:
    """Tree nodes per step (root included)."""
    return 1 + lookahead_draft_len(w, n, g)


def config(w: int, n: int, g: int) -> LookaheadConfig:
    return LookaheadConfig(method="lookahead", window=w, ngram=n, verification_set=g)


def tune_lookahead(tuner: Tuner, cal: Calibration, curve: StepCurve, room: int, host: Host, say: Say) -> Tuned:
    s = cal.loaded.recipe.speculative
    current = (s.window, s.ngram, s.verification_set)
    grid = [c for c in dict.fromkeys([*GRID, current]) if nodes(*c) <= room]
    taus: dict[tuple[int, int, int], TauStats] = {}
    for w, n, g in grid:
        say(f"calibration: Lookahead W={w} N={n} G={g}")
        taus[(w, n, g)] = measure_tau(cal, config(w, n, g))

    def scored(b: int, w: int, n: int, g: int) -> Scored:
        tau, setting = taus[(w, n, g)].tau, {"window": w, "ngram": n, "verification_set": g}
        return Scored(nodes(w, n, g), tau, step_ms(tuner, setting, curve, b, tau, host), setting)

    table = [scored(1, *c) for c in taus]
    pick = best(table)
    cur = scored(1, *current) if current in taus else pick
    pw, pn, pg = (pick.setting[k] for k in KEYS)

    def options(b: int) -> list[Scored]:
        return [off_option(curve, b, host)] + [scored(b, w, n, g) for w, n, g in taus if (w, n) == (pw, pn) and g <= pg]

    st = taus[(pw, pn, pg)]
    depth_share = [round(h / st.steps, 4) for h in st.accepted_at_depth]
    return Tuned(pick, cur, table, options, {"settings_measured": len(taus), "accept_rate_by_depth": depth_share})


def draft_nodes(setting: Mapping[str, Any]) -> int:
    return lookahead_draft_len(setting["window"], setting["ngram"], setting["verification_set"])


current, overlay = section_fields(KEYS)


TUNER = Tuner(
    key="lookahead",
    search=tune_lookahead,
    current=current,
    overlay=overlay,
    units=draft_nodes,
    graph_ms=lambda s, curve, batch, _tau: curve.target_ms(batch, 1 + draft_nodes(s)),
    small=lambda _cur: {"window": 1, "ngram": 2, "verification_set": 1},
    small_config=lambda s: config(s["window"], s["ngram"], s["verification_set"]),
)
