#!/usr/bin/env python
"""Make the regime fixture (tests/fixtures/regime-llama3, git-ignored) from the shipped tiny one.

    .venv/bin/python scripts/make_regime_fixture.py            # no-op when up to date (scripts/setup.sh)
    .venv/bin/python scripts/make_regime_fixture.py --force    # remake
    .venv/bin/python scripts/make_regime_fixture.py --check    # exit 1 when missing or stale, write nothing

A function-preserving inflation (devtools/fixture/inflate.py) into the deployment's regime: a T=1
step reads ≥ 4× the last-level cache, the EAGLE layer + LM head ≈ 10 % of a step, Medusa ≤ 15 %.
All logic lives in `devtools.fixture.regime`; this is the command-line shell. Deterministic.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> int:
    from devtools.fixture.regime import (
        OUT,
        SOURCE,
        InflateSpec,
        ensure_regime_fixture,
        fixture_key,
        is_current,
        summary,
    )

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", type=Path, default=SOURCE, help="source fixture (default: %(default)s)")
    ap.add_argument("--out", type=Path, default=OUT, help="output folder, replaced atomically (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=InflateSpec().seed)
    ap.add_argument("--force", action="store_true", help="remake even when up to date")
    ap.add_argument("--check", action="store_true", help="only say whether it is up to date (exit 1 if not)")
    ap.add_argument("--quiet", action="store_true", help="print only when the fixture is (re)made")
    args = ap.parse_args(argv)
    spec = replace(InflateSpec(), seed=args.seed)
    if args.check:
        ok = is_current(args.out, fixture_key(args.src, spec))
        print(f"{args.out}: {'up to date' if ok else 'missing or stale'}")
        return 0 if ok else 1
    record, made = ensure_regime_fixture(args.src, args.out, spec, force=args.force)
    if made or not args.quiet:
        state = f"made in {record['seconds']} s" if made else "up to date"
        print(f"{args.out} {state}\n{summary(record)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
