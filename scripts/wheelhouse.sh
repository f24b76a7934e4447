#!/usr/bin/env bash
# The GPU check's wheelhouse: the packages its steps need that the borrowed GPU machines lack (pydantic and
# its three helpers, nvidia-modelopt with pulp and omegaconf: ~21 MiB), downloaded here as Python 3.12
# x86-64 manylinux wheels, checked (one version each, all pinned ones present, wheelhouse + tracked tree
# within the 64 MiB one device call carries) and listed with their sizes.
#
#   scripts/wheelhouse.sh [OUTDIR]       # default .whl (ignored by git; carry it: `carry: [".whl"]`)
#
# scripts/gpu_check.sh installs it offline when OUTDIR is .whl (or --wheelhouse OUTDIR):
#   python -m pip install --no-index --no-deps --no-compile --target <work>/site-py3.12 OUTDIR/*.whl
# (only the wheels whose package the host lacks or has older; without pip it unpacks them).
# The list and the reasons: devtools/gpu_check/wheelhouse.py. Needs pip and the package index here.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=$(command -v python3); fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" -m devtools.gpu_check.wheelhouse download "${1:-.whl}"
