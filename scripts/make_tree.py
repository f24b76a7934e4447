#!/usr/bin/env python3
"""Make a static tree for a node budget from a Medusa recipe's measured head accuracy.

    .venv/bin/python scripts/make_tree.py recipes/tiny-llama3-medusa.yaml --nodes 16 --name tiny_medusa_16

Prompts: the fixture corpus's held-out stdlib files (never HumanEval, which the benchmarks use).
Writes builder/speculative/trees/NAME.json (the presets shipped in the package); see builder/speculative/tree_search.py for the construction.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from builder.data.corpus import load_corpus
from builder.recipe.loader import load_recipe
from builder.speculative.medusa.accuracy import rank_accuracy
from builder.speculative.tree_search import best_choices, expected_accepted
from builder.stages.decoders import build_decoder

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recipe")
    ap.add_argument("--nodes", type=int, required=True, help="draft nodes (root excluded)")
    ap.add_argument("--name", required=True)
    ap.add_argument("--prompts", type=int, default=24)
    ap.add_argument("--ranks", type=int, default=8)
    args = ap.parse_args()
    torch.manual_seed(0)
    loaded = load_recipe(args.recipe)
    dec = build_decoder(loaded, engine="torch")
    files = load_corpus().val[: args.prompts]
    prompts = [dec.tokenizer.encode(f.text).ids[:96] for f in files]
    model = dec.engine.model
    acc = rank_accuracy(model, dec.engine.medusa, prompts, ranks=args.ranks)
    choices = best_choices(acc, args.nodes)
    out = REPO / "builder" / "speculative" / "trees" / f"{args.name}.json"
    source = (
        f"scripts/make_tree.py {args.recipe} --nodes {args.nodes} (head accuracy on {len(prompts)} "
        f"held-out stdlib files; expected accepted per step {expected_accepted(choices, acc):.2f})"
    )
    rows = ",\n".join("  " + json.dumps([round(a, 4) for a in row]) for row in acc)
    out.write_text(
        f'{{\n "name": {json.dumps(args.name)},\n "source": {json.dumps(source)},\n'
        f' "accuracy": [\n{rows}\n ],\n "choices": {json.dumps([list(c) for c in choices])}\n}}\n'
    )
    print(
        f"{out}: {len(choices)} nodes, depth {max(len(c) for c in choices)}, "
        f"expected accepted per step {expected_accepted(choices, acc):.2f}"
    )


if __name__ == "__main__":
    main()
