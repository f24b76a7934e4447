#!/usr/bin/env bash
# GPU check of the tree_verify plugin (not run in CI): the Triton kernel against the reference at
# T=64, V=128256, B=1..16, both modes; timings against the measured device copy bandwidth; the
# TensorRT plugin through an engine when tensorrt is installed. Ends with a table; < 5 minutes.
# Needs a CUDA host with torch + triton (and tensorrt >= 10.15 for the TensorRT row).
# Extra arguments go to the module, e.g. `scripts/gpu_check.sh --batches 1,16 --json out/gpu_check.json`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
exec "$PY" -m plugins.verify_checks.gpu_check "$@"
