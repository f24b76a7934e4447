"""What `trtspec tune` asks of a speculative method: its `Tuner`, the object its `Method.tune` dotted path names.

The tuner pipeline (`builder.tune.run`), the cost model (`builder.tune.costs`), the host's share
(`builder.tune.host`) and the overlay (`builder.tune.overlay`) ask the tuner, never the method's name:

    key           the report's "method" (medusa, eagle1, eagle2, lookahead, ngram)
    search        (tuner, calibration, curve, room, host, say) -> `Tuned`: the pick, the current setting, every
                  candidate scored, the draft schedule's options per batch size
    current       the recipe's own setting in the tuner's terms: a dict whose keys are the report's and the
                  overlay's (choices | depth, top_k, total_nodes | window, ngram, verification_set | max_draft, …)
    overlay       the `speculative:` fields that write a setting back into a recipe
    units         drafting units of a setting (`Host`): draft calls or draft nodes
    graph_ms      ms of the graphs one step of a setting runs (`builder.tune.costs.StepCost`)
    small         the one-unit setting the host's `small` decode runs; None: the drafter's host work is the same
                  whatever the setting, charged as the base share (`builder.tune.host`)
    small_config  the small setting as a drafter config the engine is opened with; None: the folder's own drafter
                  at a 2-node budget

A method with one tuner per tree type (EAGLE: EAGLE-1's static tree, EAGLE-2's dynamic one) names a `ByTreeType`.
A method whose `tune` is None (method none, an installed method without a tuner) has nothing to tune.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

from builder.speculative import registry
from builder.speculative.method import Config, Method, resolve
from builder.tune.acceptance import TauStats, tau_stats
from builder.tune.choose import Scored
from builder.tune.costs import Host
from builder.tune.curve import StepCurve

if TYPE_CHECKING:
    from builder.recipe.loader import LoadedRecipe
    from builder.tune.calibrate import Calibration

Say = Callable[[str], None]
Setting = Mapping[str, Any]


@dataclass
class Tuned:
    """A tuner's result. pick: the best speculative setting at batch 1 within the curve's tree sizes (where
    speculation off beats every setting, the draft schedule says so with a 1-node budget); current: the recipe's
    setting scored the same way; options(b): the candidates a node budget leaves at batch size b (for the draft
    schedule: speculation off and truncations of the pick)."""

    pick: Scored
    current: Scored
    table: list[Scored]  # every candidate at batch 1
    options: Callable[[int], list[Scored]]  # the budgets' candidates at batch size b
    stats: dict[str, Any]  # acceptance statistics (the report's "calibration")


@dataclass(frozen=True)
class Tuner:
    """One method's tuner (module docstring)."""

    key: str
    search: Callable[[Tuner, Calibration, StepCurve, int, Host, Say], Tuned]
    current: Callable[[LoadedRecipe], dict[str, Any]]
    overlay: Callable[[Setting], dict[str, Any]]
    units: Callable[[Setting], int]
    graph_ms: Callable[[Setting, StepCurve, int, float], float]  # (setting, curve, batch, τ)
    small: Callable[[Setting], dict[str, Any]] | None = None
    small_config: Callable[[Setting], Config] | None = None

    def of(self, _config: Config) -> Tuner:
        return self

    def tune(self, cal: Calibration, curve: StepCurve, room: int, host: Host, say: Say) -> Tuned:
        """`search` on the recipe of `cal`, within `room` tree nodes (root included)."""
        return self.search(self, cal, curve, room, host, say)


@dataclass(frozen=True)
class ByTreeType:
    """A method tuned per tree type (`speculative.tree.type`: static, dynamic)."""

    static: Tuner
    dynamic: Tuner

    def of(self, config: Config) -> Tuner:
        return self.static if config.tree.type == "static" else self.dynamic


def section_fields(
    keys: tuple[str, ...],
) -> tuple[Callable[[Any], dict[str, Any]], Callable[[Setting], dict[str, Any]]]:
    """`current` and `overlay` of a tuner whose setting is some fields of its method's section (`keys`)."""

    def current(loaded: Any) -> dict[str, Any]:
        s = loaded.recipe.speculative
        return {k: getattr(s, k) for k in keys}

    return current, lambda setting: {k: setting[k] for k in keys}


def tuner_of(config: Config) -> Tuner | None:
    """The tuner of a recipe's speculative section (its method's `tune`), or None: nothing to tune."""
    m = registry.of(config)
    return None if m.tune is None else resolve(m.tune).of(config)


def nothing_to_tune(m: Method) -> str:
    """The report's note for a method without a tuner."""
    why = "no draft" if not m.drafts else "no tuner"
    return f"speculative.method {m.name}: {why}, nothing to tune"


def off_option(curve: StepCurve, batch: int, host: Host) -> Scored:
    """Speculation off at batch size `batch` (a 1-node budget): the target step over the root and the base share."""
    return Scored(1, 1.0, curve.target_ms(batch, 1) + host.ms(batch, 0), {"off": True})


def measure_tau(cal: Calibration, config: Config, top_k: int = 0, tentative: int = 0) -> TauStats:
    """τ of the drafter of `config` (a method config) over the calibration prompts (the torch reference without
    fused heads; a draft net of `top_k` ranks and `tentative` tree slots where the method has a draft graph)."""
    return tau_stats(cal.engine(0), cal.drafters(config, top_k, tentative), cal.prompts, cal.max_new, cal.stop_ids)
