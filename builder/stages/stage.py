"""A build stage and a backend as declared units, and what a running stage gets (`StageContext`).

Each stage module exports one `Stage` (`STAGE`): its name (the cache folder `<cache>/<name>/<key>/`), what it does,
the recipe fields it reads, the tools its output depends on, the upstream outputs it reads and `run`. Everything a
cache key hashes comes from the declaration: the fields' values, `inputs(loaded, backend)` for what the fields alone
do not say (a checkpoint's files, a tree file's contents, the GPU an engine is built for), the tools' versions and
the code digest of the stage's import closure (`builder.stages.keys`) — so no table elsewhere can go stale.

A `Backend` (target.backend: builder/stages/backends/) declares its stage pipeline, which memory plan sizes it
(`builder.plan`) and its engine lock: what engine.json pins and how a host is checked against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping

if TYPE_CHECKING:
    from builder.handoffs import Handoff, StageInfo
    from builder.recipe.loader import LoadedRecipe
    from builder.recipe.schema import Recipe


def always(_recipe: Recipe) -> bool:
    return True


def no_inputs(_loaded: LoadedRecipe, _backend: Backend) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class Stage:
    name: str  # the cache folder's name; two backends' stages of one name are alternatives, never in one build
    description: str  # what `trtspec plan` shows
    reads: tuple[str, ...]  # recipe field paths: their values are in the key
    tools: tuple[str, ...]  # distributions whose versions the output depends on (key and manifest)
    needs: tuple[str, ...]  # upstream stages whose output folders `run` reads (ctx.upstream)
    run: Callable[[StageContext, Path], None]  # writes the output into the folder it is given
    info: type[StageInfo]  # what `run` records in the manifest (ctx.info)
    output: type[Handoff] | None = None  # the hand-off file checked on a cache hit (`builder.handoffs`)
    planned: Callable[[Recipe], bool] = always  # whether the recipe has this stage at all
    inputs: Callable[[LoadedRecipe, Backend], dict[str, Any]] = no_inputs  # key inputs beyond `reads`
    code: tuple[str, ...] = ()  # modules whose source the output holds without `run` importing them (copied files)
    optional: tuple[str, ...] = ()  # upstream stages `run` reads when the recipe plans them (quantize)

    @property
    def module(self) -> str:
        """The stage's module: the root of its import closure (the code digest)."""
        return self.run.__module__


@dataclass(frozen=True)
class EngineLock:
    """What an engine folder pins and how a host is checked against it, as the backend declares it."""

    pins: tuple[str, ...]  # engine.json keys holding what a serving host must match
    where: str  # the module that writes and checks the lock
    # (engine.json, the host's facts or None for this host's) -> None when the host may run it, else why not
    check: Callable[[Mapping[str, Any], Any], str | None]


@dataclass(frozen=True)
class Backend:
    name: str  # target.backend
    description: str
    stages: tuple[Stage, ...]  # upstream -> downstream
    memory_plan: Literal["own_engines", "paged"]  # which plan sizes it (`builder.plan.report.MEMORY_PLANS`)
    lock: EngineLock
    gpu: bool  # its engines run on the recipe's GPUs (spec_decoder / the C++ runtime on target.gpus)
    safetensors_only: bool = False  # its checkpoint converter reads safetensors only: the load stage keeps a copy
    # None: trtspec opens its engine folder (generate, serve, bench, tune); else where its engines run instead, said
    # to the user as is ("{recipe}" is filled in)
    served_elsewhere: str | None = None

    def stage(self, name: str) -> Stage:
        return next(s for s in self.stages if s.name == name)


@dataclass
class StageContext:
    """What a running stage gets: the recipe, its backend, its plan entry, the upstream stages' output folders."""

    loaded: LoadedRecipe
    backend: Backend  # the recipe's target.backend, as declared (`builder.stages.registry`)
    name: str
    key: str
    upstream: dict[str, Path]  # output folders of the stages that ran before, by name
    say: Callable[[str], None] = lambda _msg: None  # progress notes for the display
    info: StageInfo | None = None  # facts the stage records in its manifest (its Stage.info model)


class NeedsGpu(Exception):
    """The stage can only run where TensorRT is installed (a GPU host): exit code 3, resumable there."""
