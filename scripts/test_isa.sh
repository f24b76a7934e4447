#!/usr/bin/env bash
# The test suite on another x86 CPU's code paths, emulated: qemu-user with a CPU model whose CPUID lacks what
# this machine has, so ONNX Runtime's MLAS kernels, NumPy's and PyTorch's dispatch all take that CPU's paths
# (ATEN_CPU_CAPABILITY covers PyTorch only). Correctness only: emulated time says nothing about speed.
#
#   scripts/test_isa.sh [--cpu MODEL] [pytest args ...]      (default: --cpu EPYC-Rome tests/unit)
#
# MODEL: a qemu CPU model (`qemu-x86_64 -cpu help`); EPYC-Rome is AMD EPYC without AVX-512 (AVX2 + FMA3),
# the AVX2-only machine kind our speed goals are also checked on; Haswell-noTSX is an Intel AVX2 one.
# Tests that start a subprocess run it natively (qemu-user follows no exec), so the CLI's subprocess
# tests and the tritonserver tests check nothing extra here. ~5-10x slower than native.
set -euo pipefail
cd "$(dirname "$0")/.."
cpu=EPYC-Rome
if [ "${1:-}" = "--cpu" ]; then
  [ $# -ge 2 ] || { echo "test_isa.sh: --cpu needs a qemu CPU model (qemu-x86_64 -cpu help)" >&2; exit 2; }
  cpu=$2
  shift 2
fi
if ! command -v qemu-x86_64 >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get install -y -qq qemu-user >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq qemu-user >/dev/null)
  else
    echo "test_isa.sh: needs qemu-x86_64 (Debian package qemu-user); install it as root" >&2
    exit 2
  fi
fi
models=$(qemu-x86_64 -cpu help || true)  # (it exits 1 after listing)
if ! grep -qw -- "$cpu" <<<"$models"; then
  echo "test_isa.sh: unknown qemu CPU model '$cpu'; see qemu-x86_64 -cpu help" >&2
  exit 2
fi
bash scripts/setup.sh
run() { qemu-x86_64 -cpu "$cpu" .venv/bin/python "$@" 2> >(grep -v "TCG doesn't support requested feature" >&2); }
# What the emulated CPU offers, as the libraries see it (ONNX Runtime reads the same CPUID as NumPy).
run - <<'EOF'
import numpy as np, torch
from numpy._core._multiarray_umath import __cpu_features__ as f
have = [k for k in ("SSE42", "AVX", "FMA3", "AVX2", "AVX512F", "AVX512_SKX", "AVX512VNNI") if f.get(k)]
print(f"test_isa: numpy sees {' '.join(have)}; torch capability {torch.backends.cpu.get_cpu_capability()}")
EOF
[ $# -gt 0 ] || set -- tests/unit
run -m pytest -q -p no:cacheprovider "$@"
