"""GPU host only: run `trtllm-build` for a recipe and describe the engine it made (engine.json).

    reason = probe(recipe)                      # None where this host can build the recipe's engine
    log = build_engine(cmd, tmp_dir, say)       # trtllm-build into the caller's temp folder, log streamed
    write_engine_manifest(tmp_dir, engine_manifest(cmd, tmp_dir, installed_here()))
    # the caller renames tmp_dir into place (builder.stages: nothing half-written)

Nothing here imports tensorrt_llm at module level; `probe` reads its version from the distribution
metadata (importing it loads CUDA) and falls back to `tensorrt_llm.__version__`. The engine folder is what
`trtllm-build` writes (`tensorrt_llm/builder.py` Engine.save: config.json + rank{N}.engine per rank, plus
rank{N}_managed_weights.safetensors with --fast_build) and engine.json, which records what
`builder.trtllm.compat.check_engine` compares with the serving host. engine.json is written and read by
`builder.trtllm.compat` alone (`lock_manifest`, `write_lock`, `verify_files`): the bundle's build.sh writes it
with the same code (compat.py copied as check_engine.py), so the two cannot drift.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable

from builder import procs
from builder.recipe.gpus import GPUS
from builder.recipe.schema import Recipe
from builder.trtllm import compat
from builder.trtllm.build_cmd import BuildCommand
from builder.trtllm.compat import LOG_NAME, Installed, expected_files, installed_here, sm

FORMAT = compat.FORMAT
TAIL_LINES = 30
HEARTBEAT_S = 30.0
PROGRESS_MARKS = (
    "Total time",
    "Build TensorRT engine",
    "Engine serialized",
    "Build phase peak memory",
    "[E]",
    "Error",
    "error:",
)
INSTALL_HINT = (
    "building TensorRT-LLM engines needs TensorRT-LLM {version} on a GPU host: run inside {image} "
    "(NVIDIA's Triton TRT-LLM container) or install tensorrt_llm=={version}"
)


class BuildFailed(RuntimeError):
    """trtllm-build failed or left an incomplete engine folder (message: why, its last lines, the log path)."""


def probe(recipe: Recipe) -> str | None:
    """None when this host can build `recipe`'s TensorRT-LLM engine; else why not, in one phrase."""
    import importlib.util

    t, device = recipe.trtllm, recipe.target.device
    hint = INSTALL_HINT.format(version=t.version, image=t.image)
    if importlib.util.find_spec("tensorrt_llm") is None:
        return f"tensorrt_llm is not importable ({hint})"
    if device not in GPUS:
        return f"target.device {device} is not a GPU"
    want = GPUS[device].compute_capability
    problem = compat.build_problem(t.version, want, installed_here())  # the same test as bundle/build.sh's preflight
    if problem is not None:
        return f"{problem} (the recipe: trtllm.version {t.version}, target.device {device}; {hint})"
    fp8 = recipe.quantization.mode == "fp8" or recipe.quantization.kv_cache == "fp8"
    if fp8 and want < (8, 9):
        return f"FP8 needs sm89 or newer; {device} is {sm(want)}"
    return None


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        procs.signal_group(proc.pid, signal.SIGKILL)
        proc.wait(30)


def _stream(proc: subprocess.Popen, log, say: Callable[[str], None]) -> deque[str]:
    """Copy trtllm-build's output to the log; pass progress lines and a heartbeat to `say`; keep the tail."""
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    t0 = last = time.monotonic()
    assert proc.stdout is not None
    for line in proc.stdout:
        log.write(line)
        text = line.rstrip()
        tail.append(text)
        now = time.monotonic()
        if any(mark in text for mark in PROGRESS_MARKS):
            say(text[-200:])
            last = now
        elif now - last >= HEARTBEAT_S:
            say(f"trtllm-build running {now - t0:.0f} s: {text[-160:]}")
            last = now
    return tail


def build_engine(
    cmd: BuildCommand, out: Path, say: Callable[[str], None] = lambda _m: None, timeout: float | None = None
) -> Path:
    """Run `cmd` writing into `out` (a temp folder the caller renames on success); its log is `out/trtllm-build.log`.

    BuildFailed (with the log's last lines) on a non-zero exit, a timeout, or missing rank engines."""
    argv = cmd.with_dirs(output_dir=str(out)).argv
    if shutil.which(argv[0]) is None:
        raise BuildFailed(
            f"{argv[0]} is not on PATH ("
            + INSTALL_HINT.format(version=cmd.trtllm_version, image="the recipe's container")
            + ")"
        )
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / LOG_NAME
    say(f"trtllm-build (TensorRT-LLM {cmd.trtllm_version}), {cmd.target['world_size']} rank(s); log {log_path}")
    with open(log_path, "w", encoding="utf-8") as log:
        log.write("$ " + " ".join(argv) + "\n")
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            bufsize=1,
            start_new_session=True,
        )
        expired = threading.Event()

        def stop() -> None:  # a silent, hung build never ends the output stream: kill it at the deadline
            expired.set()
            _kill(proc)

        watchdog = threading.Timer(timeout, stop) if timeout is not None else None
        try:
            if watchdog is not None:
                watchdog.start()
            tail = _stream(proc, log, say)
            code = proc.wait()
        finally:
            if watchdog is not None:
                watchdog.cancel()
            _kill(proc)
    if expired.is_set():
        raise BuildFailed(f"trtllm-build ran past {timeout:.0f} s and was stopped; log {log_path}")
    if code != 0:
        lines = "\n".join(tail)
        raise BuildFailed(f"trtllm-build exited {code}; last lines:\n{lines}\nlog: {log_path}")
    missing = [f for f in expected_files(int(cmd.target["world_size"])) if not (out / f).is_file()]
    if missing:
        raise BuildFailed(f"trtllm-build exited 0 but {out} lacks {', '.join(missing)}; log {log_path}")
    return log_path


# -- engine.json (builder.trtllm.compat: the one implementation, shared with the bundle's check_engine.py) ------


def engine_manifest(cmd: BuildCommand, engine_dir: Path, installed: Installed) -> dict[str, Any]:
    """engine.json for a built engine folder: the stack that built it, the target, the command, every file hashed."""
    return compat.lock_manifest(cmd.manifest(), engine_dir, installed)


def write_engine_manifest(engine_dir: Path, manifest: dict[str, Any]) -> Path:
    """engine_dir/engine.json, written to a temp name and renamed."""
    return compat.write_lock(engine_dir, manifest)


def read_engine_manifest(engine_dir: Path, verify: bool = True) -> dict[str, Any]:
    """engine.json, checked against the folder: every listed file present with its size (and sha256 if `verify`),
    one rank engine per rank. UserError naming the first difference."""
    manifest = compat.read_manifest(engine_dir)
    compat.verify_files(engine_dir, manifest, hashes=verify)
    return manifest


__all__ = [
    "BuildFailed",
    "build_engine",
    "engine_manifest",
    "expected_files",
    "probe",
    "read_engine_manifest",
    "write_engine_manifest",
]
