"""`trtspec serve REPO|RECIPE`: Triton Inference Server over a trtspec model repository."""

from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path

import click

from builder.commands.options import echo_warnings, load_checked, set_option
from builder.errors import UserError

EXIT_NEEDS_GPU = 3


def repo_from_recipe(recipe: str, overrides: tuple[str, ...], cache_dir: str, quiet: bool):
    from builder.commands.build_cmds import BuildDisplay
    from builder.stages.registry import backend_of, opened_here
    from builder.stages.runner import build

    loaded, findings = load_checked(recipe, overrides)
    echo_warnings(findings, loaded)
    backend = backend_of(loaded.recipe)
    if backend.served_elsewhere:
        raise UserError(
            backend.served_elsewhere.format(recipe=recipe), field="target.backend", allowed=", ".join(opened_here())
        )
    result = build(loaded, cache_dir, until="repo", report=BuildDisplay(quiet))
    if result.stopped is not None:
        click.echo(f"stopped: {result.stopped}; build the recipe on a GPU host first", err=True)
        sys.exit(EXIT_NEEDS_GPU)
    repo = result.folder("repo")
    warn_stale(repo)
    return repo, loaded.recipe.triton


def _first(found: list[str]) -> str:
    """The first three of `found`, and how many more."""
    return "; ".join(found[:3]) + (f"; and {len(found) - 3} more" if len(found) > 3 else "")


def warn_stale(repo: Path) -> None:
    """Warn when the cached repository carries other code than this source tree would copy into it now."""
    from triton_repo.emit import INFO
    from triton_repo.runtime import FOLDER, stale

    info = json.loads((repo / INFO).read_text(encoding="utf-8"))
    found = stale(repo / info["ensemble"] / "1" / FOLDER)
    if found:
        click.echo(
            f"warning: the cached repository {repo} runs other code than this source tree ({_first(found)}); "
            "serving it as it is — rebuild with `trtspec build RECIPE --force` to serve this tree's code",
            err=True,
        )


def check_repo(repo: Path) -> dict:
    """trtspec-repo.json, after checking that every model carries its runtime intact (the repository imports
    nothing from this environment's trtspec: `triton_repo.runtime`)."""
    from triton_repo.emit import INFO
    from triton_repo.runtime import FOLDER, problems

    info_path = repo / INFO
    if not info_path.is_file():
        raise UserError(
            f"{repo} is not a trtspec model repository (no {INFO}); pass a recipe or a repository "
            "that `trtspec build` wrote",
            field="REPO",
        )
    info = json.loads(info_path.read_text(encoding="utf-8"))
    found: list[str] = []
    for name in info["models"]:
        found += problems(repo / name / "1" / FOLDER)
    if found:
        raise UserError(
            f"the repository's runtime is incomplete or was edited ({_first(found)}): rebuild it "
            "(trtspec build RECIPE --force)",
            field="REPO",
        )
    return info


@click.command()
@click.argument("target", metavar="REPO|RECIPE", type=click.Path(exists=True))
@set_option
@click.option(
    "--cache-dir",
    default=".trtspec-cache",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Build cache (when TARGET is a recipe).",
)
@click.option("--host", default=None, help="Address to bind [the recipe's triton.bind_address, else 127.0.0.1].")
@click.option("--http-port", type=click.IntRange(1, 65535), help="[recipe triton.ports.http, else 8000]")
@click.option("--grpc-port", type=click.IntRange(1, 65535), help="[recipe triton.ports.grpc, else 8001]")
@click.option("--metrics-port", type=click.IntRange(1, 65535), help="[recipe triton.ports.metrics, else 8002]")
@click.option(
    "--timeout",
    default=180.0,
    show_default=True,
    type=click.FloatRange(1, 3600),
    help="Seconds to wait for the server (and every model) to be ready.",
)
@click.option(
    "--log-verbose", default=0, show_default=True, type=click.IntRange(0, 3), help="tritonserver --log-verbose."
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False),
    help="Keep the server's backends and log here (default: a temp folder).",
)
@click.option("--quiet", "-q", is_flag=True, help="No build progress lines.")
def serve(target, overrides, cache_dir, host, http_port, grpc_port, metrics_port, timeout, log_verbose, workdir, quiet):
    """Serve REPO (a repository `trtspec build` wrote) or RECIPE (built first, cached) with tritonserver.

    \b
    Uses the tritonserver on PATH, else the one in the nvidia-pytriton wheel (the serve extra), binds
    loopback unless --host says otherwise, prints the endpoints once every model is ready, and stops
    cleanly (no process left behind) on Ctrl-C or SIGTERM.
    """
    from builder.serve.server import LOOPBACK, Ports, ServerError, TritonServer, find_tritonserver, install_hint

    path = Path(target)
    triton = None
    if path.is_dir():
        repo = path
    else:
        repo, triton = repo_from_recipe(target, overrides, cache_dir, quiet)
    info = check_repo(repo)
    dist = find_tritonserver()
    if dist is None:
        raise UserError(install_hint())
    defaults = triton.ports if triton is not None else Ports()
    ports = Ports(http_port or defaults.http, grpc_port or defaults.grpc, metrics_port or defaults.metrics)
    host = host or (triton.bind_address if triton is not None else LOOPBACK)
    server = TritonServer(repo, host, ports, Path(workdir) if workdir else None, log_verbose, dist=dist)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    click.echo(f"starting tritonserver ({dist.source}: {dist.binary}) on {repo}", err=True)
    try:
        server.start()
        server.wait_ready(timeout)
    except ServerError as exc:
        server.stop()
        raise UserError(str(exc)) from None
    ep = server.endpoints
    model = info["ensemble"]
    click.echo(
        f"ready: model {model!r} (text in, text out) · HTTP {ep['http']} · gRPC {ep['grpc']} · "
        f"metrics {ep['metrics']} · log {server.log_path}"
    )
    click.echo(
        f'  curl -s http://{ep["http"]}/v2/models/{model}/generate -d \'{{"text_input": "def f(x):", "max_tokens": 32}}\''
    )
    click.echo(
        f"  curl -sN http://{ep['http']}/v2/models/{model}/generate_stream "
        f'-d \'{{"text_input": "def f(x):", "max_tokens": 32, "stream": true}}\''
    )
    code = 0
    try:
        while not stop.wait(0.5):
            if not server.alive():
                click.echo(f"tritonserver exited unexpectedly:\n{server.log_tail()}", err=True)
                code = 1
                break
    finally:
        click.echo("stopping tritonserver", err=True)
        server.stop()
    left = server.processes()
    if left:
        click.echo(f"warning: processes still alive after stop: {left}", err=True)
    sys.exit(code)
