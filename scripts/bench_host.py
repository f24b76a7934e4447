#!/usr/bin/env python3
"""Host work per decoding step (not a test): the Python around the session calls, per method, at batch 1
and 16, with a cProfile of each (devtools/bench/host.py says what each column means).

    .venv/bin/python scripts/bench_host.py [FIXTURE] [--batches 1,16] [--methods none,lookahead,medusa,eagle-1,eagle-2]
        [--max-new-tokens 64] [--rounds 3] [--out out/bench_host.json]

FIXTURE: tiny-llama3 (default: sessions are cheap, so the host share stands out) or regime-llama3.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # devtools/ is not installed: imported from this checkout

from devtools.bench.decode import DEFAULT_FIXTURE, FIXTURES  # noqa: E402
from devtools.bench.host import METHODS, bench_host, table  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("fixture", nargs="?", default=DEFAULT_FIXTURE, choices=sorted(FIXTURES))
    ap.add_argument("--batches", default="1,16", help="batch sizes (comma-separated)")
    ap.add_argument("--methods", default=",".join(METHODS), help=f"out of {','.join(METHODS)}")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds per row (after one warm-up round)")
    ap.add_argument("--out", type=Path, default=REPO / "out" / "bench_host.json")
    args = ap.parse_args()
    methods = [m for m in args.methods.split(",") if m]
    if set(methods) - set(METHODS):
        ap.error(f"unknown methods {sorted(set(methods) - set(METHODS))} (allowed: {', '.join(METHODS)})")
    batches = [int(b) for b in args.batches.split(",") if b]
    report = bench_host(args.fixture, REPO / "recipes", batches, methods, args.max_new_tokens, args.rounds)
    print(table(report))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    tmp.replace(args.out)
    print(f"\nJSON: {args.out}")


if __name__ == "__main__":
    main()
