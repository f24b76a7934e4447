"""The recipe's planned stages and their content-addressed cache keys.

A stage's key hashes, from its declaration (`builder.stages.stage.Stage`): the recipe fields it reads, what its
`inputs` hook adds (the identity of the files those fields name — local checkpoints by content, never file
times, so a fresh clone or a pulled cache hits; a tree file's choices; the GPU an engine is built for), the
tools' versions, its upstream stage's key, the trtspec version and the digest of its code. Same key ⇒ same
output ⇒ cache hit.

The code is the stage module's import closure (`builder.closure.import_closure`, the walker the repository's
runtime uses): every project module `run` may import — at module level or lazily inside a function — and what
those import in turn, plus the modules a stage copies into its output without importing them (`Stage.code`).
So a changed exporter never reuses a stale graph, and no list of source paths is kept by hand: a module a stage
starts to import joins its key by itself.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import builder
from builder.closure import Imports, import_closure, imports_in, module_file, module_index
from builder.recipe.loader import LoadedRecipe
from builder.speculative.method import dotted_modules
from builder.speculative.registry import BUILTIN, third_party
from builder.stages.registry import backend_of
from builder.stages.stage import Backend, Stage
from builder.versions import tool_versions
from triton_repo.runtime import PACKAGES, SOURCE

ROOT = SOURCE  # the folder holding builder/, plugins/, triton_repo/
REGISTRY = "builder.speculative.registry"


@dataclass
class PlannedStage:
    stage: Stage  # its declaration
    upstream: str | None  # the key of the stage before it
    key: str = ""
    inputs: dict[str, Any] = field(default_factory=dict)  # everything the key hashes but the code and upstream

    @property
    def name(self) -> str:
        return self.stage.name

    @property
    def description(self) -> str:
        return self.stage.description

    @property
    def reads(self) -> list[str]:
        return list(self.stage.reads)

    def output_dir(self, cache_dir: Path) -> Path:
        return Path(cache_dir) / self.name / self.key


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:20]


def _get(data: dict[str, Any], dotted: str) -> Any:
    node: Any = data
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


class SourceTree:
    """The project's source files under `root` as one plan reads them: each file read and hashed once, its imports
    parsed once per content (`parsed`: sha256 of a file -> its `builder.closure` imports, shared between trees and
    runs, `ImportCache`), the module index built once. A stage's code is its import closure here."""

    def __init__(self, root: Path = ROOT, parsed: dict[str, list] | None = None) -> None:
        self.root = root
        self.parsed: dict[str, list] = {} if parsed is None else parsed
        self.known = module_index(root, PACKAGES)
        self.files: dict[str, tuple[str, Imports]] = {}  # module -> (sha256 of its file, its imports)

    def imports(self, module: str, root: Path) -> Imports:
        """`builder.closure.imports` of `module` (the walker's lister; `root` is this tree's)."""
        if module not in self.files:
            path = module_file(module, self.root)
            data = path.read_bytes()
            sha = hashlib.sha256(data).hexdigest()
            hit = self.parsed.get(sha)
            if not isinstance(hit, list):
                hit = [list(i) for i in imports_in(ast.parse(data.decode("utf-8")), module, path.name == "__init__.py")]
                self.parsed[sha] = hit
            self.files[module] = (sha, [(str(name), func, int(line)) for name, func, line in hit])
        return self.files[module][1]

    def code(self, stage: Stage) -> dict[str, str]:
        """{file relative to root: its sha256} of the stage's import closure and of `Stage.code`; a stage that asks
        the method registry runs code the methods name by dotted path (`method.dotted_modules`: their exporters,
        loaders, tuners, …), which no import reaches: their closures join it."""
        found = import_closure(
            (stage.module, *stage.code), self.root, PACKAGES, imports_of=self.imports, known=self.known
        )
        if REGISTRY in found:
            # (a dotted path that names no module here fails the registry's own test, not every plan)
            named = [m for method in BUILTIN for m in dotted_modules(method) if m in self.known]
            found = import_closure(
                (stage.module, *stage.code, *named), self.root, PACKAGES, imports_of=self.imports, known=self.known
            )
        return {module_file(m, self.root).relative_to(self.root).as_posix(): self.files[m][0] for m in found}

    def digest(self, stage: Stage) -> str:
        """sha256 over the stage's code files (names and contents), in a stable order."""
        h = hashlib.sha256()
        for rel, sha in sorted(self.code(stage).items()):
            h.update(f"{rel}\0{sha}\0".encode())
        return h.hexdigest()[:16]


class ImportCache:
    """The parsed imports of source files by content, remembered per host for `SourceTree`.

    A plan walks ~100 modules per stage, most of them shared between stages, and parsing them costs more than the
    rest of `trtspec plan`: kept in `$TRTSPEC_IMPORTS_CACHE` (default `$XDG_CACHE_HOME/trtspec/imports.json`,
    written atomically; a read-only home only costs parsing again). Content-addressed (sha256 of the file), so
    an edited module is parsed again and a stale entry is never used.
    """

    KEEP = 4096  # entries kept across runs, the last added: old versions of edited files age out

    def __init__(self) -> None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        self.path = Path(os.environ.get("TRTSPEC_IMPORTS_CACHE") or os.path.join(base, "trtspec", "imports.json"))
        self.parsed: dict[str, list] = {}
        self.before = 0

    def __enter__(self) -> "ImportCache":
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            self.parsed = data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            self.parsed = {}
        self.before = len(self.parsed)
        return self

    def __exit__(self, *exc: object) -> None:
        if len(self.parsed) == self.before:
            return
        kept = dict(list(self.parsed.items())[-self.KEEP :])
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
            tmp.write_text(json.dumps(kept), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError:
            pass


def code_files(stage: Stage, root: Path = ROOT) -> list[str]:
    """The source files of the stage's import closure (and of `Stage.code`), relative to `root`, sorted."""
    return sorted(SourceTree(root).code(stage))


def code_digest(stage: Stage, root: Path = ROOT) -> str:
    """The digest of the stage's code (`SourceTree.digest`)."""
    return SourceTree(root).digest(stage)


def installed_methods() -> dict[str, str]:
    """{method: sha256 of its package's files} of the methods other distributions register
    (`builder.speculative.registry.third_party`): their code lives outside this tree, so every stage's key hashes
    it as an input (an edited or upgraded method never reuses a stale output)."""
    found = {}
    for t in third_party():
        top = t.root / t.package
        files = sorted(p for p in top.rglob("*.py")) if top.is_dir() else [top.with_suffix(".py")]
        h = hashlib.sha256()
        for f in files:
            h.update(f"{f.relative_to(t.root).as_posix()}\0".encode() + hashlib.sha256(f.read_bytes()).digest())
        found[t.method.name] = f"{t.distribution} {t.version} {h.hexdigest()[:16]}"
    return found


def plan_stages(loaded: LoadedRecipe) -> list[PlannedStage]:
    """The recipe's stages in order (its backend's, those it plans), each with its inputs and key."""
    recipe = loaded.recipe
    backend = backend_of(recipe)
    data = recipe.model_dump(mode="json")
    planned: list[PlannedStage] = []
    upstream: str | None = None
    installed = installed_methods()
    with ImportCache() as cache:
        tree = SourceTree(ROOT, cache.parsed)
        for stage in backend.stages:
            if stage.planned(recipe):
                planned.append(_plan_one(loaded, backend, stage, data, upstream, tree.digest(stage), installed))
                upstream = planned[-1].key
    return planned


def _plan_one(
    loaded: LoadedRecipe,
    backend: Backend,
    stage: Stage,
    data: dict[str, Any],
    upstream: str | None,
    code: str,
    installed: dict[str, str] | None = None,
) -> PlannedStage:
    inputs = {path: _get(data, path) for path in stage.reads}
    if installed:
        inputs["installed_methods"] = installed
    inputs.update(stage.inputs(loaded, backend))
    # Outputs depend on the tools that made them: an upgraded exporter or TensorRT never reuses a stale output.
    inputs["tools"] = tool_versions(*stage.tools)
    key = _digest(
        {"stage": stage.name, "inputs": inputs, "upstream": upstream, "trtspec": builder.__version__, "code": code}
    )
    return PlannedStage(stage, upstream, key, inputs)
