"""Scratch folders for module-level caches in tests (lru_cache'd builders shared by many tests, where pytest's
tmp_path does not fit): created under the system temp dir and removed when the test process exits."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path


def scratch_dir(prefix: str) -> Path:
    """A new empty folder, removed (with everything in it) at interpreter exit."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, True)
    return path
