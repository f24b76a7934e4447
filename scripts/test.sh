#!/usr/bin/env bash
# The test command: sets up (idempotent), checks formatting and lint (ruff), and runs the default test suite (not
# `slow`, not `gpu`).
# Extra arguments go to pytest, e.g. `scripts/test.sh -m slow` or `scripts/test.sh tests/unit -k recipe`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# formatting and lint first (configured in pyproject.toml; about a second): a failure stops before the suite
.venv/bin/ruff format --diff --quiet . || { echo "test.sh: not formatted (the diff is above): run .venv/bin/ruff format ." >&2; exit 1; }
.venv/bin/ruff check --quiet .
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
