"""The runtime a Triton repository carries (`triton_repo.runtime`) is closed: what its models import when serving
resolves inside the copy or in the declared third-party set, and it runs from a copy alone.

The closure walker against a hand-made source tree (every kind of import statement; the expected module set
written out by hand). The real closure: it holds the models, stays inside SCOPE (a failure shows the chain of
imports that left it), every third-party import is the standard library or THIRD_PARTY, and each BUILD_ONLY edge
still exists, inside the function its reason names, never at module level. Dynamic (a separate interpreter, the
copy in a folder far from the source tree, the bootstrap's `install_runtime` with an editable trtspec still
installed, torch / tensorrt / triton / ml_dtypes made unimportable): every module of the closure is imported from
the copy — only the TensorRT side may fail, and only for a GPU package, and the models for want of the stub's
`triton_python_backend_utils` (tests/integration/test_triton_relocate.py serves them) — and the tiny recipe's
ONNX Runtime engine folder decodes through the copy's neutral `open_engine` exactly as the source tree's
`trtspec generate` does.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from triton_repo import runtime as R

ROOT = Path(__file__).resolve().parents[2]
BOOTSTRAP = ROOT / "triton_repo" / "models" / "model.py"
GPU_MODULES = (
    "builder.engines.tensorrt",
    "plugins.tree_verify.kernel",
    "plugins.tree_verify.reference",
    "plugins.tree_verify.trt_plugin",
)

SYNTHETIC = {  # a source tree exercising every import form the walker must follow (or not)
    "triton_repo/__init__.py": "",
    "triton_repo/models/__init__.py": "",
    "triton_repo/models/front.py": "import numpy\nfrom triton_repo import jobs\n",
    "triton_repo/models/spec_decoder.py": (
        "from typing import TYPE_CHECKING\nfrom .. import tensors\nif TYPE_CHECKING:\n    from builder import hidden\n"
        "else:\n    pass\n\ndef load():\n    from builder.engines.tensorrt.folder import open_engine\n"
    ),
    "triton_repo/models/preprocessing.py": "import triton_repo.request as r\n",
    "triton_repo/models/postprocessing.py": "",
    "triton_repo/jobs.py": "from builder.speculative.decoding import Request\n",
    "triton_repo/tensors.py": "",
    "triton_repo/request.py": "",
    "triton_repo/unused.py": "",
    "builder/__init__.py": "",
    "builder/hidden.py": "",
    "builder/export/__init__.py": "",
    "builder/export/tensorrt.py": "import onnx\n",
    "builder/speculative/__init__.py": "",
    "builder/speculative/decoding.py": "from .protocols import Engine\n",
    "builder/speculative/protocols.py": "",
    "builder/engines/__init__.py": "",
    "builder/engines/tensorrt/__init__.py": "",
    "builder/engines/tensorrt/folder.py": "def build_folder():\n    from builder.export.tensorrt import write\n",
}


def test_the_closure_walker_on_a_hand_made_tree(tmp_path):
    for rel, text in SYNTHETIC.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    got = R.closure(tmp_path)
    assert set(got) == {
        "triton_repo",
        "triton_repo.models",
        "triton_repo.models.front",
        "triton_repo.models.spec_decoder",
        "triton_repo.models.preprocessing",
        "triton_repo.models.postprocessing",
        "triton_repo.jobs",
        "triton_repo.tensors",
        "triton_repo.request",
        "builder",
        "builder.speculative",
        "builder.speculative.decoding",
        "builder.speculative.protocols",
        "builder.engines",
        "builder.engines.tensorrt",
        "builder.engines.tensorrt.folder",
    }  # not: unused (never imported), hidden (TYPE_CHECKING), export.tensorrt (a BUILD_ONLY edge)
    assert got["builder.speculative.protocols"] == "builder.speculative.decoding"  # who brought it in
    assert got["builder.engines.tensorrt.folder"] == "triton_repo.models.spec_decoder"
    assert sorted(R.runtime_files(tmp_path))[0] == "builder/__init__.py"


def test_stale_names_what_the_source_tree_would_copy_differently(tmp_path):
    """A cached repository's runtime against the tree it came from, after the tree changed: a module edited, a new
    module imported by the loop (e.g. a helper split out for speed), a module no longer imported."""
    src = tmp_path / "src"
    for rel, text in SYNTHETIC.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    R.copy_runtime(tmp_path / "rt", src)
    assert R.stale(tmp_path / "rt", src) == []
    (src / "builder/speculative/batch.py").write_text("")
    (src / "builder/speculative/decoding.py").write_text("from .batch import rows\n")  # protocols.py dropped, batch new
    (src / "triton_repo/tensors.py").write_text("X = 1\n")
    assert sorted(R.stale(tmp_path / "rt", src)) == sorted(
        [
            "builder/speculative/batch.py: new in the source tree",
            "builder/speculative/protocols.py: no longer part of the runtime",
            "builder/speculative/decoding.py: changed in the source tree",
            "triton_repo/tensors.py: changed in the source tree",
        ]
    )
    assert R.stale(tmp_path / "nowhere", src)[0].endswith(
        "No such file or directory: '" + str(tmp_path / "nowhere" / R.MANIFEST) + "'"
    )


def _chain(found: dict[str, str | None], module: str) -> str:
    out = [module]
    while found.get(out[-1]) is not None:
        out.append(found[out[-1]])
    return " <- ".join(out)


def test_the_closure_holds_the_models_and_stays_in_the_serving_scope():
    found = R.closure()
    assert set(R.ENTRY) <= set(found) and "triton_repo.runtime" in found  # compat reads runtime.json through it
    for m in found:
        assert R.module_file(m).is_file(), m
    outside = [_chain(found, m) for m in found if not R.in_scope(m)]
    assert not outside, "serving would import build code (narrow the import, or widen SCOPE saying why): " + "; ".join(
        outside
    )
    assert "builder.engines.tensorrt.folder" in found and "builder.export.tensorrt" not in found  # BUILD_ONLY cut
    assert "plugins.tree_verify.trt_plugin" in found  # a TensorRT folder registers the plugin again when it opens


def test_every_third_party_import_is_declared():
    stdlib, third = set(sys.stdlib_module_names), []
    for module in R.closure():
        for name, _func, line in R.imports(module):
            top = name.partition(".")[0]
            if top and top not in R.PACKAGES and top not in stdlib and top not in R.THIRD_PARTY:
                third.append(f"{module}:{line} imports {name}")
    assert not third, "third-party packages not in triton_repo.runtime.THIRD_PARTY: " + "; ".join(dict.fromkeys(third))


def test_build_only_edges_exist_inside_the_function_their_reason_names():
    for (module, target), why in R.BUILD_ONLY.items():
        where = [func for name, func, _ in R.imports(module) if name == target or name.startswith(target + ".")]
        assert where, f"{module} no longer imports {target}: drop the BUILD_ONLY entry"
        assert None not in where, f"{module} imports {target} at module level: serving would run it"
        assert set(where) == {why.split()[0]}, (module, target, where)


def test_the_bootstrap_imports_only_the_standard_library():
    tree = ast.parse(BOOTSTRAP.read_text(encoding="utf-8"))
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names and all(n.partition(".")[0] in sys.stdlib_module_names for n in names), names


def test_the_copy_is_byte_identical_and_its_manifest_catches_changes(tmp_path):
    dst = tmp_path / "rt"
    manifest = R.copy_runtime(dst)
    assert sorted(manifest["files"]) == R.runtime_files()
    copied = sorted(p.relative_to(dst).as_posix() for p in dst.rglob("*") if p.is_file())
    assert copied == sorted([*R.runtime_files(), R.MANIFEST])
    for rel in R.runtime_files():
        assert (dst / rel).read_bytes() == (ROOT / rel).read_bytes(), rel
    assert R.problems(dst) == []
    edited, removed = dst / "triton_repo" / "scheduler.py", dst / "builder" / "engines" / "rows.py"
    edited.write_text(edited.read_text() + "\n# edited\n")
    removed.unlink()
    found = R.problems(dst)
    assert (
        len(found) == 2
        and any("scheduler.py: changed" in p for p in found)
        and any("rows.py: missing" in p for p in found)
    )


def test_absolute_path_finder():
    texts = [
        'x: "/work/main/.venv/lib"',
        'y: "engine"',
        'z: "text/plain"',
        "w: '[[1, 64]]'",
        "u: http://a/b",
        'v: "[\\"/opt/x y/site-packages\\"]"',
        "`<model>/1/model.py`, n / 2",
        "/srv/repo",
    ]
    assert R.absolute_paths(texts) == ["/work/main/.venv/lib", "/opt/x y/site-packages", "/srv/repo"]
    assert R.absolute_paths([BOOTSTRAP.read_text(encoding="utf-8")]) == []


CHILD = r"""
import importlib, importlib.abc, importlib.util, json, sys
from pathlib import Path

class NoGpu(importlib.abc.MetaPathFinder):  # what a CPU serving host lacks
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {"torch", "tensorrt", "triton", "ml_dtypes"}:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: no GPU packages)", name=name)
        return None

sys.meta_path.insert(0, NoGpu())
bootstrap, engine_dir, prompt, n, modules = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]
spec = importlib.util.spec_from_file_location("bootstrap", bootstrap)
boot = importlib.util.module_from_spec(spec)
spec.loader.exec_module(boot)
boot.install_runtime(Path(bootstrap).parent / boot.RUNTIME)
failed = {}
for m in modules:
    try:
        importlib.import_module(m)
    except ImportError as exc:
        failed[m] = exc.name
from builder.engines.folder import open_engine
from builder.speculative.decoding import generate
from builder.speculative.protocols import Sampling
opened = open_engine(engine_dir, max_batch_size=1)
g = generate(opened.engine, prompt, n, opened.make_drafter(), Sampling(0.0, 1.0, 0), opened.stop_ids)
files = {name: getattr(mod, "__file__", None) for name, mod in sys.modules.items()
         if name.partition(".")[0] in ("builder", "plugins", "triton_repo")}
print(json.dumps({"tokens": g.token_ids, "failed": failed, "files": files, "label": opened.label}))
"""


@pytest.fixture(scope="module")
def tiny_engine():
    from builder.recipe.loader import load_recipe
    from builder.stages.decoders import cache_dir
    from builder.stages.runner import build

    return build(load_recipe(str(ROOT / "recipes/tiny-llama3.yaml")), cache_dir(), until="engine").folder("engine")


def test_a_copy_far_from_the_source_tree_serves_alone_without_gpu_packages(tiny_engine, tmp_path):
    from click.testing import CliRunner

    from builder.cli import cli

    home = tmp_path / "elsewhere" / "model" / "1"
    home.mkdir(parents=True)
    (home / "model.py").write_bytes(BOOTSTRAP.read_bytes())
    R.copy_runtime(home / R.FOLDER)
    prompt, n = [5, 17, 301, 42, 7], 24
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            CHILD,
            str(home / "model.py"),
            str(tiny_engine),
            json.dumps(prompt),
            str(n),
            *R.closure(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    runtime = str((home / R.FOLDER).resolve())
    assert out["files"] and all(f is not None and f.startswith(runtime) for f in out["files"].values()), out["files"]
    for module, missing in out["failed"].items():  # the models need the stub's module (the served tests run them)
        stub = module.startswith("triton_repo.models.") and missing == "triton_python_backend_utils"
        gpu = module.startswith(GPU_MODULES) and missing.partition(".")[0] in R.GPU_THIRD_PARTY
        assert stub or gpu, (module, missing)
    assert "builder.engines.tensorrt.folder" in out["files"]  # the TensorRT host layer itself imports without a GPU
    res = CliRunner().invoke(
        cli,
        [
            "generate",
            str(ROOT / "recipes/tiny-llama3.yaml"),
            "--prompt-ids",
            ",".join(map(str, prompt)),
            "--max-new-tokens",
            str(n),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    want = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["tokens"] == want["token_ids"] and len(out["tokens"]) > 0
    assert out["label"] == want["method"]


def test_tree_verify_digest_of_the_copy_equals_the_source_trees(tmp_path):
    """The TensorRT lock records the plugin digest of the tree that built the engines; the repository's copy
    must hash the same (same files, same bytes) or every TensorRT repository would be refused."""
    from builder.engines.tensorrt.lock import plugin_sha256

    dst = tmp_path / "rt"
    R.copy_runtime(dst)
    assert plugin_sha256(dst / "plugins" / "tree_verify") == plugin_sha256() is not None
    assert importlib.util.find_spec("plugins.tree_verify") is not None


def test_repo_stage_key_covers_every_runtime_file():
    """The repo stage's code digest hashes every file the repository carries a copy of, and the bootstrap model.py
    (else a cached repository would keep serving old loop code after an edit): by construction, as the stage declares
    the models as code it copies (`Stage.code`) and its key covers their import closure (`builder.stages.keys`)."""
    from builder.stages.keys import code_files
    from builder.stages.repo import STAGE
    from triton_repo.emit import BOOTSTRAP
    from triton_repo.runtime import runtime_files

    covered = set(code_files(STAGE))
    missing = [f for f in runtime_files() if f not in covered]
    assert not missing, f"the repo stage's key misses these runtime files: {missing}"
    assert BOOTSTRAP.relative_to(R.SOURCE).as_posix() in covered
