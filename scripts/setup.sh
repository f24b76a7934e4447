#!/usr/bin/env bash
# Idempotent setup: a virtualenv in .venv with trtspec (CPU toolchain + test tools) installed, the regime fixture
# (tests/fixtures/regime-llama3, git-ignored) made from the shipped tiny one, and the tiny fixture's EAGLE-3 draft
# (tests/fixtures/tiny-llama3/eagle3, git-ignored) trained by `trtspec train-draft`.
# Versions: pyproject.toml holds ranges; constraints/cpu-py<XY>.txt (XY: the interpreter's version) the exact set
# these machines run, applied to every install below with -c (TRTSPEC_CONSTRAINTS names another file).
# Safe to run repeatedly: it only reinstalls when pyproject.toml, the constraints file or this script changed, and
# only remakes the fixture when its sources or its code changed (a hash check, ~0.3 s; making it ~2 s).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
VENV=.venv
STAMP=$VENV/.trtspec-setup
PYVER=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
CONSTRAINTS=${TRTSPEC_CONSTRAINTS:-constraints/cpu-py$PYVER.txt}
PIN=()
if [ -f "$CONSTRAINTS" ]; then
  PIN=(-c "$CONSTRAINTS")
else
  echo "setup: no $CONSTRAINTS for Python $PYVER: installing the newest versions pyproject.toml's ranges allow" >&2
  CONSTRAINTS=/dev/null
fi
want=$(cat pyproject.toml scripts/setup.sh "$CONSTRAINTS" | sha256sum | cut -d' ' -f1)

regime_fixture() {
  "$VENV/bin/python" scripts/make_regime_fixture.py --quiet
  # the tiny fixture's EAGLE-3 draft, by `trtspec train-draft` (a key check when up to date; ~2.5 min on 2 idle cores
  # when not). The regime fixture's is on demand: scripts/make_eagle3_fixture.py --regime.
  "$VENV/bin/python" scripts/make_eagle3_fixture.py --quiet
}

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -x "$VENV/bin/trtspec" ]; then
  regime_fixture
  exit 0
fi

# Debian packages: perf_analyzer links libb64; the smaller-ISA checks (scripts/with_isa.sh, test_with_isa.py)
# patch libraries with objdump (binutils) and compare against qemu-user. Skipped when present.
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  for pkg in libb64-0d binutils qemu-user; do
    if ! dpkg -s "$pkg" >/dev/null 2>&1; then
      (apt-get install -y -qq "$pkg" >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq "$pkg" >/dev/null)) \
        || echo "setup: apt-get $pkg failed (only perf_analyzer / the ISA checks need it)" >&2
    fi
  done
fi

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
# torch first, on its own: the constraints file pins the release whose CPU build lies on these machines' disk;
# resolved together with the rest, anything newer would pull a multi-GB CUDA build.
"$VENV/bin/python" -m pip install -q "${PIN[@]}" torch
"$VENV/bin/python" -m pip install -q "${PIN[@]}" -e ".[cpu,dev,serve,peers]"
# Triton Inference Server 2.51 (inside nvidia-pytriton) and perf_analyzer 2.51 + the Python client (tritonclient):
# --no-deps, since their numpy<2 / protobuf<5 pins would downgrade what onnx needs (pyproject.toml, serve extra).
"$VENV/bin/python" -m pip install -q --no-deps "${PIN[@]}" "nvidia-pytriton==0.7.0" "tritonclient==2.51.0"
# NumPy 1.x for the Triton Python-backend stub only (built against NumPy 1: it garbles tensors under NumPy 2);
# its own target folder, so the constraints file (numpy 2 for the project) does not apply.
"$VENV/bin/python" -m pip install -q --no-deps --upgrade --target "$VENV/triton-stub-site" "numpy==1.26.4"
# Type stubs for the TensorRT adapter; --no-deps because `tensorrt` itself is not installable here.
"$VENV/bin/python" -m pip install -q --no-deps "${PIN[@]}" "tensorrt-stubs==10.13.0.35.1"
echo "$want" > "$STAMP"
regime_fixture
echo "setup: ready ($VENV)"
