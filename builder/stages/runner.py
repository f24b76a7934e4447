"""Run a recipe's stages in order: cache hits are reused, the rest run locked, staged and timed.

`build(loaded, cache_dir)` returns one `StageRun` per stage it reached. A stage that needs a GPU host
(`NeedsGpu`) ends the build: what was built stays cached and the same command resumes there. Stage
modules are imported only when a stage actually runs, so a fully cached build imports no torch and
finishes in well under a second. Every entry a build reaches is stamped used and held by the process until
it exits (`Store.touch`, `Store.hold`): `trtspec cache prune` leaves it alone.
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from builder.errors import UserError
from builder.plan.stages import Stage, plan_stages, stage_tools
from builder.recipe.loader import LoadedRecipe
from builder.stages.context import NeedsGpu, StageContext
from builder.stages.manifest import Manifest, tool_versions
from builder.stages.store import Store

IMPLEMENTED = ("load", "quantize", "export", "checkpoint", "engine", "repo")


@dataclass
class StageRun:
    name: str
    key: str
    folder: Path
    cached: bool
    wall_s: float
    manifest: Manifest | None = None


@dataclass
class BuildResult:
    runs: list[StageRun] = field(default_factory=list)
    stopped: NeedsGpu | None = None  # set when a stage needs a GPU host

    def folder(self, stage: str) -> Path:
        return next(r.folder for r in self.runs if r.name == stage)


Reporter = Callable[[str, str], None]  # (stage, message)


def stages_for(loaded: LoadedRecipe, until: str | None = None) -> list[Stage]:
    stages = [s for s in plan_stages(loaded) if s.name in IMPLEMENTED]
    names = [s.name for s in stages]
    if until is not None:
        if until not in names:
            raise UserError(f"unknown stage {until!r}", field="--until", allowed=", ".join(names))
        stages = stages[: names.index(until) + 1]
    return stages


def build(
    loaded: LoadedRecipe,
    cache_dir: str | Path,
    *,
    until: str | None = None,
    force: bool = False,
    report: Reporter = lambda _s, _m: None,
) -> BuildResult:
    store = Store(cache_dir)
    result = BuildResult()
    upstream: dict[str, Path] = {}
    now = time.time()  # one use stamp for the build's entries: prune removes a chain downstream first
    for stage in stages_for(loaded, until):
        store.hold(stage.name, stage.key)  # in use by this process from here on (before the hit check)
        try:
            run = _one(store, loaded, stage, upstream, force, report)
        except NeedsGpu as exc:
            result.stopped = exc
            return result
        store.touch(stage.name, stage.key, now)
        result.runs.append(run)
        upstream[stage.name] = run.folder
    return result


def _one(
    store: Store, loaded: LoadedRecipe, stage: Stage, upstream: dict[str, Path], force: bool, report: Reporter
) -> StageRun:
    hit = None if force else store.hit(stage.name, stage.key)
    if hit is not None:
        report(stage.name, "cached")
        return StageRun(stage.name, stage.key, store.dir(stage.name, stage.key), True, 0.0, hit)
    with store.lock(stage.name, stage.key, on_wait=lambda: report(stage.name, "waiting for another build")):
        hit = None if force else store.hit(stage.name, stage.key)  # built while we waited
        if hit is not None:
            report(stage.name, "cached")
            return StageRun(stage.name, stage.key, store.dir(stage.name, stage.key), True, 0.0, hit)
        module = importlib.import_module(f"builder.stages.{stage.name}")
        ctx = StageContext(loaded, stage.name, stage.key, dict(upstream), say=lambda m: report(stage.name, m))
        with store.staging(stage.name, stage.key) as tmp:
            _reset_peak_rss()
            t0 = time.perf_counter()
            module.run(ctx, tmp)
            wall = time.perf_counter() - t0
            manifest = Manifest(
                stage.name,
                stage.key,
                stage.upstream,
                stage.inputs,
                tool_versions(*stage_tools(stage.name, loaded.recipe.target.engine_backend)),
                round(wall, 3),
                _peak_rss(),
                info=ctx.info,
            )
            manifest.write(tmp)
        report(stage.name, f"built in {wall:.1f} s")
        return StageRun(stage.name, stage.key, store.dir(stage.name, stage.key), False, wall, manifest)


def _reset_peak_rss() -> None:
    """Restart the kernel's high-water mark of this process's RSS (Linux), so each stage reports its own."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def _peak_rss() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
