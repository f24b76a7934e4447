#!/usr/bin/env python3
"""Decode benchmark on one or more fixtures (not a test): HF, CPU peers (ONNX Runtime GenAI, llama.cpp) and our
engines, every method (default and, with --tuned, tuned trees), one table with a fixture column
(devtools/bench/decode.py says what each column means, devtools/bench/decode_table.py the ratios).

    .venv/bin/python scripts/bench_decode.py [FIXTURE | RECIPE ...] --threads 1 [--rows hf,ortgenai,llamacpp,ours]
        [--tuned [--tune-prompts 8] [--tune-max-new-tokens 32] | --tuned-dir DIR] [--torch]
        [--num-prompts 20] [--max-new-tokens 128] [--draft-vocab none,512]
        [--out out/bench_decode.json] [--md out/bench_decode.md]

FIXTURE: tiny-llama3 (default: the trained 4.9 M-parameter fixture, L3-resident) and/or regime-llama3
(the same model inflated to a memory-bound step, made at setup); RECIPE: a recipe name such as
regime-llama3-eagle2 (recipes/NAME.yaml) or a path. Recipes are grouped by target checkpoint, one group
per fixture: a group's first recipe gives plain decoding and its own Lookahead rows, each further one its
method's row. Ratios are within a fixture.

--tuned runs `trtspec tune`'s library (builder/tune/run.py) on every method recipe of every fixture
(--tune-prompts calibration prompts × --tune-max-new-tokens) and writes the overlays (validated, `extends:` the
recipe) and tune reports under --tuned-dir (default out/tuned); --tuned-dir alone benches overlays written
earlier. Tuned rows are labelled "(tuned)" with the picked setting.

--draft-vocab adds, per EAGLE recipe, a row for each listed draft vocabulary (`speculative.draft_vocab`; none: the
whole vocabulary) beside the recipe's own, the same engines' variants interleaved prompt by prompt.

Writes the JSON (--out) and a markdown file (--md, default: --out with .md) holding the table and, for a
memory-bound fixture, our per-method speedups over ours plain beside the seed articles'.

llama.cpp rows need a GGUF: converted once (then cached) with the converter from the llama-cpp-python
sdist; point --llama-cpp-src (or TRTSPEC_LLAMA_CPP_SRC) at that .tar.gz or a llama.cpp tree.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # devtools/ is not installed: imported from this checkout

from builder.errors import UserError  # noqa: E402
from devtools.bench.decode import DEFAULT_FIXTURE, DEFAULT_ROWS, FIXTURES, ROW_GROUPS, resolve_recipes  # noqa: E402
from devtools.bench.decode_table import markdown, write  # noqa: E402
from devtools.bench.fixtures import Tuning, bench_fixtures, group_recipes  # noqa: E402


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "recipes",
        nargs="*",
        help=f"fixture names ({', '.join(FIXTURES)}), recipe names or recipe paths (default: {DEFAULT_FIXTURE})",
    )
    ap.add_argument(
        "--rows",
        default=",".join(DEFAULT_ROWS),
        help=f"comma-separated row groups out of {','.join(ROW_GROUPS)} (default: %(default)s)",
    )
    ap.add_argument("--torch", action="store_true", help="add our torch reference engine's rows")
    ap.add_argument("--num-prompts", type=int, default=20)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="threads for every row: torch, ORT GenAI, llama.cpp (our ORT engine always runs 1)",
    )
    ap.add_argument("--lookup", type=int, default=10, help="draft tokens per prompt-lookup / n-gram step (all peers)")
    ap.add_argument(
        "--tuned",
        action="store_true",
        help="tune every method recipe now (trtspec tune's library) and add its tuned rows",
    )
    ap.add_argument(
        "--tune-prompts", type=int, default=8, help="calibration prompts per method for --tuned (default: %(default)s)"
    )
    ap.add_argument(
        "--tune-max-new-tokens",
        type=int,
        default=32,
        help="calibration tokens per prompt for --tuned "
        "(default: %(default)s; the tuner decodes every candidate setting, so its time grows with this)",
    )
    ap.add_argument(
        "--tuned-dir",
        type=Path,
        help="where --tuned writes the overlays (default out/tuned); without --tuned: bench the overlays already there",
    )
    ap.add_argument("--llama-cpp-src", help="llama-cpp-python sdist or llama.cpp tree holding convert_hf_to_gguf.py")
    ap.add_argument(
        "--draft-vocab",
        default="",
        help="comma-separated draft vocabulary sizes (or none) to add as rows beside each EAGLE recipe's own",
    )
    ap.add_argument("--out", type=Path, default=REPO / "out" / "bench_decode.json")
    ap.add_argument("--md", type=Path, help="markdown tables (default: --out with the suffix .md)")
    args = ap.parse_args()
    if args.tune_prompts < 1 or args.tune_max_new_tokens < 1:
        ap.error("--tune-prompts and --tune-max-new-tokens must be ≥ 1")
    try:
        args.paths = resolve_recipes(args.recipes, REPO / "recipes")
        args.vocabs = [None if v.strip() == "none" else int(v) for v in args.draft_vocab.split(",") if v.strip()]
    except UserError as e:
        ap.error(str(e))  # exit 2, no traceback
    except ValueError:
        ap.error(f"--draft-vocab takes sizes or none, comma-separated; got {args.draft_vocab!r}")
    if any(v is not None and v < 1 for v in args.vocabs):
        ap.error("--draft-vocab sizes must be ≥ 1")
    return args


def with_draft_vocabs(groups, sizes):
    """Each group with, after each EAGLE recipe, copies of it drafting over the other `sizes` (None: all tokens)."""
    import copy

    out = []
    for group in groups:
        extra = []
        for rec in group:
            if rec.recipe.speculative.method != "eagle":
                continue
            for size in sizes:
                if size != rec.recipe.speculative.draft_vocab:
                    twin = copy.deepcopy(rec)
                    twin.recipe.speculative.draft_vocab = size
                    extra.append(twin)
        out.append([*group, *extra])
    return out


def main() -> None:
    args = parse_args()
    import torch

    torch.set_num_threads(args.threads)
    rows = [r.strip() for r in args.rows.split(",") if r.strip()] + (["torch"] if args.torch else [])
    tuning = None
    if args.tuned or args.tuned_dir:
        say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
        tuning = Tuning(
            args.tuned_dir or REPO / "out" / "tuned",
            args.tune_prompts if args.tuned else 0,
            args.tune_max_new_tokens,
            say,
        )
    t0 = time.perf_counter()
    report = bench_fixtures(
        with_draft_vocabs(group_recipes(args.paths), args.vocabs),
        args.num_prompts,
        args.max_new_tokens,
        rows=rows,
        threads=args.threads,
        lookup=args.lookup,
        llama_cpp_src=args.llama_cpp_src,
        tuning=tuning,
    )
    report["run_seconds"] = round(time.perf_counter() - t0, 1)
    md = args.md or args.out.with_suffix(".md")
    write(report, args.out, md)
    print(markdown(report))
    print(f"JSON: {args.out}\nmarkdown: {md}\nrun: {report['run_seconds']} s")


if __name__ == "__main__":
    main()
