"""`trtspec pull INDEX RECIPE`: restore one published entry's stages into a build cache, hashes checked.

The layout and the guarantees are `builder.ci.publish`'s. Each stage is fetched into the cache's own
staging folder (`Store.staging`, under the stage key's lock) and renamed into `<cache>/<stage>/<key>/` only
when every file's sha256 and size are the index's and the manifest's: a corrupted or missing blob raises a
UserError naming the file, and nothing is installed for that stage. So does a hand-off of another format (an
entry published by another trtspec, `builder.handoffs.check_folder`), naming the rebuild command. A stage already
complete in the cache (every file's sha256 as its manifest says) is left as it is.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from pathlib import Path
from typing import Any, Callable

from builder.ci.publish import CHUNK, INDEX, Target, blob_rel, checked_stage, find_entry, read_index
from builder.errors import UserError
from builder.handoffs import check_folder
from builder.stages.manifest import MANIFEST, Manifest
from builder.stages.store import Store

Say = Callable[[str], None]


def open_index(uri: str) -> tuple[Target, str]:
    """The target holding the index and the index's path on it (INDEX may name the file or its folder)."""
    t = Target(uri, create=False)
    if t.root.endswith("/" + INDEX) or t.root == INDEX:
        path, t.root = t.root, posixpath.dirname(t.root) or "/"
    else:
        path = t.path(INDEX)
    return t, path


def pull(index_uri: str, recipe: str, cache_dir: str | Path, say: Say = lambda _m: None) -> dict[str, Any]:
    """Restore the entry `recipe` names (id, recipe path or file name) into `cache_dir`; a report."""
    t, index_path = open_index(index_uri)
    try:
        index = read_index(t, index_path)
    except OSError as exc:
        raise UserError(f"cannot read {index_uri}: {exc}", field="INDEX") from None
    if index is None:
        raise UserError(f"no publish index at {index_uri}", field="INDEX")
    entry_id, entry = find_entry(index, recipe)
    store = Store(cache_dir)
    rows: list[dict[str, Any]] = []
    for stage in entry.get("stages") or []:
        name, key, files = checked_stage(stage)
        folder = store.dir(name, key)
        have = Manifest.read(folder)
        if have is not None and have.stage == name and have.key == key and not have.problems(folder, hashes=True):
            rows.append({"stage": name, "key": key, "status": "present", "output": str(folder)})
            store.touch(name, key)
            continue
        say(f"pull {name}/{key} ({len(files)} files)")
        with store.lock(name, key), store.staging(name, key) as tmp:
            raw = _fetch_bytes(t, stage["manifest_sha256"], f"{name}/{key}/{MANIFEST}", index_uri)
            _same_outputs(raw, files, name, key)
            for f in files:
                _fetch_file(t, f, tmp / f["path"], f"{name}/{key}/{f['path']}", index_uri)
            check_folder(tmp, entry.get("recipe"))  # a hand-off of another format is refused, nothing installed
            (tmp / MANIFEST).write_bytes(raw)
        store.touch(name, key)
        rows.append(
            {
                "stage": name,
                "key": key,
                "status": "restored",
                "files": len(files),
                "bytes": sum(int(f["bytes"]) for f in files),
                "output": str(folder),
            }
        )
    return {
        "index": index_uri,
        "entry": entry_id,
        "cache_dir": str(cache_dir),
        "stages": rows,
        "keys_here": keys_here(entry, rows),
    }


def _corrupt(display: str, index_uri: str, what: str) -> UserError:
    return UserError(
        f"{display}: {what}; the published file is corrupted, nothing was installed for its stage", location=index_uri
    )


def _fetch_bytes(t: Target, sha: str, display: str, index_uri: str) -> bytes:
    try:
        data = t.fs.cat_file(t.path(blob_rel(sha)))
    except FileNotFoundError:
        raise _corrupt(display, index_uri, f"blob {blob_rel(sha)} is missing") from None
    got = hashlib.sha256(data).hexdigest()
    if got != sha:
        raise _corrupt(display, index_uri, f"sha256 {got[:16]}…, the index says {sha[:16]}…")
    return data


def _fetch_file(t: Target, f: dict[str, Any], dst: Path, display: str, index_uri: str) -> None:
    sha, size = str(f["sha256"]), int(f["bytes"])
    dst.parent.mkdir(parents=True, exist_ok=True)
    h, n = hashlib.sha256(), 0
    try:
        with t.fs.open(t.path(blob_rel(sha)), "rb") as src, open(dst, "wb") as out:
            while block := src.read(CHUNK):
                h.update(block)
                n += len(block)
                out.write(block)
    except FileNotFoundError:
        raise _corrupt(display, index_uri, f"blob {blob_rel(sha)} is missing") from None
    if n != size or h.hexdigest() != sha:
        raise _corrupt(
            display,
            index_uri,
            f"{n} bytes with sha256 {h.hexdigest()[:16]}…, the index says {size} bytes with {sha[:16]}…",
        )


def _same_outputs(raw: bytes, files: list[dict[str, Any]], name: str, key: str) -> None:
    try:
        m = json.loads(raw)
        outputs = {(o["path"], int(o["bytes"]), o["sha256"]) for o in m["outputs"]}
        same = m["stage"] == name and m["key"] == key
    except (ValueError, KeyError, TypeError):
        raise UserError(f"{name}/{key}: the published manifest is not a stage manifest") from None
    if not same or outputs != {(f["path"], int(f["bytes"]), f["sha256"]) for f in files}:
        raise UserError(f"{name}/{key}: the index and the published manifest list different files")


def keys_here(entry: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Whether `trtspec build` of the entry's recipe on this machine would find the pulled stages cached:
    its stage keys planned here against the pulled ones (keys hash checkpoint files' identity, tools, GPU)."""
    from builder.recipe.loader import load_recipe
    from builder.stages.keys import plan_stages

    try:
        planned = {s.name: s.key for s in plan_stages(load_recipe(entry["recipe"], entry.get("overrides") or ()))}
    except (UserError, OSError) as exc:
        return {"planned": False, "reason": str(exc).splitlines()[0]}
    return {"planned": True, "same": {r["stage"]: planned.get(r["stage"]) == r["key"] for r in rows}}
