#!/usr/bin/env bash
# The main job on the built-in default: the tiny Llama 3 recipe on the CPU target.
# Sets up (idempotent), validates and plans the recipe, generates from a HumanEval-style prompt with
# speculative decoding, then profiles every method's acceptance side by side (out/acceptance.json).
# Pass another recipe as the first argument to validate/plan/generate with it instead.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
TRTSPEC=.venv/bin/trtspec
RECIPE=${1:-recipes/tiny-llama3.yaml}
mkdir -p out
$TRTSPEC validate "$RECIPE"
$TRTSPEC plan "$RECIPE"
echo "--- generate ($RECIPE)"
$TRTSPEC generate "$RECIPE" --max-new-tokens 96 \
  --prompt $'def is_palindrome(text: str) -> bool:\n    """Return True if text reads the same backwards."""\n'
echo "--- acceptance profile (held-out HumanEval prompts)"
if [ $# -eq 0 ]; then
  $TRTSPEC profile-acceptance recipes/tiny-llama3.yaml recipes/tiny-llama3-eagle1.yaml \
    recipes/tiny-llama3-medusa.yaml --num-prompts 10 --max-new-tokens 64 -o out/acceptance.json
else
  $TRTSPEC profile-acceptance "$RECIPE" --num-prompts 10 --max-new-tokens 64 -o out/acceptance.json
fi
