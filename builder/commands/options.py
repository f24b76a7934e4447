"""Options shared by every recipe command."""

from __future__ import annotations

from typing import Callable

import click

from builder.recipe.checks import check_recipe
from builder.recipe.findings import Finding
from builder.recipe.loader import LoadedRecipe, RecipeErrors, load_recipe


def set_option(fn: Callable) -> Callable:
    return click.option(
        "--set",
        "overrides",
        multiple=True,
        metavar="PATH=VALUE",
        help="Override a recipe field, typed through the schema (e.g. --set build.max_batch_size=16). Repeatable.",
    )(fn)


def load_checked(path: str, overrides: tuple[str, ...], strict: bool = False) -> tuple[LoadedRecipe, list[Finding]]:
    """Load + cross-check a recipe; raise RecipeErrors listing every error (warnings returned)."""
    loaded = load_recipe(path, overrides)
    findings = check_recipe(loaded)
    errors = [f for f in findings if f.severity == "error" or strict]
    if errors:
        raise RecipeErrors([f.as_error(loaded) for f in errors])
    return loaded, findings


def echo_warnings(findings: list[Finding], loaded: LoadedRecipe) -> None:
    for f in findings:
        if f.severity == "warning":
            click.echo(f.render(loaded), err=True)
