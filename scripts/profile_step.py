#!/usr/bin/env python3
"""ORT's profiler on one plain step of our target graph and of ONNX Runtime GenAI's (not a test).

    .venv/bin/python scripts/profile_step.py [FIXTURE | RECIPE] [--variants ort,standard] [--past-len 300]
        [--runs 200] [--warmup 20] [--capacity 1024] [--nodes 1] [--no-genai] [--graph LABEL=PATH ...]
        [--out out/profile_step-<fixture>.json]

FIXTURE: tiny-llama3 (default) or regime-llama3; RECIPE: a recipe name or path (its checkpoint is used).
Prints kernel time per op type, node counts and kernel time per token side by side, and writes JSON.
The logic lives in devtools/bench/profile.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # devtools/ is not installed: imported from this checkout

from builder.errors import UserError  # noqa: E402
from devtools.bench.profile import profile_fixture, table  # noqa: E402


def checkpoint(name: str) -> tuple[str, Path]:
    """(label, HF checkpoint folder) of a fixture name, a recipe name or a recipe path (its target checkpoint)."""
    from builder.recipe.loader import load_recipe
    from builder.stages.parts import local_dir
    from devtools.bench.decode import FIXTURES, resolve_recipes

    loaded = load_recipe(resolve_recipes([name], REPO / "recipes")[0])
    label = name if name in FIXTURES else Path(name).stem
    return label, local_dir(loaded, ("model", "checkpoint"), loaded.recipe.model.checkpoint)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("fixture", nargs="?", default="tiny-llama3", help="fixture name, recipe name or recipe path")
    ap.add_argument("--variants", default="ort,standard", help="our graph variants to profile (comma-separated)")
    ap.add_argument("--past-len", type=int, default=300)
    ap.add_argument(
        "--nodes", type=int, default=1, help="profile a step of a chain of this many nodes (default 1: a plain step)"
    )
    ap.add_argument("--capacity", type=int, default=1024, help="our cache slots (max_seq_len at export)")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--no-genai", action="store_true", help="profile our graphs only")
    ap.add_argument(
        "--graph",
        action="append",
        default=[],
        metavar="LABEL=PATH",
        help="also profile this exported greedy target.ort.onnx of the same checkpoint (repeatable)",
    )
    ap.add_argument("--out", type=Path, help="JSON path (default out/profile_step-<fixture>.json)")
    args = ap.parse_args()
    try:
        label, hf_dir = checkpoint(args.fixture)
    except UserError as e:
        ap.error(str(e))
    report = profile_fixture(
        hf_dir,
        variants=tuple(v for v in args.variants.split(",") if v),
        past_len=args.past_len,
        capacity=args.capacity,
        runs=args.runs,
        warmup=args.warmup,
        with_genai=not args.no_genai,
        graphs=dict(g.split("=", 1) for g in args.graph),
        nodes=args.nodes,
    )
    report["fixture"] = label
    print(table(report))
    out = args.out or REPO / "out" / f"profile_step-{label}{'' if args.nodes == 1 else f'-T{args.nodes}'}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"\nJSON: {out}")


if __name__ == "__main__":
    main()
