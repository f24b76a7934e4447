#!/usr/bin/env bash
# The main job on the built-in default: the tiny Llama 3 recipe on the CPU target.
# Sets up (idempotent), validates and plans the recipe. Pass another recipe as the first argument.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
RECIPE=${1:-recipes/tiny-llama3.yaml}
.venv/bin/trtspec validate "$RECIPE"
.venv/bin/trtspec plan "$RECIPE"
