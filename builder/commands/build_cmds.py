"""`trtspec build`: run the recipe's stages (load → quantize → export → engine → repo), cached and resumable."""

from __future__ import annotations

import json
import sys
import time

import click

from builder.commands.options import echo_warnings, load_checked, set_option
from builder.errors import UserError

EXIT_NEEDS_GPU = 3


class BuildDisplay:
    """One line per stage event on stderr (a live spinner when stderr is a terminal)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet, self.t0 = quiet, time.perf_counter()
        from rich.console import Console

        self.console = Console(stderr=True, highlight=False)
        self.status = None if quiet or not self.console.is_terminal else self.console.status("")

    def __call__(self, stage: str, message: str) -> None:
        if self.quiet:
            return
        stamp = f"{time.perf_counter() - self.t0:6.1f}s"
        final = message == "cached" or message.startswith("built")
        if self.status is not None and not final:
            self.status.update(f"[bold]{stage}[/]: {message}")
            self.status.start()
            return
        if self.status is not None:
            self.status.stop()
        self.console.print(f"{stamp} [bold]{stage:8s}[/] {message}")


@click.command()
@click.argument("recipe", type=click.Path(dir_okay=False))
@set_option
@click.option(
    "--cache-dir",
    default=".trtspec-cache",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Where stage outputs live (content-addressed: <cache>/<stage>/<key>/).",
)
@click.option(
    "--until",
    metavar="STAGE",
    # the stage names a user types (`builder.stages.registry.stage_order`); the TensorRT-LLM backend's pipeline has
    # its checkpoint stage where trtspec's own engines have export, which the help says by the backend's name
    help="Stop after this stage (load, quantize, export, engine, repo; trtllm: checkpoint instead of export).",
)
@click.option("--force", is_flag=True, help="Rebuild every stage even when its output is cached.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines (errors and the summary only).")
def build(
    recipe: str, overrides: tuple[str, ...], cache_dir: str, until: str | None, force: bool, as_json: bool, quiet: bool
) -> None:
    """Build RECIPE's engines: every stage cached by content, atomic, locked, resumable.

    \b
    A rebuild of an unchanged recipe runs no stage. A build interrupted at any moment (Ctrl-C,
    kill -9) leaves no partial output; the next build completes it. On a machine without TensorRT,
    GPU recipes stop before the engine stage with exit code 3 and the command that resumes on a GPU host.
    """
    from builder.plan.report import build_report
    from builder.stages.runner import build as run_build

    loaded, findings = load_checked(recipe, overrides)
    echo_warnings(findings, loaded)
    memory = build_report(loaded, cache_dir)["memory"]
    if not memory["fits"]:
        raise UserError("; ".join(memory["problems"]), location=recipe, field="memory plan")
    result = run_build(loaded, cache_dir, until=until, force=force, report=BuildDisplay(quiet or as_json))
    summary = _summary(result, recipe, cache_dir)
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        _print_summary(summary)
    if result.stopped is not None:
        resume = " ".join(["trtspec build", recipe, *(f"--set {o}" for o in overrides), f"--cache-dir {cache_dir}"])
        click.echo(
            f"stopped: {result.stopped}. Built and cached: {', '.join(r.name for r in result.runs) or 'nothing'}. "
            f"Resume on a GPU host: {resume}",
            err=True,
        )
        sys.exit(EXIT_NEEDS_GPU)


def _summary(result, recipe: str, cache_dir: str) -> dict:
    stages = []
    for r in result.runs:
        m = r.manifest
        stages.append(
            {
                "stage": r.name,
                "status": "cached" if r.cached else "built",
                "key": r.key,
                "seconds": None if m is None else m.wall_s,
                "peak_rss_bytes": None if m is None else m.peak_rss_bytes,
                "bytes": None if m is None else m.total_bytes,
                "output": str(r.folder),
            }
        )
    return {
        "recipe": recipe,
        "cache_dir": cache_dir,
        "stages": stages,
        "stopped": None if result.stopped is None else str(result.stopped),
    }


def _print_summary(summary: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"build {summary['recipe']}")
    for col in ("stage", "status", "time (when built)", "peak RSS", "size", "output"):
        table.add_column(col)
    mib = lambda n: "–" if n is None else f"{n / 2**20:,.1f} MiB"  # noqa: E731
    for s in summary["stages"]:
        table.add_row(
            s["stage"],
            s["status"],
            "–" if s["seconds"] is None else f"{s['seconds']:.1f} s",
            mib(s["peak_rss_bytes"]),
            mib(s["bytes"]),
            s["output"],
        )
    if summary["stopped"]:
        table.add_row("…", "[yellow]needs a GPU host[/]", "", "", "", "")
    Console().print(table)
