"""Publish built stages to a directory or an object store (fsspec), and pull them back into a cache.

Layout under the target (a local directory, `memory://…`, `s3://…`, `gs://…`, any fsspec URI whose
filesystem package is installed):

    index.json                         entry id → recipe, overrides, status, stages [{stage, key,
                                       manifest_sha256, files [{path, bytes, sha256}]}]; written last
    stages/<stage>/<key>/manifest.json the stage's manifest.json (readable copy; the stage key addresses it)
    blobs/sha256/<ab>/<sha256>         every file's bytes and every manifest's, addressed by content

A blob is written to a temporary name beside it, hashed while it is copied, and renamed into place only
when its sha256 is the manifest's, so a blob that exists is whole: publishing again (after an interruption,
or the next run) skips blobs already there with the same size, and files shared between stages (the CPU
engine's hard links to the export graphs) or recipes are stored once. The index is merged with the one
already there (this run's entries replace theirs) and renamed into place last: a reader sees the old
index or the new one, each naming only blobs that exist.

`pull` restores one entry's stages into `<cache>/<stage>/<key>/` through the build cache's own staging
(`builder.stages.store.Store`: temp folder, rename, per-key lock), verifying every file's sha256 on the
way; a mismatch installs nothing for that stage and is a UserError naming the file. Whether a build on
this machine then finds them cached depends on its stage keys (checkpoint files' identity, tool versions,
GPU), which `pull` compares and reports.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import uuid
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, Callable

from builder.errors import UserError
from builder.stages.manifest import MANIFEST, Manifest

INDEX, INDEX_KIND, INDEX_FORMAT = "index.json", "trtspec-ci-index", 1
CHUNK = 1 << 20
_STAGE = re.compile(r"^[a-z][a-z_]{0,31}$")
_KEY = re.compile(r"^[0-9a-f]{8,64}$")
_SHA = re.compile(r"^[0-9a-f]{64}$")
Say = Callable[[str], None]


class Target:
    """An fsspec filesystem and a root path on it."""

    def __init__(self, uri: str, *, create: bool) -> None:
        import fsspec

        self.uri = uri
        try:
            self.fs, self.root = fsspec.core.url_to_fs(uri)
        except (ValueError, ImportError) as exc:  # unknown protocol; its filesystem package missing
            raise UserError(f"cannot open {uri}: {exc}", field="--publish" if create else "INDEX") from None
        self.root = self.root.rstrip("/") or "/"
        self._dirs: set[str] = set()
        if create:
            self.probe()

    def path(self, rel: str) -> str:
        return posixpath.join(self.root, rel)

    def probe(self) -> None:
        """Create the root and write + remove a small file there: UserError when unreachable or read-only."""
        probe = self.path(f".trtspec-probe-{uuid.uuid4().hex}")
        try:
            self.fs.makedirs(self.root, exist_ok=True)
            self.fs.pipe_file(probe, b"ok")
            self.fs.rm_file(probe)
        except Exception as exc:  # OSError locally; each object store raises its own kinds
            raise UserError(
                f"the publish target {self.uri} is not writable: {type(exc).__name__}: {exc}", field="--publish"
            ) from None

    def makedirs(self, folder: str) -> None:
        if folder not in self._dirs:
            self.fs.makedirs(folder, exist_ok=True)
            self._dirs.add(folder)

    def write_atomic(self, rel: str, data: bytes) -> None:
        final = self.path(rel)
        self.makedirs(posixpath.dirname(final))
        tmp = f"{final}.tmp-{uuid.uuid4().hex}"
        self.fs.pipe_file(tmp, data)
        self.fs.mv(tmp, final)


def blob_rel(sha: str) -> str:
    return f"blobs/sha256/{sha[:2]}/{sha}"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _put_file(t: Target, local: Path, sha: str, size: int, stats: dict[str, int]) -> None:
    """Upload `local` as blob `sha` unless it is there; the copy is hashed and must be `sha`."""
    final = t.path(blob_rel(sha))
    if t.fs.exists(final) and t.fs.size(final) == size:
        stats["skipped"] += 1
        return
    t.makedirs(posixpath.dirname(final))
    tmp = f"{final}.tmp-{uuid.uuid4().hex}"
    h = hashlib.sha256()
    with open(local, "rb") as src, t.fs.open(tmp, "wb") as dst:
        while block := src.read(CHUNK):
            h.update(block)
            dst.write(block)
    if h.hexdigest() != sha:
        t.fs.rm_file(tmp)
        raise UserError(
            f"{local} changed since its stage's manifest was written (sha256 {h.hexdigest()[:12]}…, "
            f"manifest {sha[:12]}…); rebuild it",
            field="--publish",
        )
    t.fs.mv(tmp, final)
    stats["uploaded"] += 1
    stats["uploaded_bytes"] += size


def _put_bytes(t: Target, data: bytes, stats: dict[str, int]) -> str:
    sha = _sha(data)
    if t.fs.exists(t.path(blob_rel(sha))) and t.fs.size(t.path(blob_rel(sha))) == len(data):
        stats["skipped"] += 1
        return sha
    t.write_atomic(blob_rel(sha), data)
    stats["uploaded"] += 1
    stats["uploaded_bytes"] += len(data)
    return sha


def read_index(t: Target, path: str | None = None) -> dict[str, Any] | None:
    path = path or t.path(INDEX)
    if not t.fs.exists(path):
        return None
    try:
        data = json.loads(t.fs.cat_file(path))
    except ValueError as exc:
        raise UserError(f"{t.uri}: {INDEX} is not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("kind") != INDEX_KIND or not isinstance(data.get("recipes"), dict):
        raise UserError(f"{path} is not a trtspec publish index (kind {INDEX_KIND})")
    return data


def publish(t: Target, entries: list[dict[str, Any]], say: Say = lambda _m: None) -> dict[str, Any]:
    """Publish every stage the entries (JSON form) built or found cached; the index last. Returns stats."""
    stats = {"uploaded": 0, "uploaded_bytes": 0, "skipped": 0}
    index = read_index(t) or {"kind": INDEX_KIND, "format": INDEX_FORMAT, "recipes": {}}
    published: dict[tuple[str, str], dict[str, Any]] = {}
    for entry in entries:
        rows = []
        for s in entry["stages"]:
            if (s["stage"], s["key"]) not in published:
                say(f"publish {s['stage']}/{s['key']}")
                published[s["stage"], s["key"]] = _publish_stage(t, s["stage"], s["key"], Path(s["output"]), stats)
            rows.append(published[s["stage"], s["key"]])
        if rows:
            index["recipes"][entry["id"]] = {
                "recipe": entry["recipe_file"],
                "overrides": entry["overrides"],
                "status": entry["status"],
                "stages": rows,
                "published": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            }
    index["updated"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t.write_atomic(INDEX, (json.dumps(index, indent=1) + "\n").encode())
    return {"target": t.uri, "index": t.fs.unstrip_protocol(t.path(INDEX)), "stages": len(published), **stats}


def _publish_stage(t: Target, stage: str, key: str, folder: Path, stats: dict[str, int]) -> dict[str, Any]:
    raw = (folder / MANIFEST).read_bytes()
    m = Manifest.read(folder)
    if m is None or m.stage != stage or m.key != key or m.problems(folder):
        raise UserError(f"{folder}: not a complete output of stage {stage} key {key}; rebuild it", field="--publish")
    for f in m.outputs:
        _put_file(t, folder / f["path"], f["sha256"], f["bytes"], stats)
    manifest_sha = _put_bytes(t, raw, stats)
    copy = t.path(f"stages/{stage}/{key}/{MANIFEST}")
    if not (t.fs.exists(copy) and _sha(t.fs.cat_file(copy)) == manifest_sha):
        t.write_atomic(f"stages/{stage}/{key}/{MANIFEST}", raw)
    return {
        "stage": stage,
        "key": key,
        "manifest_sha256": manifest_sha,
        "files": [{"path": f["path"], "bytes": f["bytes"], "sha256": f["sha256"]} for f in m.outputs],
    }


def find_entry(index: dict[str, Any], recipe: str) -> tuple[str, dict[str, Any]]:
    """The index entry named by id, by recipe path, or by file name (unique); UserError otherwise."""
    recipes = index["recipes"]
    if recipe in recipes:
        return recipe, recipes[recipe]
    norm = PurePosixPath(Path(recipe).as_posix())
    hits = [k for k, v in recipes.items() if PurePosixPath(str(v.get("recipe"))) == norm] or [
        k for k, v in recipes.items() if PurePosixPath(str(v.get("recipe"))).name == norm.name
    ]
    if len(hits) == 1:
        return hits[0], recipes[hits[0]]
    shown = ", ".join(sorted(hits or recipes)[:8]) + (" …" if len(hits or recipes) > 8 else "")
    why = "several entries match" if hits else "no entry for it"
    raise UserError(f"{recipe}: {why} in the index", field="RECIPE", allowed=shown or "(the index is empty)")


def checked_stage(stage: dict[str, Any]) -> tuple[str, str, list[dict[str, Any]]]:
    name, key, files = stage.get("stage"), stage.get("key"), stage.get("files")
    if not (
        isinstance(name, str)
        and _STAGE.match(name)
        and isinstance(key, str)
        and _KEY.match(key)
        and isinstance(files, list)
        and _SHA.match(str(stage.get("manifest_sha256")))
    ):
        raise UserError(f"the index holds a malformed stage entry: {str(stage)[:200]}")
    for f in files:
        p = PurePosixPath(str(f.get("path")))
        if (
            p.is_absolute()
            or ".." in p.parts
            or not p.parts
            or p.name == MANIFEST
            or not _SHA.match(str(f.get("sha256")))
        ):
            raise UserError(f"the index names an unsafe or malformed file for {name}/{key}: {str(f)[:200]}")
    return name, key, files
