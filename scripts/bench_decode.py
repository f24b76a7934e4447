#!/usr/bin/env python3
"""Decode benchmark on a fixture (not a test): HF, CPU peers (ONNX Runtime GenAI, llama.cpp) and our
engines, every method, one table (builder/bench/decode.py says what each column means).

    .venv/bin/python scripts/bench_decode.py [FIXTURE | RECIPE ...] --threads 1 [--rows hf,ortgenai,llamacpp,ours]
        [--torch] [--num-prompts 20] [--max-new-tokens 128] [--out out/bench_decode.json]

FIXTURE: tiny-llama3 (default: the trained 4.9 M-parameter fixture, L3-resident) or regime-llama3
(the same model inflated to a memory-bound step, made at setup); RECIPE: a recipe name such as
regime-llama3-eagle2 (recipes/NAME.yaml) or a path. The first recipe gives plain decoding and its
own Lookahead rows, each further one its method's row.

llama.cpp rows need a GGUF: converted once (then cached) with the converter from the llama-cpp-python
sdist; point --llama-cpp-src (or TRTSPEC_LLAMA_CPP_SRC) at that .tar.gz or a llama.cpp tree.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from builder.bench.decode import (DEFAULT_FIXTURE, DEFAULT_ROWS, FIXTURES, ROW_GROUPS, bench_decode, resolve_recipes,
                                  table, write)
from builder.errors import UserError
from builder.recipe.loader import load_recipe

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recipes", nargs="*", help=f"fixture names ({', '.join(FIXTURES)}), recipe names or recipe "
                    f"paths (default: {DEFAULT_FIXTURE})")
    ap.add_argument("--rows", default=",".join(DEFAULT_ROWS),
                    help=f"comma-separated row groups out of {','.join(ROW_GROUPS)} (default: %(default)s)")
    ap.add_argument("--torch", action="store_true", help="add our torch reference engine's rows")
    ap.add_argument("--num-prompts", type=int, default=20)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1, help="threads for every row: torch, ORT GenAI, llama.cpp "
                    "(our ORT engine always runs 1)")
    ap.add_argument("--lookup", type=int, default=10, help="draft tokens per prompt-lookup / n-gram step (all peers)")
    ap.add_argument("--llama-cpp-src", help="llama-cpp-python sdist or llama.cpp tree holding convert_hf_to_gguf.py")
    ap.add_argument("--out", type=Path, default=REPO / "out" / "bench_decode.json")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    rows = [r.strip() for r in args.rows.split(",") if r.strip()] + (["torch"] if args.torch else [])
    try:
        paths = resolve_recipes(args.recipes, REPO / "recipes")
    except UserError as e:
        ap.error(str(e))  # exit 2, no traceback
    report = bench_decode([load_recipe(p) for p in paths], args.num_prompts, args.max_new_tokens, rows=rows,
                          threads=args.threads, lookup=args.lookup, llama_cpp_src=args.llama_cpp_src)
    print(table(report))
    write(report, args.out)
    print(f"\nJSON: {args.out}")


if __name__ == "__main__":
    main()
