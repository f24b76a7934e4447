"""What a stage's cache key hashes beyond its recipe fields: the identity of the files those fields name.

Keys never depend on file times (a fresh clone or a pulled cache has new ones): a local checkpoint is its
config.json contents plus every file's name, size and sha256; a hub checkpoint its repo and revision; a tree file
its choices; the calibration text EAGLE's draft vocabulary is counted from its name and sha256. The stages' `inputs`
hooks (`builder.stages.stage.Stage.inputs`) call these.
"""

# trtllm: the GPU a build is for is detected by the bundle's stdlib check (builder/trtllm/compat.py), one rule

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from builder.recipe.loader import LoadedRecipe
from builder.recipe.resolve import parse_checkpoint, tree_choices_spec, tree_field
from builder.speculative.choices import load_choices


class FileHashes:
    """sha256 of checkpoint files by content, remembered per host by (path, size, mtime, inode).

    Keys must not depend on file times (a fresh clone or a restored cache has new ones), but reading a 70B
    checkpoint on every `plan` is too slow: the digest of an unchanged file is looked up in
    `$TRTSPEC_HASH_CACHE` (default `$XDG_CACHE_HOME/trtspec/file-hashes.json`), written atomically.
    """

    def __init__(self) -> None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        self.path = Path(os.environ.get("TRTSPEC_HASH_CACHE") or os.path.join(base, "trtspec", "file-hashes.json"))
        self.known: dict[str, list] = {}
        self.changed = False

    def __enter__(self) -> "FileHashes":
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            self.known = data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            self.known = {}
        return self

    def sha256(self, path: Path) -> str:
        from builder.files import sha256_file

        st = path.stat()
        stamp = [st.st_size, st.st_mtime_ns, st.st_ino]
        key = str(path.resolve())
        hit = self.known.get(key)
        if isinstance(hit, list) and len(hit) == 4 and hit[:3] == stamp:
            return str(hit[3])
        digest = sha256_file(path)
        self.known[key] = [*stamp, digest]
        self.changed = True
        return digest

    def __exit__(self, *exc: object) -> None:
        if not self.changed:
            return
        try:  # best effort: a read-only home only costs re-hashing next time
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
            tmp.write_text(json.dumps(self.known), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError:
            pass


def checkpoint_identity(text: str, recipe_dir: Path) -> dict[str, Any]:
    """A checkpoint reference's identity: a hub repo and revision, or a local folder's files by content."""
    ref = parse_checkpoint(text, recipe_dir)
    if ref.local is None:
        return {"repo": ref.repo, "revision": ref.revision}
    if not ref.local.is_dir():
        return {"path": str(ref.local), "missing": True}
    files = sorted(p for p in ref.local.rglob("*") if p.is_file())
    cfg = ref.local / "config.json"
    with FileHashes() as hashes:
        return {
            "config": hashlib.sha256(cfg.read_bytes()).hexdigest() if cfg.is_file() else None,
            "files": [(str(p.relative_to(ref.local)), p.stat().st_size, hashes.sha256(p)) for p in files],
        }


def checkpoints(loaded: LoadedRecipe) -> dict[str, Any]:
    """The target's and the draft's checkpoint identities (the load stage's)."""
    recipe = loaded.recipe
    out = {
        "model.checkpoint#files": checkpoint_identity(recipe.model.checkpoint, loaded.dir_of(("model", "checkpoint")))
    }
    draft = getattr(recipe.speculative, "checkpoint", None)
    if draft:
        out["speculative.checkpoint#files"] = checkpoint_identity(draft, loaded.dir_of(("speculative", "checkpoint")))
    return out


def tree_contents(loaded: LoadedRecipe) -> dict[str, Any]:
    """The tree's choices (not only its name or file path), for a recipe with a static tree."""
    choices = tree_choices_spec(loaded.recipe)
    if choices is None:
        return {}
    return {"speculative.tree#choices": load_choices(choices, loaded.dir_of(tree_field(loaded.recipe)))}


def calibration_source(loaded: LoadedRecipe) -> str:
    """The calibration source EAGLE's draft vocabulary is counted from: a builtin name, or a file's name and hash."""
    src = loaded.recipe.quantization.calibration.source
    if src.startswith("builtin:"):
        return src
    path = Path(src) if Path(src).is_absolute() else loaded.dir_of(("quantization", "calibration", "source")) / src
    if not path.is_file():
        return f"{src}#missing"
    with FileHashes() as hashes:
        return f"{src}#{hashes.sha256(path)}"


def gpu_identity() -> list[str]:
    """The GPUs of this host as "name sm<cc>" (nvidia-smi), [] where there is none: an engine is built for one."""
    # nvidia-smi's GPU list lives in the TensorRT-LLM bundle's standard-library lock script, which must run where
    # trtspec is not installed: one implementation, read from there
    from builder.trtllm.compat import gpus_here

    return [f"{name} sm{cc[0]}{cc[1]}" for name, cc in gpus_here()]


def gpu_engine_host(loaded: LoadedRecipe) -> dict[str, Any]:
    """An engine stage's host input: the GPUs it is built on (a GPU engine is built for one; a cpu one for none)."""
    return {} if loaded.recipe.target.device == "cpu" else {"host.gpus": gpu_identity()}
