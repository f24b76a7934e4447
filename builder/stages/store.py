"""The stage cache: `<root>/<stage>/<key>/`, complete or absent, never half-written.

A stage writes into `<root>/<stage>/.tmp-<key>-<pid>` and the folder is renamed to its key only after
its manifest is written (rename is atomic on one filesystem). A build killed at any moment leaves at
most a temp folder, which the next build removes once its owner is gone. `lock` serialises builds of
one stage key across processes (flock: released by the kernel when a process dies).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from pathlib import Path
from typing import Callable, Iterator

from builder.stages.manifest import MANIFEST, Manifest


class Store:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def dir(self, stage: str, key: str) -> Path:
        return self.root / stage / key

    def hit(self, stage: str, key: str) -> Manifest | None:
        """The manifest of a complete, unchanged output for (stage, key), else None."""
        folder = self.dir(stage, key)
        m = Manifest.read(folder)
        if m is None or m.stage != stage or m.key != key or m.problems(folder):
            return None
        return m

    @contextlib.contextmanager
    def lock(self, stage: str, key: str, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
        """Exclusive across processes for one stage key; calls on_wait once if it has to wait."""
        locks = self.root / ".locks"
        locks.mkdir(parents=True, exist_ok=True)
        with open(locks / f"{stage}-{key}.lock", "w") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if on_wait is not None:
                    on_wait()
                fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def staging(self, stage: str, key: str) -> Iterator[Path]:
        """A fresh temp folder; on success (manifest written inside) it becomes the output folder."""
        parent = self.root / stage
        parent.mkdir(parents=True, exist_ok=True)
        self.sweep(stage)
        tmp = parent / f".tmp-{key}-{os.getpid()}-{time.monotonic_ns()}"
        tmp.mkdir()
        try:
            yield tmp
            if not (tmp / MANIFEST).is_file():
                raise RuntimeError(f"stage {stage} wrote no {MANIFEST}")
            final = self.dir(stage, key)
            if final.exists():  # a stale or damaged output (hit() refused it): replace it
                shutil.rmtree(final)
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def sweep(self, stage: str) -> None:
        """Remove temp folders left by builds that no longer run (killed, crashed)."""
        for tmp in (self.root / stage).glob(".tmp-*"):
            parts = tmp.name.split("-")
            pid = int(parts[-2]) if len(parts) >= 4 and parts[-2].isdigit() else None
            if pid is None or not _alive(pid) or pid == os.getpid():
                shutil.rmtree(tmp, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
