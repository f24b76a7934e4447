#!/usr/bin/env python3
"""Step-cost curve of the ONNX Runtime engine beside the roofline floor (not a test).

    .venv/bin/python scripts/bench_step.py [--models fixture,8b-2l] [--variants standard,ort] [--threads 1]

`fixture`: the tiny Llama 3 (tests/fixtures/tiny-llama3/base). `8b-2l`: Llama-3-8B widths (hidden 4096,
32/8 heads, intermediate 14336, vocab 128256) cut to 2 layers, random weights (~6 GB fp32; export and
sessions need ~3x that in RAM). Prints one table per model and writes out/bench_step.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # devtools/ is not installed: imported from this checkout


def load(name: str):
    import torch

    from builder.model.config import LlamaConfig
    from builder.model.llama import Llama
    from builder.model.loader import load_model

    if name == "fixture":
        return load_model(REPO / "tests" / "fixtures" / "tiny-llama3" / "base")
    if name == "8b-2l":
        cfg = LlamaConfig(
            vocab_size=128256,
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=2,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=128,
            rms_norm_eps=1e-5,
            rope_theta=500000.0,
            rope_scaling=None,
            tie_word_embeddings=False,
            max_position_embeddings=8192,
        )
        torch.manual_seed(0)
        with torch.no_grad():
            model = Llama(cfg)
            for p in model.parameters():
                p.normal_(0, 0.02)
        return model.eval()
    raise SystemExit(f"unknown model {name!r} (fixture, 8b-2l)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="fixture")
    ap.add_argument("--variants", default="standard,ort")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--past", type=int, default=300)
    ap.add_argument("--out", type=Path, default=REPO / "out" / "bench_step.json")
    args = ap.parse_args()
    from devtools.bench.step import report, table

    reports = []
    for name in args.models.split(","):
        model = load(name)
        with tempfile.TemporaryDirectory(prefix="bench-step-") as tmp:
            rep = report(name, model, Path(tmp), tuple(args.variants.split(",")), args.threads, past=args.past)
        del model
        print(table(rep), "\n", flush=True)
        reports.append(rep)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(reports, indent=2) + "\n")
    print(f"JSON: {args.out}")


if __name__ == "__main__":
    main()
