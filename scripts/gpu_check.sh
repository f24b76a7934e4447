#!/usr/bin/env bash
# GPU check (not run in CI): the tree_verify Triton kernel against the reference at T=64, V=128256,
# B=1..16, both modes, timed against the measured device copy bandwidth; the TensorRT plugin through an
# engine, and the fixture recipes' TensorRT engines decoding token for token like ONNX Runtime — both
# only where TensorRT >= 10.15 is installed (otherwise one line says the TensorRT part is skipped and
# why). Ends with tables; < 5 minutes (the engine builds are cached in --cache-dir for reruns).
# Then the TRT-LLM part (only where `import tensorrt_llm` works, e.g. inside NVIDIA's Triton TRT-LLM
# container; otherwise one line says it is skipped): each recipes/tiny-llama3-trtllm-*.yaml is built
# (checkpoint + trtllm-build engine), deployed (repository + bundle), served with the bundle's launch.sh,
# and its greedy tokens are compared token for token with the ONNX Runtime engine of the same method's
# CPU recipe (recipes/tiny-llama3-<method>.yaml, `trtspec generate --json`).
# Needs a CUDA host with torch + triton; runs from the source tree (PYTHONPATH=.), no pip.
# Extra arguments go to the module, e.g.
#   scripts/gpu_check.sh --batches 1,16 --json out/gpu_check.json
#   scripts/gpu_check.sh --engine-recipes all --device h100
# TRT-LLM part settings (environment): TRTLLM_WORK (default out/gpu_check_trtllm), TRTLLM_TOKENS (32),
# TRTLLM_PROMPT ("def fibonacci(n):"), TRTLLM_HTTP_PORT (18000; gRPC and metrics use the next two).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
status=0
"$PY" -m plugins.verify_checks.gpu_check "$@" || status=$?

if ! "$PY" -c "import tensorrt_llm" >/dev/null 2>&1; then
  echo "trtllm: skipped (tensorrt_llm not importable)"
  exit "$status"
fi

work=${TRTLLM_WORK:-out/gpu_check_trtllm}
tokens=${TRTLLM_TOKENS:-32}
prompt=${TRTLLM_PROMPT:-"def fibonacci(n):"}
http=${TRTLLM_HTTP_PORT:-18000}
server_pid=""
stop_server() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
  fi
}
trap stop_server EXIT

wait_ready() {  # $1: host:port; up to 10 minutes for the engines to load
  local i
  for i in $(seq 1 120); do
    if "$PY" -c 'import sys, urllib.request; urllib.request.urlopen(f"http://{sys.argv[1]}/v2/health/ready", timeout=5)' "$1" 2>/dev/null; then
      return 0
    fi
    if ! kill -0 "$server_pid" 2>/dev/null; then
      return 1
    fi
    [ "$i" -lt 120 ] && sleep 5
  done
  return 1
}

mkdir -p "$work"
printf '%-12s %-8s %s\n' method tokens result > "$work/table.txt"
for recipe in recipes/tiny-llama3-trtllm-*.yaml; do
  method=${recipe#recipes/tiny-llama3-trtllm-}
  method=${method%.yaml}
  out="$work/$method"
  echo "trtllm: $method: build ($recipe)"
  if ! "$PY" -m builder.cli build "$recipe" --cache-dir "$work/cache" -q; then
    printf '%-12s %-8s %s\n' "$method" - "build failed" >> "$work/table.txt"; status=1; continue
  fi
  # trtspec deploy: <out>/repository (gpt_model_path = --engine-path), <out>/engine, <out>/bundle (launch.sh)
  if ! "$PY" -m builder.cli deploy "$recipe" --cache-dir "$work/cache" --out "$out" --engine-path "$PWD/$out/engine"; then
    printf '%-12s %-8s %s\n' "$method" - "deploy failed" >> "$work/table.txt"; status=1; continue
  fi
  MODEL_REPO="$PWD/$out/repository" ENGINE_DIR="$PWD/$out/engine" HTTP_PORT="$http" GRPC_PORT=$((http + 1)) \
    METRICS_PORT=$((http + 2)) bash "$out/bundle/launch.sh" > "$out/server.log" 2>&1 &
  server_pid=$!
  if ! wait_ready "127.0.0.1:$http"; then
    echo "trtllm: $method: the server did not become ready; last lines of $out/server.log:"
    tail -n 20 "$out/server.log" || true
    printf '%-12s %-8s %s\n' "$method" - "serve failed" >> "$work/table.txt"; status=1; stop_server; continue
  fi
  "$PY" -m builder.cli generate "recipes/tiny-llama3-$method.yaml" --prompt "$prompt" --max-new-tokens "$tokens" \
    --json > "$out/ort.json"
  if result=$("$PY" - "$out/ort.json" "127.0.0.1:$http" "$tokens" <<'PYEOF'
import json, sys
from builder.trtllm.bundle import first_difference, served_tokens
ort = json.load(open(sys.argv[1]))
served = served_tokens(sys.argv[2], ort["prompt_ids"], int(sys.argv[3]))
at = first_difference(ort["token_ids"], served)
print(f"{len(ort['token_ids'])} " + ("equal" if at is None else f"DIFFER at {at}: ort {ort['token_ids'][at:at + 4]} served {served[at:at + 4]}"))
sys.exit(0 if at is None else 1)
PYEOF
  ); then
    printf '%-12s %-8s %s\n' "$method" "${result%% *}" "${result#* }" >> "$work/table.txt"
  else
    printf '%-12s %s\n' "$method" "${result:-compare failed}" >> "$work/table.txt"; status=1
  fi
  stop_server
done
echo "trtllm: greedy tokens, TensorRT-LLM engine vs ONNX Runtime ($work/table.txt):"
cat "$work/table.txt"
exit "$status"
