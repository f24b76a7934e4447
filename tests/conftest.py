"""Shared test fixtures."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

# Triton kernels run in the interpreter on CPU-only machines. It must be set before anything
# imports triton; on a GPU host (an NVIDIA device node) the compiled kernels are tested instead.
if not Path("/dev/nvidiactl").exists():
    os.environ.setdefault("TRITON_INTERPRET", "1")

REPO = Path(__file__).resolve().parents[1]

# Exports and other build outputs go to a per-run temporary cache, never into the working tree; removed
# when the run ends (a cache given in the environment is left alone).
if "TRTSPEC_CACHE_DIR" not in os.environ:
    os.environ["TRTSPEC_CACHE_DIR"] = _CACHE = tempfile.mkdtemp(prefix="trtspec-test-cache-")
    atexit.register(shutil.rmtree, _CACHE, True)


@pytest.fixture
def repo() -> Path:
    return REPO


def pytest_configure(config) -> None:
    """One torch thread: the test models are tiny, and on a loaded 2-core machine extra threads only
    fight each other (a tiny forward measured ~40× slower with 2 threads under load)."""
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(1)
