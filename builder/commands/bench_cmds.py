"""`trtspec bench RECIPE|REPO`: perf_analyzer sweep, speculative vs baseline on one served engine."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path

import click

from builder.commands.options import set_option
from builder.errors import UserError


class Interrupted(Exception):
    """SIGTERM/SIGINT during the bench: unwinds through every `finally` (server and tools stopped)."""


def _levels(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        levels = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        levels = ()
    if not levels or any(c < 1 or c > 4096 for c in levels) or len(set(levels)) != len(levels):
        raise UserError(
            f"--concurrency {text!r}: expected distinct levels 1..4096 separated by commas, e.g. 1,2,4",
            field="--concurrency",
        )
    return levels


def _target(target: str, overrides: tuple[str, ...], cache_dir: str, quiet: bool):
    """(repo, repository info, the recipe's bench section or None, folder for relative prompt files, stem)."""
    from builder.commands.serve_cmds import check_repo, repo_from_recipe

    path = Path(target)
    if path.is_dir():
        if overrides:
            raise UserError("--set applies to a recipe; TARGET is a repository", field="--set")
        return path, check_repo(path), None, Path.cwd(), path.resolve().name
    from builder.commands.options import load_checked

    repo, _ = repo_from_recipe(target, overrides, cache_dir, quiet)
    loaded, _ = load_checked(target, overrides)
    return repo, check_repo(repo), loaded.recipe.bench, loaded.dir_of(("bench", "prompt_source")), path.stem


def _replace(tmp: Path, out: Path) -> None:
    """Move the finished folder into place; an older report there is replaced whole."""
    tmp.chmod(0o755)  # mkdtemp made it private; a report folder is not
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        out.rename(old)
    tmp.rename(out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@click.command()
@click.argument("target", metavar="RECIPE|REPO", type=click.Path(exists=True))
@set_option
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Output folder [out/bench/<recipe stem>].")
@click.option("--concurrency", help="Levels, e.g. 1,2,4 [the recipe's bench.concurrency].")
@click.option("--input-len", type=click.IntRange(1, 1_000_000), help="Prompt tokens [bench.input_len].")
@click.option(
    "--output-len", type=click.IntRange(1, 1_000_000), help="Generated tokens per request [bench.output_len]."
)
@click.option(
    "--window-ms",
    type=click.IntRange(100, 3_600_000),
    help="perf_analyzer measurement window [bench.measurement_window_ms].",
)
@click.option(
    "--stability",
    default=1000.0,
    show_default=True,
    type=click.FloatRange(1, 1000),
    help="perf_analyzer --stability-percentage; 1000 accepts the first windows (3 × window per run), "
    "10 asks for 3 windows within 10 % (a quiet machine).",
)
@click.option(
    "--max-trials", default=3, show_default=True, type=click.IntRange(3, 50), help="perf_analyzer --max-trials."
)
@click.option(
    "--num-prompts",
    default=32,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="Distinct prompts (round-robin).",
)
@click.option(
    "--probes",
    default=3,
    show_default=True,
    type=click.IntRange(1, 100),
    help="Probe requests per mode before the sweep.",
)
@click.option(
    "--repeats",
    default=1,
    show_default=True,
    type=click.IntRange(1, 20),
    help="perf_analyzer runs per level and mode, alternating the modes' order (A B B A …); "
    "throughputs averaged, each run kept in bench.json.",
)
@click.option("--genai-perf", "genai_perf", is_flag=True, help="Also run genai-perf 0.0.16 at the same levels.")
@click.option(
    "--cache-dir",
    default=".trtspec-cache",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Build cache (when TARGET is a recipe).",
)
@click.option("--quiet", "-q", is_flag=True, help="No build progress or per-run lines.")
def bench(
    target,
    overrides,
    out_dir,
    concurrency,
    input_len,
    output_len,
    window_ms,
    stability,
    max_trials,
    num_prompts,
    probes,
    repeats,
    genai_perf,
    cache_dir,
    quiet,
):
    """Benchmark RECIPE (built first, cached) or REPO served by tritonserver: perf_analyzer over gRPC
    streaming at every concurrency level, the speculative method and a no-speculation baseline of the
    same engine in the same run.

    \b
    Writes (atomically) OUT/raw/ (perf_analyzer CSVs, profile exports, logs), bench.json, bench.csv,
    throughput/latency/ttft/itl/tau PNG plots and report.md with the ratios speculative / baseline.
    """
    from builder.bench.serve_bench import run_bench
    from builder.bench.serve_report import table_lines, write_outputs
    from builder.bench.serve_settings import BenchError, BenchSettings
    from builder.recipe.schema import Bench
    from builder.serve.perf import find_perf_analyzer
    from builder.serve.server import ServerError, find_tritonserver, install_hint

    levels = _levels(concurrency)
    if find_tritonserver() is None:
        raise UserError(install_hint())
    if find_perf_analyzer() is None:
        raise UserError(
            "perf_analyzer not found: install the serve extra (bash scripts/setup.sh; the tritonclient wheel)"
        )
    genai = None
    if genai_perf:
        from builder.bench.serve_genai import INSTALL_HINT, find_genai_perf, run_genai

        if find_genai_perf() is None:
            raise UserError(INSTALL_HINT, field="--genai-perf")
        genai = run_genai
    repo, info, section, base_dir, stem = _target(target, overrides, cache_dir, quiet)
    b = section or Bench()
    settings = BenchSettings(
        concurrency=levels or tuple(b.concurrency),
        input_len=input_len or b.input_len,
        output_len=output_len or b.output_len,
        prompt_source=b.prompt_source,
        window_ms=window_ms or b.measurement_window_ms,
        stability_percentage=stability,
        max_trials=max_trials,
        num_prompts=num_prompts,
        probes=probes,
        genai_perf=genai_perf,
        repeats=repeats,
        base_dir=str(base_dir),
    )
    out = Path(out_dir) if out_dir else Path("out") / "bench" / stem
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    log = (lambda _m: None) if quiet else (lambda m: click.echo(m, err=True))

    def interrupt(signum, _frame):
        raise Interrupted(signal.Signals(signum).name)

    handlers = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        results = run_bench(repo, info, settings, tmp / "raw", log, genai)
        results["target"] = str(target)
        results["repo"] = str(repo)
        results["overrides"] = list(overrides)
        write_outputs(tmp, results, stem)
        _replace(tmp, out)
    except Interrupted as exc:
        raise UserError(f"interrupted ({exc}): server stopped, nothing written to {out}") from None
    except (BenchError, ServerError) as exc:
        raise UserError(f"bench failed: {exc}") from None
    finally:
        for sig, h in handlers.items():
            signal.signal(sig, h)
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    click.echo(
        f"{stem}: input {settings.input_len} tokens, output {settings.output_len} tokens, "
        f"{len(settings.concurrency)} levels × 2 modes"
    )
    for line in table_lines(results):
        click.echo(line)
    errors = sum(r["errors"] for r in results["levels"]) + sum(
        not p["token_counts_ok"] for p in results["probes"].values()
    )
    click.echo(f"errors: {errors}")
    click.echo(f"report: {out / 'report.md'} (bench.json, bench.csv, plots, raw/ beside it)")
    if errors:
        raise SystemExit(1)
