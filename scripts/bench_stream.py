#!/usr/bin/env python3
"""How fast one core streams fp32 weights, by working-set size (not a test): the memory roofline a T = 1 decoding
step sits on. A matrix-vector product (BLAS sgemv, one thread) over a W [n, 1024] float32 matrix, as a step's
MatMuls read their weights; GB/s = bytes of W / time, median of repeats, sizes from the L2 to past the L3.

    .venv/bin/python scripts/bench_stream.py [--sizes 1,4,16,32,64,128,256,512,1024] [--out out/bench_stream.json]

A machine's "last-level cache" size is not what one core gets of it: a VM's share, a mesh's slices and other
tenants decide. The curve shows where a working set stops being served from cache — for the regime fixture, the
row at its step's bytes (tests/fixtures/regime-llama3/regime.json) gives the floor of a plain step:
bytes / (GB/s at that size).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # before NumPy loads its BLAS
    os.environ.setdefault(var, "1")

import numpy as np  # noqa: E402

from builder.engines.step_curve import host_about  # noqa: E402  (CPU model name, ISA level)

ROOT = Path(__file__).resolve().parents[1]
MiB = 1 << 20


def gbps(mib: float, min_s: float = 0.3) -> float:
    rows = max(1, int(mib * MiB) // 4096)
    w = np.ones((rows, 1024), dtype=np.float32)
    v = np.ones(1024, dtype=np.float32)
    out = np.empty(rows, dtype=np.float32)
    np.matmul(w, v, out=out)  # first touch
    times = []
    t_end = time.perf_counter() + min_s
    while time.perf_counter() < t_end or len(times) < 5:
        t = time.perf_counter()
        np.matmul(w, v, out=out)
        times.append(time.perf_counter() - t)
    return w.nbytes / statistics.median(times) / 1e9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,4,16,32,64,128,256,512,1024", help="working sets in MiB")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "bench_stream.json")
    args = ap.parse_args()
    try:
        sizes = [float(s) for s in args.sizes.split(",") if s]
    except ValueError:
        print(f"bench_stream: --sizes must be comma-separated numbers (MiB), got {args.sizes!r}", file=sys.stderr)
        return 2
    if not sizes or min(sizes) <= 0:
        print("bench_stream: --sizes needs positive sizes (MiB)", file=sys.stderr)
        return 2
    regime = ROOT / "tests" / "fixtures" / "regime-llama3" / "regime.json"
    step = json.loads(regime.read_text())["budget"]["target_step_bytes"] if regime.is_file() else None
    if step is not None and step / MiB not in sizes:
        sizes = sorted(sizes + [round(step / MiB, 2)])
    rows = [{"MiB": s, "GB/s": round(gbps(s), 2)} for s in sizes]
    print("working set MiB | GB/s (1 core, sgemv)")
    for r in rows:
        mark = "  <- regime fixture step" if step is not None and abs(r["MiB"] - step / MiB) < 0.01 else ""
        print(f"{r['MiB']:>15g} | {r['GB/s']:6.1f}{mark}")
    floor = None
    if step is not None:
        at = next(r for r in rows if abs(r["MiB"] - step / MiB) < 0.01)
        floor = step / (at["GB/s"] * 1e9) * 1e3
        print(f"regime fixture: a T = 1 step reads {step / MiB:.1f} MiB: floor {floor:.2f} ms at {at['GB/s']} GB/s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(
        json.dumps(
            {
                "benchmark": "bench_stream",
                "rows": rows,
                "regime_step_bytes": step,
                "regime_floor_ms": floor,
                "host": host_about(threads=1),
            },
            indent=2,
        )
        + "\n"
    )
    tmp.replace(args.out)
    print(f"JSON: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
