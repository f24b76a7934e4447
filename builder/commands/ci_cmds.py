"""`trtspec ci` (build, check, gate and publish a recipe set) and `trtspec pull` (restore a published entry).

Exit codes of `ci`: 0 every entry passed or needs a GPU host; 1 an entry failed (its build, a check or a
gate) or publishing failed — the other entries still ran and the summary says which failed and why; 2 the
run's own input is wrong (an unknown matrix key, a baseline from another recipe set, an unreachable
publish target), before anything is built.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from builder.commands.options import set_option
from builder.errors import UserError


@click.command()
@click.argument("recipes", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--matrix",
    type=click.Path(dir_okay=False),
    help="Matrix file: recipes × --set variants, gates, checks (the shipped ones are in recipes/ci/). "
    "RECIPES, if given, replace its recipes.",
)
@set_option
@click.option(
    "--cache-dir",
    default=".trtspec-cache",
    show_default=True,
    type=click.Path(file_okay=False),
    help="The build cache (<cache>/<stage>/<key>/): unchanged stages are reused.",
)
@click.option(
    "--publish",
    "publish_to",
    metavar="DIR|URI",
    help="Publish every built stage and an index there: a folder or an fsspec URI (memory://, s3://, gs://).",
)
@click.option(
    "--baseline",
    type=click.Path(dir_okay=False),
    help="A previous run's --json summary of the same recipe set: fail on a τ, speed-ratio or FP8 regression.",
)
@click.option(
    "--junit", type=click.Path(dir_okay=False), help="Write JUnit XML here (one test case per recipe × check)."
)
@click.option(
    "--json", "json_out", type=click.Path(dir_okay=False), help="Write the JSON summary here (the next --baseline)."
)
@click.option(
    "--markdown",
    "markdown_out",
    type=click.Path(dir_okay=False),
    help="Write the markdown summary here (also printed), e.g. for $GITHUB_STEP_SUMMARY.",
)
@click.option(
    "--list", "list_only", is_flag=True, help="Print the entries (id and recipe file, tab-separated) and exit."
)
@click.option("--quiet", "-q", is_flag=True, help="No progress lines on stderr.")
def ci(
    recipes: tuple[str, ...],
    matrix: str | None,
    overrides: tuple[str, ...],
    cache_dir: str,
    publish_to: str | None,
    baseline: str | None,
    junit: str | None,
    json_out: str | None,
    markdown_out: str | None,
    list_only: bool,
    quiet: bool,
) -> None:
    """Build, check and gate RECIPES (or a --matrix), then publish: what a CI job runs.

    \b
    Every recipe is built on the stages this host can run (a GPU recipe on a CPU runner stops at its
    engine stage and is reported "needs GPU", not failed). Each built engine is checked: lossless (greedy
    tokens = the oracle), acceptance and speed (τ, tokens/s against plain decoding), FP8 quality.
    Exit 0: passed (or needs GPU); 1: a recipe failed (the others still ran); 2: bad input.
    """
    from builder.ci import gates, report, session
    from builder.ci import matrix as mx
    from builder.ci.publish import Target

    if not recipes and not matrix:
        raise UserError("name recipes or a --matrix file", field="RECIPES", allowed="recipe files, --matrix FILE")
    if matrix:
        m, path = mx.load_matrix(matrix)
        spec = mx.expand(m, path, overrides, recipes)
    else:
        spec = mx.adhoc(recipes, overrides)
    if list_only:
        for e in spec.entries:
            click.echo(f"{e.id}\t{e.recipe}")
        return
    base = None
    if baseline:
        base = gates.load_baseline(baseline)
        gates.check_same_set(base, spec, baseline)
    target = Target(publish_to, create=True) if publish_to else None

    def progress(entry: str, message: str) -> None:
        if not quiet:
            click.echo(f"[{entry}] {message}", err=True)

    doc = session.run(spec, Path(cache_dir), baseline=base, baseline_path=baseline, target=target, progress=progress)
    text = report.markdown(doc)
    for out, content in ((json_out, report.to_json(doc)), (junit, report.junit(doc)), (markdown_out, text)):
        if out:
            report.write_atomic(out, content)
    click.echo(text)
    sys.exit(session.exit_code(doc))


@click.command()
@click.argument("index", metavar="INDEX")
@click.argument("recipe", metavar="RECIPE")
@click.option(
    "--cache-dir",
    default=".trtspec-cache",
    show_default=True,
    type=click.Path(file_okay=False),
    help="The build cache to restore into.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
def pull(index: str, recipe: str, cache_dir: str, as_json: bool) -> None:
    """Restore RECIPE's published stages from INDEX into the build cache, every file's sha256 checked.

    \b
    INDEX: a publish index (index.json, or the folder / fsspec URI holding it) written by
    `trtspec ci --publish`. RECIPE: the entry id, its recipe path or its file name. A corrupted file
    exits 2 naming it; nothing is installed for its stage.
    """
    from builder.ci.pull import pull as run_pull

    rep = run_pull(index, recipe, cache_dir, say=lambda m: None if as_json else click.echo(m, err=True))
    if as_json:
        click.echo(json.dumps(rep, indent=2))
        return
    for row in rep["stages"]:
        click.echo(f"{row['stage']:10s} {row['key']}  {row['status']}  {row['output']}")
    here = rep["keys_here"]
    if not here["planned"]:
        click.echo(f"(could not plan {rep['entry']} here: {here['reason']})")
    else:
        differ = [s for s, same in here["same"].items() if not same]
        click.echo(
            "a build here finds every pulled stage cached"
            if not differ
            else f"a build here plans other keys for {', '.join(differ)} (checkpoint files, tool versions or GPU "
            "differ from the publishing host): those stages and the ones after them would be rebuilt"
        )
