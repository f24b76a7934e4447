"""perf_analyzer (2.51, from the tritonclient wheel) against a served trtspec repository.

The binary needs libb64 (Debian `libb64-0d`, scripts/setup.sh installs it) and libcudart.so.12 even
on a CPU-only machine (the `nvidia-cuda-runtime-cu12` wheel: `perf_env` puts it on LD_LIBRARY_PATH).
A decoupled model (the ensemble, spec_decoder) needs `-i grpc --streaming --async`.

    cmd = perf_command(model, grpc_url, data_file, concurrency=2)
    subprocess.run(cmd, env=perf_env(), ...)
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Sequence


def find_perf_analyzer() -> Path | None:
    on_path = shutil.which("perf_analyzer")
    if on_path:
        return Path(on_path)
    here = Path(sys.prefix) / "bin" / "perf_analyzer"
    return here if here.is_file() else None


def cuda_runtime_libdir() -> Path | None:
    try:
        import importlib.util

        spec = importlib.util.find_spec("nvidia.cuda_runtime")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    lib = Path(next(iter(spec.submodule_search_locations))) / "lib"
    return lib if (lib / "libcudart.so.12").exists() else None


def perf_env(base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    lib = cuda_runtime_libdir()
    if lib is not None:
        env["LD_LIBRARY_PATH"] = ":".join(p for p in (str(lib), env.get("LD_LIBRARY_PATH", "")) if p)
    return env


def input_data(prompts: Sequence[str], max_tokens: int, stream: bool = True) -> dict:
    """perf_analyzer --input-data JSON for the ensemble: one entry per prompt (used round-robin)."""
    return {"data": [{"text_input": [p], "max_tokens": [int(max_tokens)], "stream": [bool(stream)]} for p in prompts]}


def write_input_data(path: Path, prompts: Sequence[str], max_tokens: int, stream: bool = True) -> Path:
    path.write_text(json.dumps(input_data(prompts, max_tokens, stream)), encoding="utf-8")
    return path


def perf_command(model: str, grpc_url: str, data_file: Path, concurrency: int = 1, *, requests: int | None = None,
                 measurement_ms: int = 5000, stability_percentage: float | None = None, max_trials: int | None = None,
                 csv: Path | None = None, binary: Path | None = None) -> list[str]:  # fmt: skip
    """A streaming gRPC run at one concurrency: `requests` per measurement window (count mode) or time windows.

    perf_analyzer repeats windows until three agree within `stability_percentage` (default 10 %); on a
    busy 2-core machine a smoke run should accept any (e.g. 1000) and cap the trials."""
    exe = binary or find_perf_analyzer()
    if exe is None:
        raise FileNotFoundError("perf_analyzer not found: install the serve extra (bash scripts/setup.sh)")
    cmd = [str(exe), "-m", model, "-u", grpc_url, "-i", "grpc", "--streaming", "--async",
           "--input-data", str(data_file), f"--concurrency-range={concurrency}", "--max-threads=4"]  # fmt: skip
    if requests is not None:
        cmd += ["--measurement-mode=count_windows", f"--measurement-request-count={requests}"]
    else:
        cmd += [f"--measurement-interval={measurement_ms}"]
    if stability_percentage is not None:
        cmd += [f"--stability-percentage={stability_percentage}"]
    if max_trials is not None:
        cmd += [f"--max-trials={max_trials}"]
    if csv is not None:
        cmd += ["-f", str(csv)]
    return cmd
