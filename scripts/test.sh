#!/usr/bin/env bash
# The test command: sets up (idempotent) and runs the default test suite (not `slow`, not `gpu`).
# Extra arguments go to pytest, e.g. `scripts/test.sh -m slow` or `scripts/test.sh tests/unit -k recipe`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
