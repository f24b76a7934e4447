"""What the build cache holds and what to remove from it (`trtspec cache list | prune`).

An entry is one stage output, `<root>/<stage>/<key>/` (`builder.stages.store`). Its last use is the stamp a
build or pull leaves (`Store.touch`), else its manifest's creation time; entries without a readable manifest
are damaged (a build would replace them) and pruned whatever the criteria. Sizes count each file once per
entry, and the cache's total counts each inode once: stages hard-link what they pass on (an export's graphs
inside its engine folder), so removing an entry frees only the files no other entry shares — `plan` charges
an entry exactly those — and files also linked from outside the cache (`trtspec deploy` bundles link what
they can) are not counted at all: pruning would free nothing of them.

Order: least recently used first; among entries of one build (one stamp), downstream stages first (the repo
before the engine before the export …), so a size cap keeps what rebuilds slowest longest. An entry a running
build, server or generate run holds (`Store.hold`), or whose build lock is taken, is skipped and reported, and
removal is a rename into a temp folder then a delete: an interrupted prune leaves a `.tmp-*` folder, which
the next build or prune sweeps, never a half-deleted entry under its key.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterable

from builder.errors import UserError
from builder.stages.manifest import Manifest
from builder.stages.registry import stage_order
from builder.stages.store import Store

ORDER = stage_order()  # every backend's stages, upstream -> downstream
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SPANS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass(frozen=True, eq=False)
class Entry:
    stage: str
    key: str
    folder: Path
    bytes: int  # its files, each once
    files: dict[tuple[int, int], int]  # (device, inode) -> bytes, of its files no path outside the cache links
    used: float  # last use, seconds since the epoch
    created: str  # the manifest's, "" when damaged
    damaged: bool
    what: str = ""  # a few words on what it holds, from its manifest (`describe`)


def scan(root: str | Path) -> list[Entry]:
    """Every entry under `root` (stage folders with a key folder; temp, lock and stamp folders skipped). A file
    also linked from outside the cache (a deploy bundle's hard link) is left out of `files`: pruning frees
    nothing of it."""
    store, found = (
        Store(root),
        list[tuple[Path, str, str, "Manifest | None", dict[tuple[int, int], tuple[int, int, int]]]](),
    )
    base = Path(root)
    if not base.is_dir():
        return []
    paths: dict[tuple[int, int], int] = {}  # inode -> its paths inside the cache
    for stage_dir in sorted(p for p in base.iterdir() if p.is_dir() and p.name in ORDER):
        for folder in sorted(p for p in stage_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
            links = _files(folder)
            for ino, (_size, _nlink, n) in links.items():
                paths[ino] = paths.get(ino, 0) + n
            found.append((folder, stage_dir.name, folder.name, Manifest.read(folder), links))
    out = []
    for folder, stage, key, m, links in found:
        damaged = m is None or m.stage != stage or m.key != key or bool(m.problems(folder))
        used = store.last_used(stage, key)
        if used is None:
            used = _created(m) if m is not None and not damaged else folder.stat().st_mtime
        files = {ino: size for ino, (size, nlink, _n) in links.items() if nlink <= paths[ino]}
        out.append(
            Entry(
                stage,
                key,
                folder,
                sum(size for size, _l, _n in links.values()),
                files,
                used,
                "" if m is None else m.created,
                damaged,
                "" if m is None else describe(m),
            )
        )
    return out


def describe(m: Manifest) -> str:
    """What an entry holds, in a few words: the checkpoint it loaded, the method it exported, the engine's
    label and backend, the served model's name."""
    inputs, info = m.inputs or {}, m.info or {}

    def get(d: object, *path: str) -> object:
        for p in path:
            d = d.get(p) if isinstance(d, dict) else None
        return d

    parts = {
        "load": [get(inputs, "model", "checkpoint")],
        "quantize": [get(inputs, "quantization", "mode"), get(inputs, "quantization", "kv_cache")],
        "export": [get(inputs, "speculative", "method"), get(info, "variant")],
        "checkpoint": [get(inputs, "speculative", "method")],
        "engine": [get(info, "label"), get(inputs, "target", "backend") or get(inputs, "target", "device")],
        "repo": [get(inputs, "triton", "model_name")],
    }.get(m.stage, [])
    return " ".join(str(p) for p in parts if p not in (None, ""))


def _files(folder: Path) -> dict[tuple[int, int], tuple[int, int, int]]:
    """(device, inode) -> (bytes, links on disk, paths in `folder`) of its regular files."""
    files: dict[tuple[int, int], tuple[int, int, int]] = {}
    for dirpath, _dirs, names in os.walk(folder):
        for n in names:
            st = os.lstat(os.path.join(dirpath, n))
            if stat.S_ISREG(st.st_mode):
                ino = (st.st_dev, st.st_ino)
                files[ino] = (st.st_size, st.st_nlink, files[ino][2] + 1 if ino in files else 1)
    return files


def _created(m: Manifest) -> float:
    try:
        return datetime.fromisoformat(m.created).timestamp()
    except ValueError:
        return 0.0


def unique_bytes(entries: Iterable[Entry]) -> int:
    """Bytes on disk of these entries together: each inode once, files also linked from outside left out."""
    sizes: dict[tuple[int, int], int] = {}
    for e in entries:
        sizes.update(e.files)
    return sum(sizes.values())


def plan(
    entries: list[Entry],
    *,
    older_than: float | None = None,
    max_bytes: int | None = None,
    stages: Iterable[str] | None = None,
    keep: Iterable[str] = (),
    now: float | None = None,
) -> list[Entry]:
    """The entries to remove, in removal order: damaged ones, those unused for more than `older_than` seconds,
    then least recently used ones until the cache's unique bytes are at most `max_bytes` (`stages`: only
    entries of these stages are candidates, and none named in `keep` ("stage/key"); the others still count
    towards the size)."""
    now = time.time() if now is None else now
    allowed, kept = set(ORDER) if stages is None else set(stages), set(keep)
    order = by_lru(e for e in entries if e.stage in allowed and f"{e.stage}/{e.key}" not in kept)
    chosen = [e for e in order if e.damaged or (older_than is not None and now - e.used > older_than)]
    if max_bytes is not None:
        users: dict[tuple[int, int], int] = {}
        for e in entries:
            for f in e.files:
                users[f] = users.get(f, 0) + 1
        total = unique_bytes(entries)

        def drop(e: Entry) -> int:  # bytes freed by removing e now
            freed = 0
            for f, size in e.files.items():
                users[f] -= 1
                freed += size if users[f] == 0 else 0
            return freed

        for e in chosen:
            total -= drop(e)
        for e in order:
            if total <= max_bytes:
                break
            if e not in chosen:
                chosen.append(e)
                total -= drop(e)
    return chosen


def by_lru(entries: Iterable[Entry]) -> list[Entry]:
    """Least recently used first; among one build's entries (one stamp) downstream stages first."""
    return sorted(entries, key=lambda e: (e.used, -ORDER.index(e.stage)))


def remove(root: str | Path, entries: list[Entry], say: Callable[[str], None] = lambda _m: None) -> dict[str, list]:
    """Remove `entries` (a `plan`); {"removed": [...], "busy": [...]} of "stage/key" names."""
    store, done, busy = Store(root), [], []
    for e in entries:
        name = f"{e.stage}/{e.key}"
        with store.claim(e.stage, e.key) as free:
            if not free:
                busy.append(name)
                say(f"skip {name}: in use (a build, server or generate run holds it)")
                continue
            if e.folder.exists():
                tmp = e.folder.parent / f".tmp-{e.key}-{os.getpid()}-{time.monotonic_ns()}"
                os.replace(e.folder, tmp)  # off its key at once; the delete may take a while
                shutil.rmtree(tmp, ignore_errors=True)
            store.unstamp(e.stage, e.key)
        done.append(name)
        say(f"removed {name} ({human(e.bytes)})")
    for stage in ORDER:
        if (Path(root) / stage).is_dir():
            store.sweep(stage)
    return {"removed": done, "busy": busy}


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def parse_size(text: str, field: str = "--max-size") -> int:
    """'500M', '20G', '1.5T', '1024' (bytes; binary units) -> bytes; UserError otherwise."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(?:i?B)?\s*", text)
    if m is None:
        raise UserError(
            f"cannot read size {text!r}",
            field=field,
            allowed="a number with an optional K, M, G or T suffix (binary units), e.g. 500M, 20G",
        )
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def parse_age(text: str, field: str = "--older-than") -> float:
    """'30m', '12h', '14d', '2w' -> seconds; UserError otherwise."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([mhdw])\s*", text)
    if m is None:
        raise UserError(
            f"cannot read age {text!r}", field=field, allowed="a number with a unit m, h, d or w, e.g. 12h, 14d"
        )
    return float(m.group(1)) * _SPANS[m.group(2)]


__all__ = ["Entry", "ORDER", "by_lru", "human", "parse_age", "parse_size", "plan", "remove", "scan", "unique_bytes"]
