"""Run one CI entry (a recipe × variant): validate, plan, build the stages this host can run, check.

`run_entry` never raises for a problem of the entry itself: an invalid recipe, a memory plan that does
not fit, a stage that fails or a check that fails become the entry's `failed` status with the reason, so
one recipe's failure does not stop the others. A GPU recipe on a host without TensorRT (or without
TensorRT-LLM) builds up to its engine stage, which stops with `NeedsGpu`: the entry is `needs_gpu`, not
failed, and its engine checks are skipped (the FP8 quality report, measured by the export stage on the
CPU, is still read).
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from builder.ci.checks import FAILED, SKIPPED, CheckResult, engine_checks, fp8_quality
from builder.ci.matrix import Checks, Entry
from builder.errors import UserError

PASSED_ENTRY, FAILED_ENTRY, NEEDS_GPU = "passed", "failed", "needs_gpu"
Say = Callable[[str], None]


@dataclass
class EntryResult:
    entry: Entry
    status: str = PASSED_ENTRY  # passed | failed | needs_gpu
    reason: str = ""
    warnings: list[str] = field(default_factory=list)
    recipe: dict[str, Any] = field(default_factory=dict)  # method, target, backend, quantized
    stages: list[dict[str, Any]] = field(
        default_factory=list
    )  # stage, key, status (built|cached), seconds, bytes, output
    stopped_at: str | None = None  # the stage that needs a GPU host
    build_s: float = 0.0
    checks: dict[str, CheckResult] = field(default_factory=dict)
    gates: list[dict[str, Any]] = field(default_factory=list)
    traceback: str | None = None  # where a stage crashed (not a UserError)

    def fail(self, reason: str) -> None:
        if self.status != FAILED_ENTRY:
            self.status, self.reason = FAILED_ENTRY, reason

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.entry.id,
            "recipe_file": self.entry.recipe,
            "overrides": list(self.entry.overrides),
            "status": self.status,
            "reason": self.reason,
            "warnings": self.warnings,
            **self.recipe,
            "stages": self.stages,
            "stopped_at": self.stopped_at,
            "build_s": round(self.build_s, 3),
            "checks": {k: c.as_json() for k, c in self.checks.items()},
            "gates": self.gates,
            "traceback": self.traceback,
        }


def _load(entry: Entry) -> tuple[Any, list[str]]:
    from builder.recipe.checks import check_recipe
    from builder.recipe.loader import RecipeErrors, load_recipe

    loaded = load_recipe(entry.recipe, entry.overrides)
    findings = check_recipe(loaded)
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        raise RecipeErrors([f.as_error(loaded) for f in errors])
    return loaded, [f.render(loaded) for f in findings if f.severity == "warning"]


def _one_line(exc: BaseException) -> str:
    text = "; ".join(line for line in str(exc).splitlines() if line.strip()) or type(exc).__name__
    return text if isinstance(exc, UserError) else f"{type(exc).__name__}: {text}"


def run_entry(
    entry: Entry, cache_dir: Path, checks: Checks, say: Say = lambda _m: None, memo: dict[str, Any] | None = None
) -> EntryResult:
    """Build and check one entry (module docstring); the result holds everything the reports show. `memo`:
    what checks may share between the entries of a run (the torch oracle's tokens)."""
    res = EntryResult(entry)
    t0 = time.perf_counter()
    try:
        result, loaded = _build(entry, cache_dir, res, say)
    except Exception as exc:  # a bad recipe (UserError) or a stage's own crash: reported, the others go on
        res.fail(_one_line(exc))
        res.traceback = None if isinstance(exc, UserError) else traceback.format_exc(limit=-6)
        res.build_s = time.perf_counter() - t0
        return res
    res.build_s = time.perf_counter() - t0
    names = [r.name for r in result.runs]
    if "quantize" in names and "export" in names:
        res.checks["fp8_quality"] = _guard(lambda: fp8_quality(result.folder("export")))
    if result.stopped is not None:
        res.status, res.reason = NEEDS_GPU, str(result.stopped)
        why = f"needs GPU: the {res.stopped_at} stage did not run here"
        res.checks.update(lossless=CheckResult(SKIPPED, why), acceptance=CheckResult(SKIPPED, why))
    elif "engine" in names:
        say("checks: lossless, acceptance and speed")
        try:
            res.checks.update(engine_checks(loaded, result.folder("engine"), "quantize" in names, checks, memo))
        except Exception as exc:
            failed = CheckResult(FAILED, _one_line(exc))
            res.checks.update(lossless=failed, acceptance=failed)
    for name, check in res.checks.items():
        if check.status == FAILED:
            res.fail(f"{name}: {check.reason}")
    return res


def _guard(fn: Callable[[], CheckResult]) -> CheckResult:
    try:
        return fn()
    except Exception as exc:
        return CheckResult(FAILED, _one_line(exc))


def _build(entry: Entry, cache_dir: Path, res: EntryResult, say: Say):
    from builder.plan.report import build_report
    from builder.stages.runner import build, stages_for

    loaded, res.warnings = _load(entry)
    r = loaded.recipe
    res.recipe = {
        "method": r.speculative.method,
        "target": r.target.device,
        "backend": r.target.engine_backend,
        "quantized": r.quantization.mode != "none" or r.quantization.kv_cache != "model_dtype",
    }
    memory = build_report(loaded, cache_dir)["memory"]
    if not memory["fits"]:
        raise UserError("memory plan: " + "; ".join(memory["problems"]))
    result = build(loaded, cache_dir, report=lambda stage, msg: say(f"{stage}: {msg}"))
    for run in result.runs:
        m = run.manifest
        res.stages.append(
            {
                "stage": run.name,
                "key": run.key,
                "status": "cached" if run.cached else "built",
                "seconds": None if m is None else m.wall_s,
                "bytes": None if m is None else m.total_bytes,
                "output": str(run.folder),
            }
        )
    if result.stopped is not None:
        planned = [s.name for s in stages_for(loaded)]
        res.stopped_at = planned[len(result.runs)] if len(result.runs) < len(planned) else None
    return result, loaded
