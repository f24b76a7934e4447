"""The stage cache: `<root>/<stage>/<key>/`, complete or absent, never half-written.

A stage writes into `<root>/<stage>/.tmp-<key>-<pid>` and the folder is renamed to its key only after
its manifest is written (rename is atomic on one filesystem). A build killed at any moment leaves at
most a temp folder, which the next build removes once its owner is gone. `lock` serialises builds of
one stage key across processes (flock: released by the kernel when a process dies).

Use, for `trtspec cache prune` (`builder.stages.prune`): `touch` stamps an entry's last use
(`<root>/.used/<stage>-<key>`, its mtime; entries themselves stay as built), and `hold` marks an entry in use
by this process until it exits (a shared flock on `<root>/.locks/<stage>-<key>.use`): a build holds every
entry it reaches, so a server, a generate run or a build reading an upstream folder keeps its entries.
`claim` is prune's side: both locks of an entry, exclusive, or nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from pathlib import Path
from typing import IO, Callable, Iterator

from builder.stages.manifest import MANIFEST, Manifest

USED = ".used"
LOCKS = ".locks"
MAX_HOLDS = 512  # a process using more entries (a test session) keeps the newest marked
_HELD: dict[str, IO[str]] = {}  # use-lock path -> its open file (the shared flock lives as long as it does)


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
        with open(self._lock_path(stage, key, "lock"), "w") as fh:
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

    def _lock_path(self, stage: str, key: str, kind: str) -> Path:
        locks = self.root / LOCKS
        locks.mkdir(parents=True, exist_ok=True)
        return locks / f"{stage}-{key}.{kind}"

    def _stamp(self, stage: str, key: str) -> Path:
        return self.root / USED / f"{stage}-{key}"

    def touch(self, stage: str, key: str, when: float | None = None) -> None:
        """Stamp a use of (stage, key) at `when` (seconds since the epoch; now when None). Best effort: a
        read-only cache (a shared, pulled one) is used untracked."""
        stamp = self._stamp(stage, key)
        try:
            stamp.parent.mkdir(parents=True, exist_ok=True)
            stamp.touch()
            if when is not None:
                os.utime(stamp, (when, when))
        except OSError:
            pass

    def last_used(self, stage: str, key: str) -> float | None:
        try:
            return self._stamp(stage, key).stat().st_mtime
        except OSError:
            return None

    def unstamp(self, stage: str, key: str) -> None:
        self._stamp(stage, key).unlink(missing_ok=True)

    def hold(self, stage: str, key: str) -> None:
        """Mark (stage, key) in use until this process exits; waits only while a prune removes that entry.
        Best effort, as `touch`: nobody prunes a cache this process cannot write."""
        try:
            path = self._lock_path(stage, key, "use")
            name = str(path.resolve())
            if name in _HELD:
                return
            fh = open(path, "a")
        except OSError:
            return
        fcntl.flock(fh, fcntl.LOCK_SH)
        if len(_HELD) >= MAX_HOLDS:
            _HELD.pop(next(iter(_HELD))).close()
        _HELD[name] = fh

    @contextlib.contextmanager
    def claim(self, stage: str, key: str) -> Iterator[bool]:
        """Both locks of (stage, key), exclusive, without waiting: True inside when no build or user holds it."""
        with (
            open(self._lock_path(stage, key, "lock"), "w") as build,
            open(self._lock_path(stage, key, "use"), "a") as use,
        ):
            got: list = []
            try:
                for fh in (build, use):
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    got.append(fh)
            except BlockingIOError:
                pass
            try:
                yield len(got) == 2
            finally:
                for fh in got:
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
