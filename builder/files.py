"""Small filesystem helpers shared by the build stages and the repository emitter."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def link_or_copy(src: Path, dst: Path) -> None:
    """Place `src` at `dst`: a hard link where the filesystem allows (no copy of large weights), else a copy."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
