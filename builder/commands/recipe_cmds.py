"""`trtspec validate`, `trtspec plan`, `trtspec schema` — no torch imported here."""

from __future__ import annotations

import json

import click
import yaml

from builder.commands.options import echo_warnings, load_checked, set_option
from builder.errors import UserError


@click.command()
@click.argument("recipes", nargs=-1, required=True, type=click.Path(dir_okay=False))
@set_option
@click.option("--show", is_flag=True, help="Print the normalized recipe (defaults filled in, extends merged).")
@click.option("--strict", is_flag=True, help="Treat warnings (e.g. a checkpoint missing here) as errors.")
def validate(recipes: tuple[str, ...], overrides: tuple[str, ...], show: bool, strict: bool) -> None:
    """Check RECIPES: schema, cross-field rules, trees and checkpoints. Exit 2 on any error."""
    failed: list[UserError] = []
    for path in recipes:
        try:
            loaded, findings = load_checked(path, overrides, strict)
        except UserError as exc:
            failed.append(exc)
            continue
        echo_warnings(findings, loaded)
        if show:
            click.echo(f"# {path}")
            click.echo(yaml.safe_dump(loaded.recipe.model_dump(mode="json"), sort_keys=False))
        else:
            click.echo(f"ok: {path}")
    if failed:
        from builder.recipe.loader import RecipeErrors

        raise RecipeErrors([e for exc in failed for e in getattr(exc, "errors", [exc])])


@click.command()
@click.argument("recipe", type=click.Path(dir_okay=False))
@set_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@click.option(
    "--cache-dir",
    default=".trtspec-cache",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Where stage outputs live (used to report cache hits).",
)
def plan(recipe: str, overrides: tuple[str, ...], as_json: bool, cache_dir: str) -> None:
    """Show the build stages (inputs, outputs, cache keys) and the memory plan per GPU rank.

    Exits 2, before any GPU hour is spent, when weights plus one max-length sequence do not fit.
    """
    from builder.plan.report import build_report, render_report

    loaded, findings = load_checked(recipe, overrides)
    echo_warnings(findings, loaded)
    report = build_report(loaded, cache_dir)
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        render_report(report)
    if not report["memory"]["fits"]:
        raise UserError("; ".join(report["memory"]["problems"]), location=recipe, field="memory plan")


@click.command()
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="Write to this file instead of stdout.")
def schema(output: str | None) -> None:
    """Print the recipe JSON schema (committed as recipes/schema.json)."""
    from builder.recipe.schema import schema_text

    text = schema_text()
    if output:
        with open(output, "w") as fh:
            fh.write(text)
    else:
        click.echo(text, nl=False)
