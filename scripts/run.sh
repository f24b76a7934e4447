#!/usr/bin/env bash
# The main job on the built-in default: the tiny Llama 3 recipe on the CPU target.
# Sets up (idempotent), validates and plans the recipe, builds it for the CPU (ONNX Runtime engine +
# Triton model repository, cached), generates once with speculative decoding, serves the repository
# with tritonserver and streams one request through it, runs a short `trtspec bench` (perf_analyzer:
# speculative vs no-speculation baseline, report in out/bench/<recipe>-quick/), then profiles every method's
# acceptance side by side (out/acceptance.json).
# Pass another recipe as the first argument to run the same job with it: a path, or a recipe name
# (recipes/NAME.yaml), e.g. `scripts/run.sh regime-llama3-eagle2` for the memory-bound regime fixture.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
TRTSPEC=.venv/bin/trtspec
PY=.venv/bin/python
RECIPE=${1:-recipes/tiny-llama3.yaml}
if [ ! -f "$RECIPE" ] && [ -f "recipes/$RECIPE.yaml" ]; then
  RECIPE="recipes/$RECIPE.yaml"
fi
STEM=$(basename "$RECIPE" .yaml)
mkdir -p out
SERVER_PID=""
stop_server() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=""
}
trap stop_server EXIT
trap 'stop_server; exit 130' INT TERM

$TRTSPEC validate "$RECIPE"
$TRTSPEC plan "$RECIPE"
echo "--- build ($RECIPE, CPU target)"
$TRTSPEC build "$RECIPE"
echo "--- generate ($RECIPE)"
$TRTSPEC generate "$RECIPE" --max-new-tokens 96 \
  --prompt $'def is_palindrome(text: str) -> bool:\n    """Return True if text reads the same backwards."""\n'

echo "--- serve ($RECIPE) and stream one request"
read -r HTTP GRPC METRICS < <($PY -c "from builder.serve.server import free_ports as f; p = f(); print(p.http, p.grpc, p.metrics)")
$TRTSPEC serve "$RECIPE" -q --http-port "$HTTP" --grpc-port "$GRPC" --metrics-port "$METRICS" > out/serve.log 2>&1 &
SERVER_PID=$!
$PY - "$HTTP" "$RECIPE" <<'EOF'
import json, sys, time, urllib.request
from builder.recipe.loader import load_recipe

port, recipe = sys.argv[1], sys.argv[2]
model = load_recipe(recipe).recipe.triton.model_name
base = f"http://127.0.0.1:{port}"
deadline = time.monotonic() + 180
while True:  # until every model is loaded
    try:
        with urllib.request.urlopen(f"{base}/v2/health/ready", timeout=2) as r:
            if r.status == 200:
                break
    except OSError:
        pass
    if time.monotonic() > deadline:
        sys.exit("tritonserver not ready after 180 s (see out/serve.log)")
    time.sleep(0.5)
body = {"text_input": "def fibonacci(n):\n", "max_tokens": 48, "stream": True}
print(f"POST {base}/v2/models/{model}/generate_stream {json.dumps(body)}")
req = urllib.request.Request(f"{base}/v2/models/{model}/generate_stream", json.dumps(body).encode(),
                             {"Content-Type": "application/json"})
last = {}
with urllib.request.urlopen(req, timeout=60) as r:
    for line in r:
        if line.startswith(b"data:"):
            last = json.loads(line[5:])
            if "error" in last:
                sys.exit(f"request failed: {last['error']}")
            print(last.get("text_output", ""), end="", flush=True)
print(f"\n[{last.get('output_tokens')} tokens in {last.get('steps')} target steps after prefill, "
      f"{last.get('accepted_tokens')} draft tokens accepted, finish_reason {last.get('finish_reason')!r}]")
EOF
stop_server
echo "--- server stopped"

echo "--- bench ($RECIPE): perf_analyzer, speculative vs baseline, short windows"
$TRTSPEC bench "$RECIPE" -q --concurrency 1,2 --window-ms 2000 --out "out/bench/$STEM-quick"

echo "--- acceptance profile (held-out HumanEval prompts)"
if [ $# -eq 0 ]; then
  $TRTSPEC profile-acceptance recipes/tiny-llama3.yaml recipes/tiny-llama3-eagle2.yaml \
    recipes/tiny-llama3-eagle1.yaml recipes/tiny-llama3-medusa.yaml recipes/tiny-llama3-ngram.yaml --num-prompts 10 --max-new-tokens 64 -o out/acceptance.json
else
  $TRTSPEC profile-acceptance "$RECIPE" --num-prompts 10 --max-new-tokens 64 -o out/acceptance.json
fi
echo "--- done: bench report out/bench/$STEM-quick/report.md, acceptance out/acceptance.json"
