"""The runtime a Triton repository carries: the project modules its Python models import when serving, copied
into every model's version folder, so the repository imports nothing from the build environment's source tree.

    <repo>/<model>/1/model.py                   the bootstrap (`triton_repo/models/model.py`)
    <repo>/<model>/1/trtspec_runtime/           builder/…, plugins/…, triton_repo/… (`closure()`), runtime.json

How it is made, and why. The emitter copies, byte for byte and under their own names, the import closure of
the models (ENTRY) in the source tree it runs from (`copy_runtime`): every project module they import, at module
level or inside a function, and what those import in turn — `if TYPE_CHECKING:` blocks (never run) and the
BUILD_ONLY edges aside (each names the function that makes it and why serving never calls it). The walker is
`builder.closure`, the one the stage cache keys use for every stage's code (`builder.stages.keys`). So:
* no second copy of any code lives in the source tree (the decoding loop, drafters and engines' host layers stay
  where the build and its tests use them; they are being reshaped for speed while this is written, and a module
  they add joins the runtime without anyone keeping a list);
* nothing is renamed, so the copies are the code that was tested, and the tree_verify plugin's digest in the
  copy equals the one a TensorRT folder's version lock recorded;
* the closure is checked (tests/unit/test_runtime_closure.py): it stays inside SCOPE — the serving part of the
  project; an import that would drag the recipe schema, the torch model, the exporters or the stages into
  serving fails there, with the chain that reaches it — every third-party import is in THIRD_PARTY, and a copy
  far from the source tree imports and decodes on its own.
The bootstrap puts `trtspec_runtime/` first on sys.path and lets PACKAGES resolve only there
(`triton_repo.models.model`): a module the copy lacks fails loudly instead of coming from an installed trtspec.

Third-party packages come from the environment the server runs in (`trtspec serve` lays it out:
`builder.serve.server.stub_python`); none of their paths are written into the repository. CPU serving needs
only CPU_THIRD_PARTY; a TensorRT folder adds GPU_THIRD_PARTY.

Each model gets its own copy (hard links to the first where the filesystem allows): a model folder is
self-contained, and Triton takes every top-level folder of a repository for a model, so there is no shared
place outside the models. runtime.json records the files with their sha256 and the trtspec version that
emitted them (`triton_repo.compat` compares it with the engine's).

A speculative method another installed distribution registers (entry-point group `trtspec.methods`,
`builder.speculative.registry`) is code outside this tree: when the engine's drafter is one, the repo stage passes
it as `Carried` and its package is copied beside ours with a minimal `<dist>-<version>.dist-info` naming only that
entry point, so the copy (first on sys.path) discovers it the same way and serves without the package installed.

Standard library only: the repo stage and `trtspec serve` import it without the serve extra's packages.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable

from builder.closure import Imports, import_closure
from builder.closure import imports as closure_imports
from builder.closure import module_file as closure_module_file

SOURCE = Path(__file__).resolve().parents[1]  # the folder holding builder/, plugins/, triton_repo/
FOLDER = "trtspec_runtime"  # inside each model's version folder
MANIFEST = "runtime.json"
PACKAGES = ("builder", "plugins", "triton_repo")

# the Python models (the bootstrap model.py names one as `implementation`; it is not part of the runtime itself)
ENTRY = (
    "triton_repo.models.front",
    "triton_repo.models.spec_decoder",
    "triton_repo.models.preprocessing",
    "triton_repo.models.postprocessing",
)

# (importing module, imported module) → why serving never makes that import (the function that does, first)
BUILD_ONLY = {
    (
        "builder.engines.tensorrt.folder",
        "builder.export.tensorrt",
    ): "build_folder (the engine stage) rewrites cached exports into their TensorRT form; open_engine never does",
}

# what the closure may reach: a module, or "pkg.*" = the package and everything under it, but none of SCOPE_EXCEPT
SCOPE = (
    "triton_repo.*",  # the models and the serving runtime
    "builder",
    "builder.errors",
    "builder.section",  # the package, its error type, the base of LookaheadConfig
    "builder.closure",  # the import walker `closure()` runs (triton_repo.compat reads runtime.json through this module)
    "builder.handoffs",  # engine.json's model, checked when spec_decoder opens the engine folder
    "builder.speculative.*",  # the decoding loop and the drafters (not the tree search / Medusa training below)
    "builder.model",  # (the package: imports nothing)
    "builder.model.pickled",  # a method's weight-file names (`DraftCheckpoint.layout`, plain data, no torch)
    "builder.engines.*",  # the neutral entry point and the ONNX Runtime / TensorRT host layers (not the torch engines)
    "builder.export",
    "builder.export.contract",  # the graph I/O contract the host layers bind (no exporter)
    "plugins",
    "plugins.tree_verify.*",  # tree_verify's contract and its TensorRT face (re-registered at load)
)
SCOPE_EXCEPT = (
    "triton_repo.config",
    "triton_repo.emit",
    "triton_repo.trtllm",  # the TensorRT-LLM repository renderer: build time only
    "triton_repo.models.model",
    "builder.speculative.tree_search",
    "builder.speculative.medusa.heads",
    "builder.speculative.medusa.accuracy",
    "builder.speculative.eagle.draft_model",
    "builder.engines.torch_engine",
    "builder.engines.torch_eagle",
    "builder.engines.ort.build",
    "plugins.tree_verify.onnx_op",
    "plugins.tree_verify.typecheck",
    "plugins.tree_verify.compile_check",
)

CPU_THIRD_PARTY = {
    "numpy": "every host layer",
    "onnxruntime": "ONNX Runtime folders",
    "tokenizers": "the models' tokenizer",
    "pydantic": "builder.speculative.lookahead.config (LookaheadConfig is a recipe section)",
    "triton_python_backend_utils": "the Python backend's own module (inside the stub)",
}
GPU_THIRD_PARTY = {
    "tensorrt": "TensorRT folders",
    "torch": "the TensorRT runtime's CUDA API and the tree_verify plugin",
    "triton": "the tree_verify plugin's kernel (OpenAI Triton)",
    "ml_dtypes": "bfloat16 / FP8 host arrays",
}
THIRD_PARTY = {**CPU_THIRD_PARTY, **GPU_THIRD_PARTY}


def module_file(module: str, root: Path = SOURCE) -> Path:
    """The source file of `module` under `root` (a package's __init__.py)."""
    return closure_module_file(module, root)


def imports(module: str, root: Path = SOURCE) -> Imports:
    """(imported name, enclosing function or None, line) of every import `module` may run (`builder.closure`)."""
    return closure_imports(module, root)


def closure(root: Path = SOURCE) -> dict[str, str | None]:
    """Every project module the models (ENTRY) may import, with the module that first imported it (None: an entry
    or a package of one), their packages' __init__ included; BUILD_ONLY edges are not followed
    (`builder.closure.import_closure`, the walker the stage cache keys use too)."""
    return import_closure(ENTRY, root, PACKAGES, skip=BUILD_ONLY)


def in_scope(module: str) -> bool:
    """Whether `module` lies in SCOPE (and not in SCOPE_EXCEPT)."""

    def matches(pattern: str) -> bool:
        base = pattern.removesuffix(".*")
        return module == base or (pattern.endswith(".*") and module.startswith(base + "."))

    excluded = any(module == e or module.startswith(e + ".") for e in SCOPE_EXCEPT)
    return not excluded and any(matches(p) for p in SCOPE)


def runtime_files(root: Path = SOURCE) -> list[str]:
    """The runtime's files (the closure's), relative to `root`, sorted."""
    return sorted(module_file(m, root).relative_to(root).as_posix() for m in closure(root))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def trtspec_version() -> str:
    try:
        return metadata.version("trtspec")
    except metadata.PackageNotFoundError:
        import builder

        return str(builder.__version__)


@dataclass(frozen=True)
class Carried:
    """A third-party method's package the runtime carries (`builder.speculative.registry.ThirdParty`)."""

    package: str  # its top-level package (or module)
    root: Path  # the folder holding it
    distribution: str
    version: str
    group: str  # the entry-point group ("trtspec.methods")
    name: str  # the entry point's name (the method's)
    value: str  # "module:NAME"

    def sources(self) -> list[Path]:
        top = self.root / self.package
        if top.is_dir():
            return sorted(p for p in top.rglob("*.py") if "__pycache__" not in p.parts)
        return [self.root / f"{self.package}.py"]

    def dist_info(self) -> dict[str, str]:
        """{file name under the .dist-info folder: text}: what `importlib.metadata` needs to find the entry point."""
        return {
            "METADATA": f"Metadata-Version: 2.1\nName: {self.distribution}\nVersion: {self.version}\n",
            "entry_points.txt": f"[{self.group}]\n{self.name} = {self.value}\n",
        }

    @property
    def dist_folder(self) -> str:
        return f"{re.sub(r'[-_.]+', '_', self.distribution)}-{self.version}.dist-info"


def copy_runtime(dst: Path, root: Path = SOURCE, carried: Iterable[Carried] = ()) -> dict[str, Any]:
    """Copy the runtime from `root` into `dst` (a new folder), with the `carried` methods' packages, and write its
    runtime.json (returned)."""
    files = {}
    for rel in runtime_files(root):
        src = root / rel
        if not src.is_file():
            raise FileNotFoundError(f"the serving runtime needs {rel}, which is not in {root}")
        out = dst / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, out)  # a copy, never a link: an edit of the source tree must not reach a repository
        files[rel] = _sha256(out)
    methods = []
    for c in carried:
        for src in c.sources():
            rel = src.relative_to(c.root).as_posix()
            out = dst / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, out)
            files[rel] = _sha256(out)
        for name, text in c.dist_info().items():
            rel = f"{c.dist_folder}/{name}"
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            (dst / rel).write_text(text, encoding="utf-8")
            files[rel] = _sha256(dst / rel)
        methods.append(
            {
                "method": c.name,
                "distribution": c.distribution,
                "version": c.version,
                "package": c.package,
                "dist_info": c.dist_folder,
            }
        )
    manifest = {"trtspec": trtspec_version(), "packages": list(PACKAGES), "files": files, "carried": methods}
    (dst / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def problems(folder: Path) -> list[str]:
    """What is wrong with the runtime copy in `folder` (empty: every file runtime.json lists is there, unchanged)."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return [f"{folder / MANIFEST}: {exc}"]
    out = []
    for rel, digest in sorted(manifest.get("files", {}).items()):
        path = folder / rel
        if not path.is_file():
            out.append(f"{path}: missing")
        elif _sha256(path) != digest:
            out.append(f"{path}: changed since the repository was written")
    return out


def stale(folder: Path, root: Path = SOURCE) -> list[str]:
    """How the runtime copy in `folder` differs from what `copy_runtime` would copy from `root` now (files added,
    dropped or changed; empty: the same code). A cached repository whose stage key missed a change of the copied
    code (e.g. of the decoding loop) shows here."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        files = manifest["files"]
    except (OSError, ValueError, KeyError) as exc:
        return [f"{folder / MANIFEST}: {exc}"]
    # a carried method's files are its distribution's, not this tree's
    theirs = tuple(f"{c[k]}/" for c in manifest.get("carried", []) for k in ("package", "dist_info"))
    files = {rel: d for rel, d in files.items() if not rel.startswith(theirs)}
    now = runtime_files(root)
    out = [f"{rel}: new in the source tree" for rel in now if rel not in files]
    out += [f"{rel}: no longer part of the runtime" for rel in sorted(files) if rel not in now]
    out += [f"{rel}: changed in the source tree" for rel in now if rel in files and _sha256(root / rel) != files[rel]]
    return out


def absolute_paths(texts: Iterable[str]) -> list[str]:
    """Every absolute filesystem path in `texts`: a "/" opening a value (after a quote, whitespace, "=", ",", "[",
    "(" or at a line's start) followed by a name (a relocatable repository's configs have none)."""
    found = []
    for text in texts:
        found += re.findall(r"""(?:^|(?<=[\s"'=,\[(]))/(?:[\w.+ -]*[\w.+-]/)*[\w.+-]+""", text, re.M)
    return found
