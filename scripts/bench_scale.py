#!/usr/bin/env python3
"""Export + ONNX Runtime at Llama-3-8B width (2 layers, random weights), fp32 and FP8 (not a test).

    .venv/bin/python scripts/bench_scale.py [--work /tmp/trtspec-scale] [--repeats 5] [--precisions fp32,fp8]
        [--threads 1,2] [--out out/bench_scale.json]

Needs ~9 GiB of RAM and ~11 GB of disk under --work (removed afterwards unless --keep). Prints one
markdown table and writes JSON (+ the table as .md beside it). The logic lives in devtools/bench/scale.py.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # devtools/ is not installed: imported from this checkout

from devtools.bench.scale import run, table  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path("/tmp/trtspec-scale"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--precisions", default="fp32,fp8")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--keep", action="store_true", help="keep the exported graphs")
    ap.add_argument("--out", type=Path, default=REPO / "out" / "bench_scale.json")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    try:
        report = run(
            args.work, args.repeats, tuple(args.precisions.split(",")), tuple(int(t) for t in args.threads.split(","))
        )
    finally:
        if not args.keep:
            shutil.rmtree(args.work, ignore_errors=True)
    print(table(report))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    args.out.with_suffix(".md").write_text(table(report) + "\n", encoding="utf-8")
    print(f"\nJSON: {args.out}")


if __name__ == "__main__":
    main()
