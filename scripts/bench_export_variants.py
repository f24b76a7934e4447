#!/usr/bin/env python3
"""Time one target step of the exported graph, both attention variants, on the tiny fixture (not a test).

    .venv/bin/python scripts/bench_export_variants.py [--nodes 1,4,13,24] [--past-len 300] [--batch 1]
        [--repeats 300] [--out out/bench_export_variants.json]

Prints a table (median / p10 / p90 ms per step, node counts per graph and per layer) and writes JSON.
The logic lives in devtools/bench/export_variants.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # devtools/ is not installed: imported from this checkout

from builder.model.loader import load_model  # noqa: E402
from devtools.bench.export_variants import bench_variants, table  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=REPO / "tests" / "fixtures" / "tiny-llama3" / "base")
    ap.add_argument("--variants", default="standard,ort")
    ap.add_argument("--nodes", default="1,4,13,24", help="tree sizes T (comma-separated)")
    ap.add_argument("--past-len", type=int, default=300)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--capacity", type=int, default=1024, help="max_seq_len (cache slots) at export")
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=300)
    ap.add_argument("--out", type=Path, default=REPO / "out" / "bench_export_variants.json")
    args = ap.parse_args()
    report = bench_variants(
        load_model(args.model),
        variants=tuple(args.variants.split(",")),
        nodes=tuple(int(t) for t in args.nodes.split(",")),
        past_len=args.past_len,
        batch=args.batch,
        capacity=args.capacity,
        warmup=args.warmup,
        repeats=args.repeats,
    )
    print(table(report))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"\nJSON: {args.out}")


if __name__ == "__main__":
    main()
