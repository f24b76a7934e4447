"""The tiny fixture's FP8 calibration with CUDA visible (step `quantize-fp8-cuda`).

Runs `trtspec build recipes/tiny-llama3-fp8.yaml --until quantize` as a user would (a subprocess, its own
cache under the work dir, `--force` so the calibration really runs on this host rather than coming from a
cache) and checks what the quantize stage wrote: its manifest.json, and quantize.json with FP8 linears, FP8
KV scales (the recipe's kv_cache: fp8) and finite, positive scale ranges. The quantize stage decides itself
where it calibrates (CUDA when present) and records it (quantize.json "placement": device, gpus, dtype); on a
host with CUDA every device it records must be a CUDA one, and the verdict quotes the placement. Measured on
the CPU build machine (the same command, CPU placement): 43 s, the stage itself 33 s.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

from devtools.gpu_check.steps import FAIL, PASS, Context, Fail, Verdict

RECIPE = "recipes/tiny-llama3-fp8.yaml"


def device_fields(doc: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(key path, value) of every string field whose key names a device (device, calibration_device, ...)."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            where = f"{path}.{key}" if path else str(key)
            if "device" in str(key).lower() and isinstance(value, (str, list)):
                yield where, json.dumps(value) if isinstance(value, list) else value
            yield from device_fields(value, where)
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from device_fields(value, f"{path}[{i}]")


def quantize_step(ctx: Context) -> Verdict:
    cache = ctx.work / "cache-quantize"
    cmd = [
        sys.executable,
        "-m",
        "builder.cli",
        "build",
        RECIPE,
        "--cache-dir",
        str(cache),
        "--until",
        "quantize",
        "--force",
        "--json",
        "--quiet",
    ]
    print("$ " + " ".join(cmd), flush=True)
    run = subprocess.run(cmd, cwd=ctx.repo, capture_output=True, text=True, check=False, timeout=280)
    sys.stdout.write(run.stderr[-3000:])
    if run.returncode != 0:
        raise Fail(f"trtspec build exited {run.returncode}: {run.stderr.strip()[-500:]}")
    stages = {s["stage"]: s for s in json.loads(run.stdout)["stages"]}
    if "quantize" not in stages:
        raise Fail(f"no quantize stage in the build (stages: {', '.join(stages)})")
    folder = Path(stages["quantize"]["output"])
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    info = json.loads((folder / "quantize.json").read_text(encoding="utf-8"))
    problems = []
    if not info.get("quantized_linears"):
        problems.append("no FP8 linears")
    if info.get("kv_cache") == "fp8" and not info.get("kv_layers"):
        problems.append("kv_cache fp8 but no KV scales")
    for kind, span in (info.get("scales") or {}).items():
        if span is not None and not all(math.isfinite(x) and x > 0 for x in span):
            problems.append(f"{kind} scales {span} not finite and positive")
    devices = sorted(set(device_fields(info)) | set(device_fields(manifest)))
    placement = info.get("placement") if isinstance(info.get("placement"), dict) else None
    cuda_here = bool(ctx.facts.get("have", {}).get("cuda"))
    if cuda_here and devices and not any("cuda" in value.lower() for _, value in devices):
        problems.append(f"calibrated on {sorted({v for _, v in devices})} although CUDA is visible")
    seconds = stages["quantize"].get("seconds")
    if placement is not None:
        where = ", ".join(f"{k}={placement[k]}" for k in ("device", "gpus", "dtype", "where") if k in placement)
    else:
        where = ", ".join(f"{k}={v}" for k, v in devices) if devices else "no device recorded by the stage"
    details = {
        "folder": str(folder),
        "quantize": info,
        "manifest_keys": sorted(manifest),
        "devices": devices,
        "seconds": seconds,
        "cuda_visible": cuda_here,
    }
    summary = (
        f"{info.get('quantized_linears')} FP8 linears, {info.get('kv_layers')} KV layers, stage "
        f"{seconds if seconds is None else round(seconds, 1)} s, {where}"
    )
    if problems:
        return Verdict(FAIL, f"{summary}: {'; '.join(problems)}", details)
    return Verdict(PASS, summary, details)
