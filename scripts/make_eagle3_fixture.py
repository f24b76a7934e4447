#!/usr/bin/env python
"""Make the fixtures' EAGLE-3 drafts with `trtspec train-draft` (git-ignored; devtools/fixture/eagle3.py).

    .venv/bin/python scripts/make_eagle3_fixture.py              # the tiny one; no-op when up to date (setup.sh)
    .venv/bin/python scripts/make_eagle3_fixture.py --regime     # also the regime fixture's, and its EAGLE-1/2 draft
                                                                 # retrained alike (minutes each: on demand)
    .venv/bin/python scripts/make_eagle3_fixture.py --force      # retrain
    .venv/bin/python scripts/make_eagle3_fixture.py --check      # exit 1 when missing or stale, write nothing

The same as `trtspec train-draft recipes/tiny-llama3-eagle3.yaml --device cpu --threads 2`: this is the shell that
setup runs, with the fixture's thread count fixed so the draft is the same bits on every host of one kind.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> int:
    from devtools.fixture.eagle3 import draft_dir, ensure_eagle3_fixture, is_current

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--regime",
        action="store_true",
        help="also the regime fixture's EAGLE-3 draft and its EAGLE-1/2 draft retrained alike (needs its base)",
    )
    ap.add_argument("--force", action="store_true", help="retrain even when up to date")
    ap.add_argument("--check", action="store_true", help="only say whether they are up to date (exit 1 if not)")
    ap.add_argument("--quiet", action="store_true", help="print only when a draft is trained")
    args = ap.parse_args(argv)
    names = ["tiny", "regime", "regime-eagle"] if args.regime else ["tiny"]
    if args.check:
        stale = [n for n in names if not is_current(n)]
        for n in names:
            print(f"{draft_dir(n)}: {'missing or stale' if n in stale else 'up to date'}")
        return 1 if stale else 0
    for n in names:
        record, made = ensure_eagle3_fixture(n, force=args.force, quiet=args.quiet)
        if made or not args.quiet:
            s = record["seconds"]
            print(
                f"{draft_dir(n)} {'trained' if made else 'up to date'}: {record['steps']} steps, loss "
                f"{record['final_loss']}, {s['total']} s when trained (data {s['data']} s, training {s['train']} s)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
