"""`trtspec tune RECIPE`: acceptance from calibration prompts, c(T) from the step curve, the best setting.

    1. cost     cpu: the engine's step curve, timed again on its engine (built first, cached) right before the host's
                share of a step is measured on it (`builder.tune.host`), so both describe the same minutes of
                this host (`Options.curve`; "engine": engine.json's "step_curve" as the engine stage timed it);
                GPU: the roofline of the recipe's GPU (`builder.tune.roofline`), stated as a prediction
    2. accept   calibration decodes with the torch reference (the method's `Tuner`, named by its `Method.tune`:
                `builder.tune.tuners`; a method without one has nothing to tune)
    3. choose   the pick at batch 1 and the per-batch-size draft schedule (`builder.tune.choose.schedule`)
    4. overlay  the recipe fields of the pick (`builder.tune.overlay`), validated
    5. measure  cpu only: the held-out HumanEval prompts decoded by plain, the recipe's current setting and
                the pick on this host's ONNX Runtime engines, alternating (`builder.tune.speed`)

Predicted speedup = E[τ] · c(plain) / c(setting), plain = the target step over the root alone (T = 1) plus
the host's base share.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from builder.errors import UserError
from builder.recipe.loader import LoadedRecipe
from builder.speculative import registry
from builder.stages.registry import backend_of
from builder.tune.choose import best, schedule
from builder.tune.costs import Host
from builder.tune.curve import StepCurve
from builder.tune.tuners import nothing_to_tune, tuner_of


@dataclass
class Options:
    prompts: int = 8  # calibration prompts
    max_new_tokens: int = 128
    prompt_len: int = 128  # calibration prompt tokens
    measure_prompts: int = 8  # HumanEval prompts decoded for the measured speedup (0: none)
    cache: Path = field(default_factory=lambda: Path(".trtspec-cache"))
    threads: int = 1
    say: Callable[[str], None] = lambda _m: None
    # cpu: "now" times the step curve again before the host share is measured (the host share is wall time minus
    # the curve's graph time: a curve from the hour the engine was built, on a host whose speed drifts ±20 % from
    # hour to hour, moved the host share per EAGLE draft level between 0.5 and 2.4 ms); "engine": engine.json's
    # curve, as the engine stage timed it (measured again only where it comes from another host)
    curve: str = "now"
    pin_schedule: bool = False  # the overlay pins the predicted draft schedule (default: the engine's rule decides)


def method_key(loaded: LoadedRecipe) -> str:
    """The report's "method": its tuner's key (eagle1 / eagle2 for EAGLE's tree types), else the method's name."""
    spec = loaded.recipe.speculative
    tuner = tuner_of(spec)
    return spec.method if tuner is None else tuner.key


SAME_HOST = ("cpu", "isa", "threads")  # a step curve measured where these differ does not describe this host


def cost_curve(loaded: LoadedRecipe, opts: Options) -> tuple[StepCurve, Path | None]:
    """The step curve and, on cpu, the engine folder it was measured on."""
    recipe = loaded.recipe
    if recipe.target.device != "cpu":
        from builder.recipe.resolve import resolve_architecture
        from builder.stages.parts import Parts
        from builder.tune.roofline import roofline_curve

        arch = resolve_architecture(recipe, loaded.dir_of(("model", "checkpoint")))
        nodes = registry.facts(Parts(loaded, recipe.speculative.method).drafter_config()).max_nodes
        return roofline_curve(recipe, arch, max(64, nodes)), None
    from builder.engines.ort.load import read_ort_meta
    from builder.engines.step_curve import host_about, measure_folder
    from builder.stages.runner import build

    opts.say("building the engine (cached) for its step-cost curve")
    folder = build(loaded, opts.cache, until="engine").folder("engine")
    meta = read_ort_meta(folder)
    if "step_curve" not in meta:
        raise UserError(
            f"{folder}/engine.json has no step_curve (built by an older trtspec): rebuild with `trtspec build --force`",
            field="engine",
        )
    curve = StepCurve.from_json(meta["step_curve"])
    here = host_about(opts.threads)
    if opts.curve == "now":
        opts.say("timing the engine's step curve now (the host's share is measured against it next)")
        curve = StepCurve.from_json(measure_folder(folder, int(meta["max_batch_size"]), threads=opts.threads))
    elif any(curve.about.get(k) != here[k] for k in SAME_HOST):
        # A pulled cache, or a machine of the same name at another instruction-set level: the curve does not
        # describe this host, and the picks depend on it. Measured again here (about a second per graph); the
        # cached engine is left as it is.
        where = lambda about: ", ".join(f"{k} {about.get(k)!r}" for k in SAME_HOST)  # noqa: E731
        opts.say(
            f"the step curve in {folder.name}/engine.json was measured at {where(curve.about)}; this host "
            f"differs ({where(here)}): measuring it here"
        )
        curve = StepCurve.from_json(measure_folder(folder, int(meta["max_batch_size"]), threads=opts.threads))
    return curve, folder


def tune(loaded: LoadedRecipe, opts: Options) -> dict[str, Any]:
    """The tune report (JSON-ready); report["overlay"] holds the recipe fields of the pick."""
    from builder.tune.calibrate import Calibration
    from builder.tune.host import measure_host
    from builder.tune.overlay import overlay_fields

    spec = loaded.recipe.speculative
    tuner = tuner_of(spec)
    report: dict[str, Any] = {"recipe": str(loaded.path), "method": method_key(loaded)}
    if tuner is None:
        report["note"] = nothing_to_tune(registry.of(spec))
        return report
    curve, folder = cost_curve(loaded, opts)
    room = curve.max_nodes
    cal = Calibration(loaded, opts.prompts, opts.prompt_len, opts.max_new_tokens)
    host = Host()
    if folder is not None:
        opts.say("measuring the host's share of a step (plain and the current setting, this engine)")
        host = measure_host(
            folder, tuner, tuner.current(loaded), curve, (cal.prompts * 3)[:3], opts.max_new_tokens, opts.threads
        )
    tuned = tuner.tune(cal, curve, room, host, opts.say)
    plain = curve.target_ms(1, 1) + host.base_ms
    sched = schedule(tuned.options, curve.batches, tuned.pick.nodes)
    report.update(
        {
            "cost": {
                "source": curve.source,
                "about": curve.about,
                "max_nodes": room,
                "plain_ms": round(plain, 5),
                "curve_timed": None if folder is None else opts.curve,
                "host": {
                    "source": host.source,
                    "base_ms": host.base_ms,
                    "draft_ms": host.draft_ms,
                    "per_unit_ms": host.per_unit_ms,
                },
                "batch1_ms": {str(t): round(ms, 5) for t, ms in sorted(curve.target[1].items())},
            },
            "calibration": {
                "source": loaded.recipe.quantization.calibration.source,
                "prompts": len(cal.prompts),
                "prompt_tokens": opts.prompt_len,
                "max_new_tokens": opts.max_new_tokens,
                **tuned.stats,
            },
            "pick": tuned.pick.to_json(plain),
            "current": tuned.current.to_json(plain),
            "tuned_batch1": best(tuned.options(1)).to_json(plain),  # the pick under its own schedule at batch 1
            "candidates": [c.to_json(plain) for c in sorted(tuned.table, key=lambda c: -c.rate)[:10]],
            "draft_schedule": sched,
            "schedule_detail": {
                str(b): [o.to_json(curve.target_ms(b, 1) + host.base_ms) for o in tuned.options(b)]
                for b in curve.batches
            },
        }
    )
    report["overlay"] = overlay_fields(
        loaded, tuned.pick.setting, sched if opts.pin_schedule else None, tuned.pick.nodes - 1
    )
    if backend_of(loaded.recipe).served_elsewhere:  # another runtime serves it: the draft per step is its own
        report["draft_schedule_note"] = "not written: TensorRT-LLM's runtime decides the draft per step"
    if folder is not None and opts.measure_prompts > 0:
        report["measured"] = _measured(loaded, report["overlay"], opts)
    elif folder is None:
        report["measured"] = {
            "note": f"target {loaded.recipe.target.device}: no GPU here; the speedups above are "
            "predictions from the roofline"
        }
    return report


def _measured(loaded: LoadedRecipe, fields: dict[str, Any], opts: Options) -> dict[str, Any]:
    from builder.tune.overlay import write_overlay
    from builder.tune.speed import measure

    with tempfile.TemporaryDirectory(prefix="trtspec-tune-") as tmp:
        tuned = write_overlay(loaded, fields, Path(tmp) / "tuned.yaml", "trtspec tune: the picked setting")
        opts.say("building the tuned engine (cached) and decoding the held-out prompts")
        return measure(loaded, tuned, opts.measure_prompts, opts.max_new_tokens, opts.cache, opts.threads, opts.say)
