#!/usr/bin/env bash
# The test suite on another x86 CPU's code paths: ONNX Runtime's MLAS kernels, NumPy's and PyTorch's dispatch
# all take that CPU's paths (ATEN_CPU_CAPABILITY covers PyTorch only).
#
#   scripts/test_isa.sh --mask LEVEL [pytest args ...]       natively, CPUID edited (scripts/with_isa.sh)
#   scripts/test_isa.sh [--cpu MODEL] [pytest args ...]      emulated by qemu (default: --cpu EPYC-Rome)
#                                                            (pytest args default to tests/unit)
#
# --mask LEVEL (avx2, avx, sse4) runs at native speed, subprocesses included, where the CPU can trap CPUID
# (/proc/cpuinfo flag cpuid_fault), and elsewhere through patched copies of ONNX Runtime, GenAI and NumPy
# (scripts/with_isa.sh says what that mode reaches); it can only take features away. qemu needs neither but
# runs 5-100x slower, and is for correctness only: emulated time says nothing about speed.
#
# MODEL: a qemu CPU model (`qemu-x86_64 -cpu help`); EPYC-Rome is AMD EPYC without AVX-512 (AVX2 + FMA3),
# the AVX2-only machine kind our speed goals are also checked on; Haswell-noTSX is an Intel AVX2 one.
# Tests that start a subprocess run it natively (qemu-user follows no exec), so the CLI's subprocess
# tests and the tritonserver tests check nothing extra here. ~5-10x slower than native.
set -euo pipefail
cd "$(dirname "$0")/.."
probe='
import numpy as np, torch
from numpy._core._multiarray_umath import __cpu_features__ as f
have = [k for k in ("SSE42", "AVX", "FMA3", "AVX2", "AVX512F", "AVX512_SKX", "AVX512VNNI") if f.get(k)]
print(f"test_isa: numpy sees {chr(32).join(have)}; torch capability {torch.backends.cpu.get_cpu_capability()}")
'
if [ "${1:-}" = "--mask" ]; then
  [ $# -ge 2 ] || { echo "test_isa.sh: --mask needs a level: avx2, avx or sse4" >&2; exit 2; }
  level=$2
  shift 2
  case "$level" in avx2|avx|sse4) ;; *) echo "test_isa.sh: --mask level '$level' is not one of avx2, avx, sse4" >&2; exit 2 ;; esac
  bash scripts/setup.sh
  scripts/with_isa.sh "$level" .venv/bin/python -c "$probe"
  [ $# -gt 0 ] || set -- tests/unit
  exec scripts/with_isa.sh "$level" .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
fi
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
run -c "$probe"
[ $# -gt 0 ] || set -- tests/unit
run -m pytest -q -p no:cacheprovider "$@"
