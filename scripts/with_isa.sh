#!/usr/bin/env bash
# Run a command natively, at full speed, on a smaller x86 ISA than this CPU has: CPUID is trapped and edited
# (scripts/cpu_mask.c), so ONNX Runtime's MLAS, NumPy and PyTorch pick the kernels they would pick on that
# CPU, in this process and in every process it starts (tritonserver, the CLI's subprocesses).
#
#   scripts/with_isa.sh LEVEL COMMAND [ARGS ...]
#
# LEVEL: avx2 (AVX2 + FMA3, no AVX-512, AMX, AVX-VNNI: the AVX2-only AMD EPYC the speed goals are also
# checked on), avx (no AVX2/FMA/F16C either), sse4 (no AVX), none (unmasked, for side-by-side runs).
# Needs a C compiler, and either Linux CPUID faulting (/proc/cpuinfo flag cpuid_fault: Intel since Ivy Bridge,
# most KVM guests) or, without it (a Firecracker microVM, some AMD hosts), binutils' objdump: then only patched
# copies of ONNX Runtime, GenAI and NumPy/OpenBLAS trap their CPUID (scripts/isa_patch.py; made once, cached,
# put first on PYTHONPATH), PyTorch is pinned by ATEN_CPU_CAPABILITY, and other native code (oneDNN inside
# PyTorch, tritonserver) sees the real CPU. WITH_ISA_MODE=patch picks that mode where faulting exists too.
# Unlike scripts/test_isa.sh (qemu), the timings are real: this CPU's cores, caches and memory running that
# ISA's code paths.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: with_isa.sh LEVEL COMMAND [ARGS ...]   (LEVEL: avx2, avx, sse4, none)"
[ $# -ge 2 ] || { echo "with_isa.sh: $usage" >&2; exit 2; }
level=$1
shift
no_avx512="-AVX512F,-AVX512DQ,-AVX512BW,-AVX512VL,-AVX512CD,-AVX512ER,-AVX512PF,-AVX_VNNI"
case "$level" in  # glibc's own string functions, hidden as cpu_mask.c hides the rest (each level below the last)
  avx2) tunables="$no_avx512" ;;
  avx) tunables="$no_avx512,-AVX2,-FMA,-F16C" ;;
  sse4) tunables="$no_avx512,-AVX2,-FMA,-F16C,-AVX" ;;
  none)  # an outer with_isa.sh mask ends here (exec restores the real CPUID; the patched copies leave the path)
    if [ -n "${WITH_ISA_SITE:-}" ]; then
      PYTHONPATH=$(tr ':' '\n' <<<"${PYTHONPATH:-}" | { grep -vxF "$WITH_ISA_SITE" || true; } | paste -sd: -)
      export PYTHONPATH
      [ -n "$PYTHONPATH" ] || unset PYTHONPATH
      [ -z "${WITH_ISA_ATEN:-}" ] || unset ATEN_CPU_CAPABILITY
    fi
    exec env -u CPU_MASK -u CPU_MASK_TRAPS -u WITH_ISA_SITE -u WITH_ISA_ATEN "$@" ;;
  *) echo "with_isa.sh: LEVEL '$level' is not one of avx2, avx, sse4, none" >&2; exit 2 ;;
esac
mode=${WITH_ISA_MODE:-}
case "$mode" in
  "") if grep -qw cpuid_fault /proc/cpuinfo; then mode=fault; else mode=patch; fi ;;
  fault|patch) ;;
  *) echo "with_isa.sh: WITH_ISA_MODE '$mode' is not one of fault, patch" >&2; exit 2 ;;
esac
if [ "$mode" = fault ] && ! grep -qw cpuid_fault /proc/cpuinfo; then
  echo "with_isa.sh: this CPU/kernel cannot trap CPUID (no cpuid_fault in /proc/cpuinfo); WITH_ISA_MODE=patch or scripts/test_isa.sh (qemu)" >&2
  exit 2
fi
src="$root/scripts/cpu_mask.c"
sum=$(sha256sum "$src" | cut -c1-12)
dir="${XDG_CACHE_HOME:-$HOME/.cache}/trtspec/tools"
lib="$dir/cpu_mask-$sum.so"
if [ ! -f "$lib" ]; then
  command -v cc >/dev/null 2>&1 || { echo "with_isa.sh: needs a C compiler (cc) to build $src" >&2; exit 2; }
  mkdir -p "$dir"
  tmp=$(mktemp "$dir/.cpu_mask.XXXXXX")
  cc -O2 -shared -fPIC -Wall -Wextra -o "$tmp" "$src" -ldl
  mv -f "$tmp" "$lib"
fi
if [ "$mode" = patch ]; then
  command -v objdump >/dev/null 2>&1 || { echo "with_isa.sh: no CPUID faulting here, and patching the libraries needs objdump (Debian package binutils)" >&2; exit 2; }
  py="$root/.venv/bin/python"
  [ -x "$py" ] || py=python3
  site="$dir/isa-site-$(printf '%s' "$py" | sha256sum | cut -c1-8)"  # one per interpreter (its packages)
  if [ "${WITH_ISA_SITE:-}" != "$site" ]; then  # (an outer patch-mode run made it)
    echo "with_isa.sh: no CPUID faulting here: patched copies of ONNX Runtime, GenAI and NumPy trap theirs ($site)" >&2
    "$py" "$root/scripts/isa_patch.py" site "$site" >/dev/null
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  fi
  export CPU_MASK_TRAPS=1 WITH_ISA_SITE="$site"
  if [ -z "${ATEN_CPU_CAPABILITY:-}" ] || [ -n "${WITH_ISA_ATEN:-}" ]; then
    case "$level" in avx2) ATEN_CPU_CAPABILITY=avx2 ;; *) ATEN_CPU_CAPABILITY=default ;; esac
    export ATEN_CPU_CAPABILITY WITH_ISA_ATEN=1
  fi
else
  unset CPU_MASK_TRAPS
fi
export CPU_MASK="$level"
export GLIBC_TUNABLES="glibc.cpu.hwcaps=$tunables${GLIBC_TUNABLES:+:$GLIBC_TUNABLES}"
export LD_PRELOAD="$lib${LD_PRELOAD:+:$LD_PRELOAD}"
exec "$@"
