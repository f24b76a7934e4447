"""EAGLE-3's tuner: EAGLE's, under its own key. Its drafts grow as EAGLE-1/2's do (static trees and chains, EAGLE-2's
dynamic expansion: `builder.speculative.eagle.drafter`) over the same draft-graph calls (one extend, one expand per
level), so the search and the cost model are theirs; only the report's method name differs."""

from __future__ import annotations

from dataclasses import replace

from builder.tune.dynamic import EAGLE2
from builder.tune.static import EAGLE1
from builder.tune.tuners import ByTreeType

EAGLE3 = ByTreeType(static=replace(EAGLE1, key="eagle3"), dynamic=replace(EAGLE2, key="eagle3"))
