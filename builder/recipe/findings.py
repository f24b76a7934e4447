"""Findings of the cross-field checks, and the collector the rule modules share.

`checks` (model, parallelism, target, FP8, lengths) and `spec_checks` (trees, draft lengths) both
add to one `Findings`; neither imports the other's internals, so the import graph has no cycle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from builder.errors import UserError
from builder.recipe.loader import LoadedRecipe
from builder.recipe.schema import Recipe


@dataclass
class Finding:
    field: tuple[str | int, ...]
    message: str
    allowed: str | None = None
    severity: Literal["error", "warning"] = "error"

    def as_error(self, loaded: LoadedRecipe) -> UserError:
        return UserError(
            self.message, location=loaded.where(self.field), field=".".join(map(str, self.field)), allowed=self.allowed
        )

    def render(self, loaded: LoadedRecipe) -> str:
        return f"{'warning: ' if self.severity == 'warning' else ''}{self.as_error(loaded)}"


class Findings:
    """The findings of one loaded recipe's checks, in the order the rules found them."""

    def __init__(self, loaded: LoadedRecipe) -> None:
        self.loaded = loaded
        self.recipe: Recipe = loaded.recipe
        self.findings: list[Finding] = []

    def add(self, field: tuple, message: str, allowed: str | None = None, warn: bool = False) -> None:
        self.findings.append(Finding(field, message, allowed, "warning" if warn else "error"))
