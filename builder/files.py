"""Small filesystem helpers shared by the build stages and the repository emitter."""

from __future__ import annotations

import hashlib
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


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """The file's sha256, read in 1 MiB blocks (weights files are large)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()
