"""`trtspec tune`: the Medusa/EAGLE tree, EAGLE-2 total_nodes, Lookahead W/N/G and the draft schedule that
maximise E[τ] / c on the recipe's hardware (`builder.tune`), predicted beside measured."""

from __future__ import annotations

import json
from pathlib import Path

import click

from builder.commands.options import echo_warnings, load_checked, set_option


@click.command()
@click.argument("recipe", type=click.Path(dir_okay=False))
@click.option(
    "--prompts",
    default=8,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="Calibration prompts (the recipe's quantization.calibration.source; never the bench's HumanEval).",
)
@click.option(
    "--max-new-tokens",
    default=128,
    show_default=True,
    type=click.IntRange(1, 4096),
    help="Tokens decoded per prompt, for calibration and for the measured speedup.",
)
@click.option(
    "--measure-prompts",
    default=8,
    show_default=True,
    type=click.IntRange(0, 81),
    help="HumanEval prompts decoded for the measured speedup (plain, current, tuned); 0 skips it.",
)
@click.option(
    "--write",
    "write",
    type=click.Path(dir_okay=False),
    help="Write a recipe overlay (extends RECIPE + the picked fields), validated, to this file.",
)
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False),
    default=".trtspec-cache",
    show_default=True,
    help="Build cache (the engines whose step curve and speed are measured).",
)
@click.option(
    "--curve",
    type=click.Choice(["now", "engine"]),
    default="now",
    show_default=True,
    help="cpu: time the engine's step curve now, in the same minutes as the host's share of a step "
    "(now), or take the one the engine stage timed (engine.json; another hour of a shared host).",
)
@click.option(
    "--pin-schedule",
    is_flag=True,
    help="Also write the predicted per-batch-size draft schedule as triton.draft_schedule, pinning it. By default "
    "nothing is pinned: the engine's measured draft budget rule picks each step's budget for the live batch.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@set_option
def tune(recipe, prompts, max_new_tokens, measure_prompts, write, cache_dir, curve, pin_schedule, as_json, overrides):
    """Pick RECIPE's draft (tree, total_nodes, W/N/G, n-gram lengths) and draft schedule from measured
    acceptance and step cost.

    \b
    cpu targets: the cost is the engine's step(T) curve timed on this host (again now, unless --curve
    engine), and the speedup is also MEASURED (HumanEval prompts, plain vs current vs tuned, one run, alternating).
    GPU targets: the cost is a roofline of the recipe's GPU — the speedups are PREDICTIONS.
    """
    from builder.tune.overlay import write_overlay
    from builder.tune.report import describe, markdown
    from builder.tune.run import Options
    from builder.tune.run import tune as run_tune

    loaded, findings = load_checked(recipe, overrides)
    echo_warnings(findings, loaded)
    say = (lambda m: None) if as_json else (lambda m: click.echo(f"tune: {m}", err=True))
    opts = Options(
        prompts=prompts,
        max_new_tokens=max_new_tokens,
        measure_prompts=measure_prompts,
        cache=Path(cache_dir),
        say=say,
        curve=curve,
        pin_schedule=pin_schedule,
    )
    report = run_tune(loaded, opts)
    if write and "overlay" in report:
        header = (
            f"trtspec tune {recipe}: {describe(report['pick'])}, predicted {report['pick']['speedup']:.2f}x "
            f"plain ({report['cost']['source']} cost)"
        )
        write_overlay(loaded, report["overlay"], write, header)
        report["written"] = str(write)
    click.echo(json.dumps(report, indent=2) if as_json else markdown(report))
    if write and not as_json:
        click.echo(f"overlay: {write}" if "overlay" in report else "overlay: nothing to write (nothing to tune)")
