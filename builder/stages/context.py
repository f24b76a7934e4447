"""What a running stage gets: the recipe, its plan entry, the upstream stages' output folders."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from builder.recipe.loader import LoadedRecipe


@dataclass
class StageContext:
    loaded: LoadedRecipe
    name: str
    key: str
    upstream: dict[str, Path]  # output folders of the stages that ran before, by name
    say: Callable[[str], None] = lambda _msg: None  # progress notes for the display
    info: dict[str, Any] = field(default_factory=dict)  # facts the stage records in its manifest


class NeedsGpu(Exception):
    """The stage can only run where TensorRT is installed (a GPU host): exit code 3, resumable there."""
