"""scripts/with_isa.sh (CPUID trapped and edited by scripts/cpu_mask.c): the libraries see the smaller ISA,
faults that are not CPUID still reach the program's handlers, and bad levels are refused.

The oracle for "what the CPU has" is the CPUID instruction itself, run by a small C probe with and without
the mask; NumPy and PyTorch must report what the masked CPUID allows. Skipped where the CPU cannot trap CPUID
(no cpuid_fault in /proc/cpuinfo) or there is no C compiler."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WITH_ISA = ROOT / "scripts" / "with_isa.sh"


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


FLAGS = _cpu_flags()
pytestmark = pytest.mark.skipif(
    "cpuid_fault" not in FLAGS or shutil.which("cc") is None,
    reason="needs Linux CPUID faulting (cpuid_fault) and a C compiler")

PROBE_C = r"""
#include <cpuid.h>
#include <stdio.h>
int main(void) {
    unsigned a, b, c, d;
    __cpuid(1, a, b, c, d);
    printf("avx=%u fma=%u ", (c >> 28) & 1, (c >> 12) & 1);
    __cpuid_count(7, 0, a, b, c, d);
    printf("avx2=%u avx512f=%u avx512bw=%u amx_tile=%u\n", (b >> 5) & 1, (b >> 16) & 1, (b >> 30) & 1, (d >> 24) & 1);
    return 0;
}
"""


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("cpuid")
    (d / "probe.c").write_text(PROBE_C)
    subprocess.run(["cc", "-O1", "-o", str(d / "probe"), str(d / "probe.c")], check=True)
    return d / "probe"


def _run(level: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}  # PyTorch reads CPUID, not a pin
    return subprocess.run(["bash", str(WITH_ISA), level, *cmd], capture_output=True, text=True, check=check,
                          timeout=300, env=env)  # fmt: skip


def _bits(out: str) -> dict[str, int]:
    return {k: int(v) for k, v in (kv.split("=") for kv in out.split())}


def test_cpuid_masked_per_level(probe: Path) -> None:
    native = _bits(_run("none", str(probe)).stdout)
    # The unmasked probe agrees with the kernel's view of the CPU (it reads the same CPUID).
    assert native["avx2"] == ("avx2" in FLAGS) and native["avx512f"] == ("avx512f" in FLAGS)
    want = {"avx2": {"avx": 1, "fma": 1, "avx2": 1}, "avx": {"avx": 1, "fma": 0, "avx2": 0},
            "sse4": {"avx": 0, "fma": 0, "avx2": 0}}
    for level, kept in want.items():
        got = _bits(_run(level, str(probe)).stdout)
        assert got["avx512f"] == got["avx512bw"] == got["amx_tile"] == 0, (level, got)
        for k, v in kept.items():
            assert got[k] == (v and native[k]), (level, k, got)  # masking only takes features away


def test_libraries_take_the_masked_paths() -> None:
    code = ("import numpy, torch\n"
            "from numpy._core._multiarray_umath import __cpu_features__ as f\n"
            "print(int(f['AVX2']), int(f['AVX512F']), torch.backends.cpu.get_cpu_capability())\n")
    if "avx2" not in FLAGS:
        pytest.skip("this CPU has no AVX2 to keep")
    avx2, avx512, cap = _run("avx2", sys.executable, "-c", code).stdout.split()
    assert (avx2, avx512, cap) == ("1", "0", "AVX2")
    avx2, avx512, cap = _run("sse4", sys.executable, "-c", code).stdout.split()
    assert (avx2, avx512, cap) == ("0", "0", "DEFAULT")
    # the level a step curve records (`trtspec tune` re-measures a curve from another level)
    level = "import sys; sys.path.insert(0, sys.argv[1]); from builder.stages.engine import isa_level; print(isa_level())"
    assert _run("avx2", sys.executable, "-c", level, str(ROOT)).stdout.split() == ["x86-64-v3"]
    assert _run("none", sys.executable, "-c", level, str(ROOT)).stdout.split() == [
        "x86-64-v4" if {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"} <= FLAGS else "x86-64-v3"]


def test_other_faults_still_reach_their_handlers() -> None:
    """A real segfault under the mask: Python's faulthandler (installed after the mask's handler, so chained
    behind it) still reports it, and the process still dies of SIGSEGV."""
    code = "import ctypes, faulthandler; faulthandler.enable(); ctypes.string_at(8)"
    r = _run("avx2", sys.executable, "-c", code, check=False)
    assert r.returncode == -11, (r.returncode, r.stderr[-500:])
    assert "Fatal Python error: Segmentation fault" in r.stderr


def test_bad_level_is_refused() -> None:
    r = _run("avx3", "true", check=False)
    assert r.returncode == 2 and "avx2, avx, sse4, none" in r.stderr
