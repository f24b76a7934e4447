"""Run a recipe's stages in order: cache hits are reused, the rest run locked, staged and timed.

`build(loaded, cache_dir)` returns one `StageRun` per stage it reached: the recipe's backend's stages
(`builder.stages.registry`), keyed by `builder.stages.keys`. A stage that needs a GPU host (`NeedsGpu`) ends
the build: what was built stays cached and the same command resumes there. Stage modules import their heavy
modules inside `run`, so a fully cached build imports no torch and finishes in well under a second. A cache hit
is checked like any hand-off read: a stage output of another format (`builder.handoffs`) is refused with the
rebuild command. Every entry a build reaches is stamped used and held by the process until it exits
(`Store.touch`, `Store.hold`): `trtspec cache prune` leaves it alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from builder.errors import UserError
from builder.recipe.loader import LoadedRecipe
from builder.stages.keys import PlannedStage, plan_stages
from builder.stages.manifest import Manifest, tool_versions
from builder.stages.registry import backend_of
from builder.stages.stage import NeedsGpu, StageContext
from builder.stages.store import Store


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


def stages_for(loaded: LoadedRecipe, until: str | None = None) -> list[PlannedStage]:
    stages = plan_stages(loaded)
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


def _cached(store: Store, loaded: LoadedRecipe, stage: PlannedStage, report: Reporter) -> StageRun | None:
    """The complete output of `stage` when the cache holds one, its hand-off checked (`OtherFormat`)."""
    hit = store.hit(stage.name, stage.key)
    if hit is None:
        return None
    folder = store.dir(stage.name, stage.key)
    if stage.stage.output is not None:
        stage.stage.output.read(folder, str(loaded.path))
    report(stage.name, "cached")
    return StageRun(stage.name, stage.key, folder, True, 0.0, hit)


def _one(
    store: Store, loaded: LoadedRecipe, stage: PlannedStage, upstream: dict[str, Path], force: bool, report: Reporter
) -> StageRun:
    hit = None if force else _cached(store, loaded, stage, report)
    if hit is not None:
        return hit
    with store.lock(stage.name, stage.key, on_wait=lambda: report(stage.name, "waiting for another build")):
        hit = None if force else _cached(store, loaded, stage, report)  # built while we waited
        if hit is not None:
            return hit
        declared = stage.stage
        missing = [n for n in declared.needs if n not in upstream]
        if missing:  # a backend whose stage list does not provide what one of its stages reads
            raise RuntimeError(
                f"stage {stage.name} reads the output of {', '.join(missing)}: no stage before it wrote one"
            )
        ctx = StageContext(
            loaded,
            backend_of(loaded.recipe),
            stage.name,
            stage.key,
            dict(upstream),
            say=lambda m: report(stage.name, m),
        )
        with store.staging(stage.name, stage.key) as tmp:
            _reset_peak_rss()
            t0 = time.perf_counter()
            declared.run(ctx, tmp)
            wall = time.perf_counter() - t0
            if not isinstance(ctx.info, declared.info):
                raise RuntimeError(
                    f"stage {stage.name} recorded {type(ctx.info).__name__}, not {declared.info.__name__}"
                )
            manifest = Manifest(
                stage.name,
                stage.key,
                stage.upstream,
                stage.inputs,
                tool_versions(*declared.tools),
                round(wall, 3),
                _peak_rss(),
                info=ctx.info.to_json(),
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
