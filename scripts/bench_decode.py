#!/usr/bin/env python3
"""Decode benchmark on the tiny fixture (not a test): HF greedy, HF prompt lookup, ours, each method.

    .venv/bin/python scripts/bench_decode.py [--num-prompts 20] [--max-new-tokens 128] [--out out/bench_decode.json]
"""

from __future__ import annotations

import argparse
import glob
from pathlib import Path

from builder.bench.decode import bench_decode, table, write
from builder.recipe.loader import load_recipe

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recipes", nargs="*", help="recipes (default: recipes/tiny-llama3*.yaml)")
    ap.add_argument("--num-prompts", type=int, default=20)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--out", type=Path, default=REPO / "out" / "bench_decode.json")
    ap.add_argument("--threads", type=int, help="torch threads for every row (default: torch's)")
    args = ap.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    paths = args.recipes or sorted(glob.glob(str(REPO / "recipes" / "tiny-llama3*.yaml")))
    report = bench_decode([load_recipe(p) for p in paths], args.num_prompts, args.max_new_tokens)
    print(table(report))
    write(report, args.out)
    print(f"\nJSON: {args.out}")


if __name__ == "__main__":
    main()
