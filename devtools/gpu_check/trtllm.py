"""The TensorRT-LLM backend end to end (steps `trtllm-<method>`; where `tensorrt_llm` is installed, e.g. inside
NVIDIA's tritonserver:<yy.mm>-trtllm-python-py3 container).

For recipes/tiny-llama3-trtllm-<method>.yaml: `trtspec build` (checkpoint + the bundle's trtllm-build), `trtspec
deploy` (<work>/<method>/repository with gpt_model_path = the engine folder, <work>/<method>/bundle), the
bundle's launch.sh serving it (MODEL_REPO, ENGINE_DIR, HTTP_PORT, GRPC_PORT, METRICS_PORT), and the served greedy
tokens compared token for token with the ONNX Runtime engine of the same method's CPU recipe
(recipes/tiny-llama3-<method>.yaml, `trtspec generate --json`): `builder.trtllm.bundle.served_tokens` /
`first_difference`. Every command has a timeout inside the step's own; the server is stopped whatever happens
(it is in this step's process group, which the runner also kills on a timeout).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Callable, Iterator

from devtools.gpu_check.steps import PASS, Context, Fail, Verdict

PROMPT = "def fibonacci(n):"
TOKENS = 32
HTTP_PORT = 18000  # gRPC and metrics on the next two
READY_S = 600  # the engines load within this


def cli(repo: str, args: list[str], timeout: float, log: Path | None = None) -> str:
    cmd = [sys.executable, "-m", "builder.cli", *args]
    print("$ " + " ".join(cmd), flush=True)
    run = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, check=False, timeout=timeout)
    if log is not None:
        log.write_text(run.stdout + run.stderr, encoding="utf-8")
    if run.returncode != 0:
        raise Fail(f"trtspec {args[0]} exited {run.returncode}: {run.stderr.strip()[-500:]}")
    return run.stdout


def ready(http: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{http}/v2/health/ready", timeout=5) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


@contextlib.contextmanager
def serving(
    launch: Path, env: dict[str, str], log_path: Path, is_ready: Callable[[], bool], ready_s: float, what: str
) -> Iterator[subprocess.Popen[bytes]]:
    """`bash launch` (a bundle's launch script) running with `env`, its output in `log_path`, once `is_ready()`
    (polled every 5 s; Fail with the log's tail when it exits or `ready_s` passes first); SIGTERM (then kill after
    30 s) on leaving, whatever happens."""
    with open(log_path, "w", encoding="utf-8") as log:
        server = subprocess.Popen(["bash", str(launch)], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + ready_s
        while not is_ready():
            if server.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-20:]
                print("\n".join(tail))
                raise Fail(f"{what} did not become ready (exit {server.poll()}); see {log_path}")
            time.sleep(5)
        yield server
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def trtllm_step(ctx: Context) -> Verdict:
    from builder.trtllm.bundle import first_difference, served_tokens

    method = ctx.params["method"]
    recipe = f"recipes/tiny-llama3-trtllm-{method}.yaml"
    work = ctx.work / "trtllm" / method
    work.mkdir(parents=True, exist_ok=True)
    cache = Path(ctx.cache_dir)
    t0 = time.monotonic()
    cli(ctx.repo, ["build", recipe, "--cache-dir", str(cache), "-q"], timeout=600, log=work / "build.log")
    cli(
        ctx.repo,
        ["deploy", recipe, "--cache-dir", str(cache), "--out", str(work), "--engine-path", str(work / "engine"), "-q"],
        timeout=120,
        log=work / "deploy.log",
    )
    build_s = time.monotonic() - t0
    http = int(ctx.params.get("http_port", HTTP_PORT))
    env = dict(
        os.environ,
        MODEL_REPO=str(work / "repository"),
        ENGINE_DIR=str(work / "engine"),
        HTTP_PORT=str(http),
        GRPC_PORT=str(http + 1),
        METRICS_PORT=str(http + 2),
    )
    launch = work / "bundle" / "launch.sh"
    with serving(launch, env, work / "server.log", lambda: ready(f"127.0.0.1:{http}"), READY_S, "the server"):
        ort = json.loads(
            cli(
                ctx.repo,
                [
                    "generate",
                    f"recipes/tiny-llama3-{method}.yaml",
                    "--prompt",
                    PROMPT,
                    "--max-new-tokens",
                    str(TOKENS),
                    "--json",
                ],
                timeout=300,
            )
        )
        served = served_tokens(f"127.0.0.1:{http}", ort["prompt_ids"], TOKENS)
    at = first_difference(ort["token_ids"], served)
    details = {"build_deploy_s": round(build_s, 1), "ort": ort["token_ids"], "served": served, "work": str(work)}
    if at is not None:
        raise Fail(
            f"served tokens differ from ONNX Runtime at {at}: ort {ort['token_ids'][at : at + 4]} served "
            f"{served[at : at + 4]}"
        )
    return Verdict(
        PASS, f"{len(ort['token_ids'])} greedy tokens equal to ONNX Runtime's (build + deploy {build_s:.0f} s)", details
    )
