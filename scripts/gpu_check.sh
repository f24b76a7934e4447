#!/usr/bin/env bash
# GPU check (not run in CI): the tree_verify Triton kernel against the reference at T=64, V=128256,
# B=1..16, both modes, timed against the measured device copy bandwidth; the TensorRT plugin through an
# engine, and the fixture recipes' TensorRT engines decoding token for token like ONNX Runtime — both
# only where TensorRT >= 10.15 is installed (otherwise one line says the TensorRT part is skipped and
# why). Ends with tables; < 5 minutes (the engine builds are cached in --cache-dir for reruns).
# Needs a CUDA host with torch + triton; runs from the source tree (PYTHONPATH=.), no pip.
# Extra arguments go to the module, e.g.
#   scripts/gpu_check.sh --batches 1,16 --json out/gpu_check.json
#   scripts/gpu_check.sh --engine-recipes all --device h100
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" -m plugins.verify_checks.gpu_check "$@"
