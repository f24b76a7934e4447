"""perf_analyzer (2.51, from the tritonclient wheel) against a served trtspec repository.

The binary needs libb64 (Debian `libb64-0d`, scripts/setup.sh installs it) and libcudart.so.12 even
on a CPU-only machine (the `nvidia-cuda-runtime-cu12` wheel: `perf_env` puts it on LD_LIBRARY_PATH).
A decoupled model (the ensemble, spec_decoder) needs `-i grpc --streaming --async`.

    cmd = perf_command(model, grpc_url, data_file, concurrency=2)
    subprocess.run(cmd, env=perf_env(), ...)

What a run leaves (seen with 2.51 against the decoupled ensemble):
  -f CSV      one header line and one row per concurrency: `Inferences/Second` (requests/s over the
              measurement windows), `Response Throughput` (streamed responses/s) and `p50/p90/p95/p99
              latency`, `Avg latency` in µs. For a decoupled model it prints "using the first response
              for measuring latency", yet against the trtspec ensemble its p50 equals the LAST
              response's latency computed from the profile export (measured: 20.12 vs 20.12 ms), so
              time to first token comes from the export only. `--verbose-csv` adds `request/response`
              and `response wait`. `read_perf_csv` parses it.
  --profile-export-file JSON   every request of the measurement windows: send timestamp, each
              response's timestamp (ns) and output tensors (so: last-response latency, time to first
              token, inter-token latency and spec_decoder's counters per request). `read_profile_export`.
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


def input_data(prompts: Sequence[str], max_tokens: int, stream: bool = True, *, speculate: bool | None = None) -> dict:
    """perf_analyzer --input-data JSON for the ensemble: one entry per prompt (used round-robin).

    `speculate` (when given) sets the per-request input: False = plain decoding on the same engine."""
    extra = {} if speculate is None else {"speculate": [bool(speculate)]}
    return {
        "data": [
            {"text_input": [p], "max_tokens": [int(max_tokens)], "stream": [bool(stream)], **extra} for p in prompts
        ]
    }


def write_input_data(
    path: Path, prompts: Sequence[str], max_tokens: int, stream: bool = True, *, speculate: bool | None = None
) -> Path:
    path.write_text(json.dumps(input_data(prompts, max_tokens, stream, speculate=speculate)), encoding="utf-8")
    return path


def perf_command(
    model: str,
    grpc_url: str,
    data_file: Path,
    concurrency: int = 1,
    *,
    requests: int | None = None,
    measurement_ms: int = 5000,
    stability_percentage: float | None = None,
    max_trials: int | None = None,
    csv: Path | None = None,
    binary: Path | None = None,
    profile_export: Path | None = None,
    request_parameters: dict[str, bool | int | str] | None = None,
) -> list[str]:
    """A streaming gRPC run at one concurrency: `requests` per measurement window (count mode) or time windows.

    perf_analyzer repeats windows until three agree within `stability_percentage` (default 10 %); on a
    busy 2-core machine a smoke run should accept any (e.g. 1000) and cap the trials."""
    exe = binary or find_perf_analyzer()
    if exe is None:
        raise FileNotFoundError("perf_analyzer not found: install the serve extra (bash scripts/setup.sh)")
    cmd = [
        str(exe),
        "-m",
        model,
        "-u",
        grpc_url,
        "-i",
        "grpc",
        "--streaming",
        "--async",
        "--input-data",
        str(data_file),
        f"--concurrency-range={concurrency}",
        "--max-threads=4",
    ]
    if requests is not None:
        cmd += ["--measurement-mode=count_windows", f"--measurement-request-count={requests}"]
    else:
        cmd += [f"--measurement-interval={measurement_ms}"]
    if stability_percentage is not None:
        cmd += [f"--stability-percentage={stability_percentage}"]
    if max_trials is not None:
        cmd += [f"--max-trials={max_trials}"]
    if csv is not None:
        cmd += ["-f", str(csv), "--verbose-csv"]
    if profile_export is not None:
        cmd += ["--profile-export-file", str(profile_export)]
    for name, value in (request_parameters or {}).items():  # e.g. ignore_eos=True -> ignore_eos:true:bool
        kind = "bool" if isinstance(value, bool) else "int" if isinstance(value, int) else "string"
        text = str(value).lower() if isinstance(value, bool) else str(value)
        cmd += ["--request-parameter", f"{name}:{text}:{kind}"]
    return cmd


# -- results ------------------------------------------------------------------------------------------


def _number(cell: str) -> float | None:
    cell = cell.strip()
    if not cell:
        return None
    try:
        return float(cell)
    except ValueError:
        return None


def read_perf_csv(path: Path) -> list[dict[str, float | None]]:
    """perf_analyzer's -f CSV: one dict per row of its table (column name -> number, None when empty).

    Only the leading table is read (rows until the first blank line); every row must have the header's
    width and a numeric Concurrency (or Request Rate)."""
    import csv as csv_module

    lines = Path(path).read_text(encoding="utf-8").splitlines()
    table: list[str] = []
    for line in lines:
        if not line.strip():
            if table:
                break
            continue
        table.append(line)
    if not table:
        raise ValueError(f"{path}: empty perf_analyzer CSV")
    rows = list(csv_module.reader(table))
    header = [h.strip() for h in rows[0]]
    if header[0] not in ("Concurrency", "Request Rate"):
        raise ValueError(f"{path}: not a perf_analyzer CSV (first column {header[0]!r})")
    out = []
    for i, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise ValueError(f"{path}:{i}: {len(row)} cells, header has {len(header)}")
        rec = {h: _number(c) for h, c in zip(header, row)}
        if rec[header[0]] is None:
            raise ValueError(f"{path}:{i}: {header[0]} is not a number: {row[0]!r}")
        out.append(rec)
    return out


def read_profile_export(path: Path) -> dict:
    """perf_analyzer's --profile-export-file JSON (optionally gzipped): {"version", "experiments": [
    {"experiment": {"mode", "value"}, "requests": [{"timestamp", "response_timestamps", "response_outputs"}],
    "window_boundaries": [ns, …]}]}; checked for that shape."""
    import gzip

    raw = Path(path).read_bytes()
    data = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    if not isinstance(data, dict) or not isinstance(data.get("experiments"), list):
        raise ValueError(f"{path}: not a perf_analyzer profile export (no experiments list)")
    for e in data["experiments"]:
        if not isinstance(e.get("requests"), list) or "experiment" not in e:
            raise ValueError(f"{path}: an experiment without requests")
    return data
