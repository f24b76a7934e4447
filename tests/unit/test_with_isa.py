"""scripts/with_isa.sh (CPUID edited by scripts/cpu_mask.c: trapped by Linux's CPUID faulting, or, without it,
at patched sites in copies of the kernel-picking libraries, scripts/isa_patch.py): the libraries see the
smaller ISA, ONNX Runtime computes what it computes on a CPU that has only that ISA, faults and traps that are
not ours still reach the program's handlers, and bad levels are refused.

Oracles: for "what the CPU has", the CPUID and XGETBV instructions themselves, run by a small C probe with and
without the mask; NumPy and PyTorch must report what the masked CPUID allows. For "the kernels ONNX Runtime
took", qemu-x86_64 with a CPU model that has only that ISA (EPYC-Rome: AVX2 + FMA3; SandyBridge: AVX, no FMA):
MLAS's reductions sum in as many lanes as the ISA's vectors hold, so a Softmax's bits tell the kernels apart,
and the masked run must give qemu's bits. Each mode runs where it can (faulting: cpuid_fault in /proc/cpuinfo;
patching: objdump); all need a C compiler."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WITH_ISA = ROOT / "scripts" / "with_isa.sh"
ISA_PATCH = ROOT / "scripts" / "isa_patch.py"


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
MODES = [
    pytest.param("fault", marks=pytest.mark.skipif("cpuid_fault" not in FLAGS, reason="no CPUID faulting here")),
    pytest.param("patch", marks=pytest.mark.skipif(shutil.which("objdump") is None, reason="needs objdump")),
]
pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")

PROBE_C = r"""
#include <cpuid.h>
#include <stdio.h>
int main(void) {
    unsigned a, b, c, d, lo, hi;
    __cpuid(1, a, b, c, d);
    printf("avx=%u fma=%u ", (c >> 28) & 1, (c >> 12) & 1);
    __cpuid_count(7, 0, a, b, c, d);
    printf("avx2=%u avx512f=%u avx512bw=%u amx_tile=%u ", (b >> 5) & 1, (b >> 16) & 1, (b >> 30) & 1, (d >> 24) & 1);
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    printf("xcr0_avx512=%u\n", (lo >> 5) & 7);
    return 0;
}
"""

# One Softmax over rows longer than any vector: its sums run in the ISA's lanes (MLAS), so its bits name them.
SOFTMAX = """
import hashlib, numpy as np, onnxruntime as ort
from onnx import helper, TensorProto
io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [8, 4099]) for n in ("x", "y")]
g = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], "g", io[:1], io[1:])
so = ort.SessionOptions(); so.intra_op_num_threads = 1
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
x = (np.arange(8 * 4099, dtype=np.float32).reshape(8, 4099) * 0.37) % 11.3
print(hashlib.sha256(s.run(None, {"x": x})[0].tobytes()).hexdigest())
"""


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The probe as built, and a copy with its CPUID / XGETBV patched to trap (what isa_patch.py does to the
    libraries in the patching mode)."""
    d = tmp_path_factory.mktemp("cpuid")
    (d / "probe.c").write_text(PROBE_C)
    subprocess.run(["cc", "-O1", "-o", str(d / "probe"), str(d / "probe.c")], check=True)
    out = {"fault": d / "probe"}
    if shutil.which("objdump"):
        r = subprocess.run(
            [sys.executable, str(ISA_PATCH), "file", str(d / "probe"), str(d / "probe.patched")],
            capture_output=True,
            text=True,
            check=True,
        )
        assert r.stdout.split() == ["3"], r.stdout  # two CPUIDs and one XGETBV
        out["patch"] = d / "probe.patched"
    return out


def _run(level: str, *cmd: str, mode: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "WITH_ISA_MODE")}
    env["WITH_ISA_MODE"] = mode  # (PyTorch reads CPUID in the faulting mode, the pin in the patching one)
    return subprocess.run(
        ["bash", str(WITH_ISA), level, *cmd], capture_output=True, text=True, check=check, timeout=600, env=env
    )


def _bits(out: str) -> dict[str, int]:
    return {k: int(v) for k, v in (kv.split("=") for kv in out.split())}


@pytest.mark.parametrize("mode", MODES)
def test_cpuid_masked_per_level(probe: dict[str, Path], mode: str) -> None:
    native = _bits(_run("none", str(probe["fault"]), mode=mode).stdout)
    # The unmasked probe agrees with the kernel's view of the CPU (it reads the same CPUID).
    assert native["avx2"] == ("avx2" in FLAGS) and native["avx512f"] == ("avx512f" in FLAGS)
    want = {
        "avx2": {"avx": 1, "fma": 1, "avx2": 1},
        "avx": {"avx": 1, "fma": 0, "avx2": 0},
        "sse4": {"avx": 0, "fma": 0, "avx2": 0},
    }
    for level, kept in want.items():
        got = _bits(_run(level, str(probe[mode]), mode=mode).stdout)
        assert got["avx512f"] == got["avx512bw"] == got["amx_tile"] == 0, (level, got)
        for k, v in kept.items():
            assert got[k] == (v and native[k]), (level, k, got)  # masking only takes features away
        if mode == "patch":  # XGETBV is patched too: the OS's AVX-512 state is hidden as well
            assert got["xcr0_avx512"] == 0, (level, got)


@pytest.mark.parametrize("mode", MODES)
def test_libraries_take_the_masked_paths(mode: str) -> None:
    code = (
        "import numpy, torch\n"
        "from numpy._core._multiarray_umath import __cpu_features__ as f\n"
        "print(int(f['AVX2']), int(f['AVX512F']), torch.backends.cpu.get_cpu_capability())\n"
    )
    if "avx2" not in FLAGS:
        pytest.skip("this CPU has no AVX2 to keep")
    avx2, avx512, cap = _run("avx2", sys.executable, "-c", code, mode=mode).stdout.split()
    assert (avx2, avx512, cap) == ("1", "0", "AVX2")
    avx2, avx512, cap = _run("sse4", sys.executable, "-c", code, mode=mode).stdout.split()
    assert (avx2, avx512, cap) == ("0", "0", "DEFAULT")
    # the level a step curve records (`trtspec tune` re-measures a curve from another level)
    level = "import sys; sys.path.insert(0, sys.argv[1]); from builder.engines.step_curve import isa_level; print(isa_level())"
    assert _run("avx2", sys.executable, "-c", level, str(ROOT), mode=mode).stdout.split() == ["x86-64-v3"]
    assert _run("none", sys.executable, "-c", level, str(ROOT), mode=mode).stdout.split() == [
        "x86-64-v4" if {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"} <= FLAGS else "x86-64-v3"
    ]
    # nested: `none` inside a masked run is the real CPU again (the patched copies leave PYTHONPATH)
    where = "import numpy, os; print(os.path.dirname(numpy.__file__))"
    assert (
        _run("avx2", "bash", str(WITH_ISA), "none", sys.executable, "-c", where, mode=mode).stdout.strip()
        == _run("none", sys.executable, "-c", where, mode=mode).stdout.strip()
    )


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.skipif(shutil.which("qemu-x86_64") is None, reason="needs qemu-x86_64 (Debian package qemu-user)")
def test_onnxruntime_computes_as_on_the_smaller_cpu(mode: str) -> None:
    native = _run("none", sys.executable, "-c", SOFTMAX, mode=mode).stdout.strip()
    for level, model in (("avx2", "EPYC-Rome"), ("avx", "SandyBridge")):
        emulated = subprocess.run(
            ["qemu-x86_64", "-cpu", model, sys.executable, "-c", SOFTMAX],
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        ).stdout.strip()
        masked = _run(level, sys.executable, "-c", SOFTMAX, mode=mode).stdout.strip()
        assert masked == emulated, (level, model)
        if level == "avx2" and "avx512f" in FLAGS:  # (the check can fail: other kernels, other bits)
            assert masked != native


def test_other_faults_still_reach_their_handlers() -> None:
    """A real segfault under the mask: Python's faulthandler (installed after the mask's handler, so chained
    behind it) still reports it, and the process still dies of SIGSEGV."""
    if "cpuid_fault" not in FLAGS:
        pytest.skip("no CPUID faulting here (the patching mode leaves SIGSEGV alone)")
    code = "import ctypes, faulthandler; faulthandler.enable(); ctypes.string_at(8)"
    r = _run("avx2", sys.executable, "-c", code, mode="fault", check=False)
    assert r.returncode == -11, (r.returncode, r.stderr[-500:])
    assert "Fatal Python error: Segmentation fault" in r.stderr


@pytest.mark.skipif(shutil.which("objdump") is None, reason="needs objdump")
def test_other_traps_still_reach_their_handlers() -> None:
    """The patching mode's SIGTRAP handler passes on traps that are not its sites: to the program's handler
    (installed after it, so chained behind it), else the default action (the process dies of SIGTRAP)."""
    caught = "import os, signal; signal.signal(signal.SIGTRAP, lambda *a: print('caught')); os.kill(os.getpid(), signal.SIGTRAP)"
    assert _run("avx2", sys.executable, "-c", caught, mode="patch").stdout.strip() == "caught"
    r = _run(
        "avx2",
        sys.executable,
        "-c",
        "import os, signal; os.kill(os.getpid(), signal.SIGTRAP)",
        mode="patch",
        check=False,
    )
    assert r.returncode == -5, (r.returncode, r.stderr[-500:])


def test_bad_level_is_refused() -> None:
    r = _run("avx3", "true", mode="patch", check=False)
    assert r.returncode == 2 and "avx2, avx, sse4, none" in r.stderr
    r = _run("avx2", "true", mode="neither", check=False)
    assert r.returncode == 2 and "fault, patch" in r.stderr
