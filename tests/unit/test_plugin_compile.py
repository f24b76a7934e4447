"""The Triton kernels compile to cubin for sm_90 (H100 / H200) on this CPU-only machine.

Triton's wheel bundles ptxas, so the real compiler runs without a GPU. Runs in a subprocess because
the interpreter tests set TRITON_INTERPRET=1 in this process, which turns @triton.jit off."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

# find_spec, not importorskip: importing triton in this process before test_plugin_kernel.py turns
# its interpreter on would leave triton in compiled mode for those tests.
if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed", allow_module_level=True)
REPO = Path(__file__).resolve().parents[2]


def test_kernels_compile_for_sm90():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    run = subprocess.run(
        [sys.executable, "-m", "plugins.tree_verify.compile_check", "--arch", "90"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    lines = [line for line in run.stdout.splitlines() if "cubin" in line]
    assert len(lines) == 3 * 3 * 2, run.stdout  # kernels × logits dtypes × modes
