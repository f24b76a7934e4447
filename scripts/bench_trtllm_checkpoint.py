#!/usr/bin/env python3
"""Peak RSS of the TensorRT-LLM checkpoint conversion at Llama-3-8B width (2 layers), tp 1 / 2 / 4 (not a test).

    .venv/bin/python scripts/bench_trtllm_checkpoint.py [--work /tmp/trtspec-trtllm-ckpt] [--keep]
        [--out out/bench_trtllm_checkpoint.json]

Needs ~7 GiB of RAM (making the 5.95 GB fp32 input) and ~9 GB of disk under --work (removed afterwards
unless --keep). Each conversion runs in its own subprocess; prints a markdown table and writes JSON. The
logic lives in devtools/bench/trtllm_checkpoint.py.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # devtools/ is not installed: imported from this checkout

from devtools.bench.trtllm_checkpoint import run, table  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path("/tmp/trtspec-trtllm-ckpt"))
    ap.add_argument("--keep", action="store_true", help="keep the input checkpoint")
    ap.add_argument("--out", type=Path, default=REPO / "out" / "bench_trtllm_checkpoint.json")
    args = ap.parse_args()
    try:
        report = run(args.work, args.out)
    finally:
        if not args.keep:
            shutil.rmtree(args.work, ignore_errors=True)
    print(table(report))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
