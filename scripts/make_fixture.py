#!/usr/bin/env python
"""Build the trained tiny Llama 3 fixture (base + tokenizer, Medusa heads, EAGLE-1 draft).

    .venv/bin/python scripts/make_fixture.py                      # full run → tests/fixtures/tiny-llama3
    .venv/bin/python scripts/make_fixture.py --quick --out /tmp/f  # seconds-long smoke run, toy sizes

All logic lives in `devtools.fixture` (the drafters' training loops: `builder.train`); this is the command-line
shell. CPU only, deterministic seeds.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from dataclasses import replace
from pathlib import Path

# Two torch threads on a shared 2-core machine: idle OpenMP workers must sleep, not spin, or every
# other process (and this one) slows down many-fold. Must be set before torch is imported.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DEFAULT_OUT = REPO / "tests" / "fixtures" / "tiny-llama3"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (replaced at the end)")
    parser.add_argument("--seed", type=int, default=0, help="master seed (default 0)")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    parser.add_argument("--quick", action="store_true", help="toy sizes, for smoke tests (not a usable fixture)")
    args = parser.parse_args(argv)

    from devtools.fixture.common import FixtureSpec, quick_spec
    from devtools.fixture.pipeline import make_fixture

    spec = quick_spec() if args.quick else FixtureSpec()
    spec = replace(spec, seed=args.seed, threads=args.threads)
    shown = [a if a != str(DEFAULT_OUT) else "tests/fixtures/tiny-llama3" for a in (argv or sys.argv[1:])]
    command = " ".join([".venv/bin/python scripts/make_fixture.py", *map(shlex.quote, shown)])
    rep = make_fixture(spec, args.out.resolve(), command)
    h = rep.heldout
    print(
        f"wrote {args.out} in {rep.wall['total_s'] / 60:.1f} min; HumanEval perplexity "
        f"{h['humaneval_perplexity']:.3f}; {h['tree']} tree τ: Medusa {h['medusa']['tree_tau']:.2f}, "
        f"EAGLE {h['eagle']['tree_tau']:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
