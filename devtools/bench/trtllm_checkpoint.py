"""Peak memory of the TensorRT-LLM checkpoint conversion at Llama-3-8B width (2 layers), per tp.

The input is `devtools.bench.scale`'s random 8B-width model (hidden 4096, 32/8 heads, vocab 128256, fp32,
5.95 GB) saved once as an HF checkpoint (config.json + model.safetensors, written streaming). Each
conversion (bfloat16 out, tp 1 / 2 / 4, pp 1) runs in its own subprocess (`python -m
devtools.bench.trtllm_checkpoint convert …`, one JSON line out), so its VmHWM is its own: interpreter and
imports included. The bound it is measured against is 1.5 × (the largest rank file) + (the largest input
tensor): the streaming writer holds one source tensor and its converted copy at a time, never a shard.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from builder.timing import markdown_table

TPS = (1, 2, 4)


def _status(field: str) -> int:  # bytes, from /proc/self/status (VmHWM, VmRSS)
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def make_input(folder: Path) -> dict[str, Any]:
    """Save scale.make_model()'s weights as an HF checkpoint in `folder` (streaming, tensor by tensor)."""
    import torch

    from builder.trtllm.checkpoint.safetensors_stream import Entry, write_file
    from devtools.bench import scale

    folder.mkdir(parents=True, exist_ok=True)
    model = scale.make_model()
    state = {("" if k.startswith("lm_head") else "model.") + k: v for k, v in model.state_dict().items()}
    entries = [Entry(k, "F32", tuple(v.shape)) for k, v in state.items()]
    size = write_file(folder / "model.safetensors", entries, lambda e: state[e.name].to(torch.float32))
    (folder / "config.json").write_text(json.dumps(scale.CONFIG), encoding="utf-8")
    return {"bytes": size, "largest_tensor_bytes": max(e.nbytes for e in entries), "tensors": len(entries)}


def convert(base: Path, out: Path, tp: int) -> dict[str, Any]:
    """One conversion in this process; VmHWM after it (the process is fresh: its peak is the conversion's)."""
    import torch  # noqa: F401  (imports counted in the baseline)

    from builder.trtllm.checkpoint import CheckpointRequest, convert_checkpoint

    baseline = _status("VmRSS")
    start = time.perf_counter()
    facts = convert_checkpoint(CheckpointRequest(base, tp, 1, "bfloat16", "none"), out)
    return {
        "tp": tp,
        "seconds": time.perf_counter() - start,
        "vm_hwm": _status("VmHWM"),
        "baseline_rss": baseline,
        "rank_bytes": [r["bytes"] for r in facts["ranks"]],
        "tensors": facts["tensors"],
    }


def run(work: Path, out_json: Path) -> dict[str, Any]:
    """make the input, convert at each tp in a subprocess, write the JSON report; returns it."""
    work.mkdir(parents=True, exist_ok=True)
    base = work / "base"
    made = _child(["make", str(base)]) if not (base / "model.safetensors").is_file() else _input_facts(base)
    rows = []
    for tp in TPS:
        dst = work / f"tp{tp}"
        shutil.rmtree(dst, ignore_errors=True)
        row = _child(["convert", str(base), str(dst), str(tp)])
        row["bound"] = int(1.5 * max(row["rank_bytes"]) + made["largest_tensor_bytes"])
        row["within_bound"] = row["vm_hwm"] <= row["bound"]
        rows.append(row)
        shutil.rmtree(dst, ignore_errors=True)
    report = {"model": "Llama-3-8B width, 2 layers, fp32 in, bfloat16 out", "input": made, "runs": rows}
    out_json.parent.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


def _input_facts(base: Path) -> dict[str, Any]:
    from builder.trtllm.checkpoint.safetensors_stream import read_header

    header = read_header(base / "model.safetensors")
    sizes = [v["data_offsets"][1] - v["data_offsets"][0] for v in header.values()]
    return {
        "bytes": (base / "model.safetensors").stat().st_size,
        "largest_tensor_bytes": max(sizes),
        "tensors": len(sizes),
    }


def _child(args: list[str]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    r = subprocess.run(
        [sys.executable, "-m", "devtools.bench.trtllm_checkpoint", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if r.returncode != 0:
        raise RuntimeError(f"{args[0]} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def table(report: dict[str, Any]) -> str:
    gib = 2.0**30
    lines = [
        f"input: {report['input']['bytes'] / gib:.2f} GiB, largest tensor {report['input']['largest_tensor_bytes'] / gib:.2f} GiB",
    ]
    header = ("tp", "seconds", "rank file GiB", "peak RSS (VmHWM) GiB", "baseline GiB", "bound GiB", "within")
    rows = [
        (
            r["tp"],
            f"{r['seconds']:.1f}",
            f"{max(r['rank_bytes']) / gib:.2f}",
            f"{r['vm_hwm'] / gib:.2f}",
            f"{r['baseline_rss'] / gib:.2f}",
            f"{r['bound'] / gib:.2f}",
            "yes" if r["within_bound"] else "NO",
        )
        for r in report["runs"]
    ]
    return "\n".join(lines + markdown_table(header, rows, "rrrrrrc"))


def main(argv: list[str]) -> None:
    if argv[0] == "make":
        print(json.dumps(make_input(Path(argv[1]))))
    elif argv[0] == "convert":
        print(json.dumps(convert(Path(argv[1]), Path(argv[2]), int(argv[3]))))
    else:
        raise SystemExit(f"unknown phase {argv[0]!r} (make | convert)")


if __name__ == "__main__":
    main(sys.argv[1:])
