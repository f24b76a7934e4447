"""Stages and backends as declared units (`builder.stages.stage`, `builder.stages.registry`, `builder.stages.keys`).

A stage's cache key covers its code by construction: the import closure of its module (lazy imports inside
functions included, `if TYPE_CHECKING:` blocks not), plus the modules it copies (`Stage.code`). Tested three ways:
against a hand-made source tree whose closure is written out by hand, every file edited in turn (the key changes
exactly for the files of the closure); against Python itself (every project module that importing a stage module
really imports is in its closure); and on a copy of the real tree, every module of the export stage's closure edited
in turn (its key changes) and modules outside it (it does not). The backend registry: each backend's stages in
order, an unknown backend refused with exit 2 naming target.backend, every declared field path a recipe field,
each backend's engine lock refusing a host that differs (hosts are stand-ins: no GPU, TensorRT or TensorRT-LLM
here).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from builder.errors import UserError
from builder.handoffs import OrtEngineJson, TensorrtEngineJson
from builder.recipe.loader import load_recipe
from builder.stages.keys import SourceTree, code_digest, code_files, plan_stages
from builder.stages.registry import BACKENDS, backend, stage_order
from builder.stages.stage import Stage
from tests.unit.recipe_helpers import run

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("builder", "plugins", "triton_repo")

SYNTHETIC = {  # a stage module with every kind of import the closure must follow (or not)
    "builder/__init__.py": "",
    "builder/stages/__init__.py": "",
    "builder/stages/thing.py": textwrap.dedent(
        """
        from typing import TYPE_CHECKING

        from builder import shared
        from . import sibling

        if TYPE_CHECKING:
            from builder import typing_only


        def run(ctx, out):
            from builder.heavy import work  # lazy, as stages import torch-heavy code
            import plugins.kernel as k
        """
    ),
    "builder/stages/sibling.py": "",
    "builder/shared.py": "from . import leaf\nimport numpy\n",
    "builder/leaf.py": "",
    "builder/heavy/__init__.py": "",
    "builder/heavy/work.py": "def f():\n    from builder.heavy import deeper\n",
    "builder/heavy/deeper.py": "",
    "builder/typing_only.py": "",
    "builder/unrelated.py": "from builder import leaf\n",
    "plugins/__init__.py": "",
    "plugins/kernel.py": "",
    "plugins/other.py": "",
    "triton_repo/__init__.py": "",
    "triton_repo/copied.py": "from builder import leaf\n",
    "triton_repo/aside.py": "",
}
CLOSURE = {  # written out by hand: what importing thing.py and running `run` may execute, and the copied module
    "builder/__init__.py",
    "builder/stages/__init__.py",
    "builder/stages/thing.py",
    "builder/stages/sibling.py",
    "builder/shared.py",
    "builder/leaf.py",
    "builder/heavy/__init__.py",
    "builder/heavy/work.py",
    "builder/heavy/deeper.py",
    "plugins/__init__.py",
    "plugins/kernel.py",
    "triton_repo/__init__.py",
    "triton_repo/copied.py",
}


def synthetic_stage(module: str, code: tuple[str, ...] = ()) -> Stage:
    def run(ctx, out):  # noqa: ANN001 - only its module matters
        pass

    run.__module__ = module
    return Stage("thing", "a synthetic stage", (), (), (), run, info=object, code=code)  # type: ignore[arg-type]


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def test_closure_key_changes_with_every_module_it_reaches_and_with_no_other(tmp_path):
    root = write_tree(tmp_path, SYNTHETIC)
    stage = synthetic_stage("builder.stages.thing", code=("triton_repo.copied",))
    assert set(code_files(stage, root)) == CLOSURE
    before = code_digest(stage, root)
    for rel in sorted(SYNTHETIC):
        path = root / rel
        text = path.read_text()
        path.write_text(text + "\n# edited\n")
        changed = code_digest(stage, root) != before
        path.write_text(text)
        assert changed == (rel in CLOSURE), rel
    assert code_digest(stage, root) == before
    # a module the stage starts to import (lazily) joins its key without anyone listing it
    thing = root / "builder/stages/thing.py"
    thing.write_text(thing.read_text() + "    from builder import unrelated\n")
    assert "builder/unrelated.py" in code_files(stage, root)


STAGES = {s.module: s for b in BACKENDS.values() for s in b.stages}  # each stage module once


@pytest.mark.parametrize("module", sorted(STAGES))
def test_a_stage_closure_holds_every_module_python_imports_for_it(module):
    """The independent oracle: a fresh interpreter imports the stage module; every project module that lands in
    sys.modules is in the stage's code files (the closure also holds what `run` imports lazily, which this cannot
    see)."""
    code = (
        f"import sys, json; import {module}; "
        f"print(json.dumps(sorted(m for m in sys.modules if m.partition('.')[0] in {PACKAGES!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    files = set(code_files(STAGES[module]))

    def rel(m: str) -> str:
        base = m.replace(".", "/")
        return f"{base}/__init__.py" if (REPO / base / "__init__.py").is_file() else f"{base}.py"

    missing = [m for m in json.loads(out.stdout) if rel(m) not in files]
    assert not missing, f"{module}: imported but not in its key: {missing}"


def test_export_stage_key_follows_its_closure_on_a_copy_of_the_tree(tmp_path):
    """Every module of the export stage's closure (its lazily imported exporters among them) changes its key when
    edited; modules of the other stages, the runner and the serving runtime do not."""
    for pkg in PACKAGES:
        shutil.copytree(REPO / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    stage = backend("onnxruntime").stage("export")
    files = code_files(stage, tmp_path)
    assert files == code_files(stage)  # the copy is the tree
    for lazy in ("builder/export/target.py", "builder/quantize/quality.py", "builder/engines/ort/build.py"):
        assert lazy in files, lazy  # imported inside functions only
    outside = [
        "builder/stages/runner.py",
        "builder/stages/keys.py",
        "builder/stages/registry.py",
        "builder/stages/engine.py",
        "builder/stages/repo.py",
        "builder/stages/backends/trtllm/engine.py",
        "triton_repo/scheduler.py",
        "builder/tune/run.py",
    ]
    assert not set(outside) & set(files)
    parsed: dict[str, list] = {}  # imports by file content, shared: each edit re-parses only the file it touched
    before = SourceTree(tmp_path, parsed).digest(stage)
    assert before == code_digest(stage, tmp_path)
    for rel in [*files, *outside]:
        path = tmp_path / rel
        data = path.read_bytes()
        path.write_bytes(data + b"\n# edited\n")
        changed = SourceTree(tmp_path, parsed).digest(stage) != before
        path.write_bytes(data)
        assert changed == (rel in files), rel


EXPECTED = {
    "onnxruntime": ["load", "quantize", "export", "engine", "repo"],
    "tensorrt": ["load", "quantize", "export", "engine", "repo"],
    "trtllm": ["load", "quantize", "checkpoint", "engine", "repo"],
    "trtllm-llmapi": ["load", "quantize", "checkpoint", "repo"],
}


def test_each_backend_declares_its_stages_in_order():
    assert {name: [s.name for s in b.stages] for name, b in BACKENDS.items()} == EXPECTED
    assert stage_order() == ("load", "quantize", "export", "checkpoint", "engine", "repo")
    for b in BACKENDS.values():
        before: set[str] = set()
        for s in b.stages:
            assert set(s.needs) <= before and set(s.optional) <= before, (b.name, s.name)
            before.add(s.name)


@pytest.mark.parametrize(
    "recipe,sets,planned",
    [
        ("recipes/tiny-llama3.yaml", (), ["load", "export", "engine", "repo"]),
        ("recipes/tiny-llama3-fp8.yaml", (), ["load", "quantize", "export", "engine", "repo"]),
        ("recipes/llama3-8b-1xh100-fp8-eagle.yaml", (), ["load", "quantize", "export", "engine", "repo"]),
        ("recipes/tiny-llama3-trtllm-none.yaml", (), ["load", "checkpoint", "engine", "repo"]),
        ("recipes/llama3-8b-1xh100-fp8-trtllm-medusa.yaml", (), ["load", "quantize", "checkpoint", "engine", "repo"]),
    ],
)
def test_plan_asks_the_recipes_backend(recipe, sets, planned):
    loaded = load_recipe(REPO / recipe, sets)
    stages = plan_stages(loaded)
    assert [s.name for s in stages] == planned
    want = BACKENDS[loaded.recipe.target.engine_backend]
    assert all(s.stage is want.stage(s.name) for s in stages)
    assert [s.upstream for s in stages] == [None, *(s.key for s in stages[:-1])]


def test_an_unknown_backend_is_refused_naming_target_backend():
    with pytest.raises(UserError) as exc:
        backend("tvm")
    assert exc.value.field == "target.backend" and exc.value.allowed == "onnxruntime, tensorrt, trtllm, trtllm-llmapi"
    res = run("plan", str(REPO / "recipes/tiny-llama3.yaml"), "--set", "target.backend=tvm")
    assert res.exit_code == 2 and "target.backend" in res.output and "Traceback" not in res.output


def _fields(model: type) -> set[str]:
    """Every dotted field path of a pydantic model (union members' fields too)."""
    from typing import get_args

    from pydantic import BaseModel

    out: set[str] = set()
    for name, info in model.model_fields.items():
        out.add(name)
        kinds = [info.annotation, *get_args(info.annotation)]
        kinds += [a for k in list(kinds) for a in get_args(k)]
        for k in kinds:
            if isinstance(k, type) and issubclass(k, BaseModel):
                out |= {f"{name}.{sub}" for sub in _fields(k)}
    return out


def test_declared_reads_are_recipe_fields_and_each_stage_module_declares_one_stage():
    import importlib

    from builder.recipe.schema import Recipe

    fields = _fields(Recipe)
    for b in BACKENDS.values():
        for s in b.stages:
            assert set(s.reads) <= fields, (b.name, s.name, set(s.reads) - fields)
            module = importlib.import_module(s.module)
            declared = [v for v in vars(module).values() if isinstance(v, Stage)]
            assert declared == [s], s.module


def test_trtllm_repo_stage_declares_the_model_files_it_copies():
    from builder.stages.backends.trtllm.repo import MODEL_FILES
    from triton_repo.trtllm.render import MODEL_FILES as COPIED

    assert sorted(MODEL_FILES) == sorted(f"triton_repo.trtllm.models.{Path(f).stem}" for f in COPIED.values())
    files = code_files(backend("trtllm").stage("repo"))
    assert all(f"triton_repo/trtllm/models/{f}" in files for f in COPIED.values())


def test_onnxruntime_lock_refuses_another_onnxruntime():
    import onnxruntime

    import builder

    meta = {"format": OrtEngineJson.FORMAT, "backend": "onnxruntime", "versions": {"trtspec": builder.__version__}}
    ok = {**meta, "versions": {**meta["versions"], "onnxruntime": onnxruntime.__version__}}
    assert backend("onnxruntime").lock.check(ok, None) is None
    other = {**meta, "versions": {**meta["versions"], "onnxruntime": "0.0.1"}}
    problem = backend("onnxruntime").lock.check(other, None)
    assert problem is not None and "onnxruntime 0.0.1" in problem and "rebuild" in problem


def test_tensorrt_lock_refuses_a_stand_in_host_of_another_compute_capability():
    import builder
    from builder.engines.tensorrt.lock import Host, engine_lock, plugin_sha256

    meta = {
        "format": TensorrtEngineJson.FORMAT,
        "backend": "tensorrt",
        "versions": {"trtspec": builder.__version__},
        "tensorrt": engine_lock("10.15.1.29", "NVIDIA H100 80GB HBM3", (9, 0)),
    }
    same = Host("10.15.1.29", "NVIDIA H100 80GB HBM3", (9, 0), plugin_sha256())
    assert backend("tensorrt").lock.check(meta, same) is None
    problem = backend("tensorrt").lock.check(meta, dataclasses.replace(same, compute_capability=(8, 0)))
    assert problem is not None and "sm90" in problem


def test_trtllm_lock_refuses_a_stand_in_host_of_another_release():
    from builder.trtllm.compat import Installed

    meta = {
        "format": 1,
        "backend": "trtllm",
        "tensorrt_llm": "1.2.1",
        "tensorrt": "10.14.1.48",
        "gpu": {"name": "NVIDIA H100", "compute_capability": [9, 0], "device": "h100"},
        "world_size": 2,
    }
    assert backend("trtllm").lock.check(meta, Installed("1.2.1", "10.14.1.48", ((9, 0), (9, 0)))) is None
    problem = backend("trtllm").lock.check(meta, Installed("1.2.0", "10.14.1.48", ((9, 0), (9, 0))))
    assert problem is not None and "TensorRT-LLM differs" in problem
    problem = backend("trtllm").lock.check(meta, Installed("1.2.1", "10.14.1.48", ((9, 0),)))
    assert problem is not None and "needs 2 sm90 GPU(s), found 1" in problem


def test_only_the_backend_that_reads_safetensors_keys_the_load_stage_by_it():
    """The load stage writes a safetensors copy of a pickled checkpoint only for a backend whose converter reads
    safetensors only: a different output, so a different key; the other backends share one load stage."""

    def load_key(*sets: str) -> str:
        return plan_stages(load_recipe(REPO / "recipes/tiny-llama3-trtllm-none.yaml", sets))[0].key

    assert backend("trtllm").safetensors_only and not backend("tensorrt").safetensors_only
    assert load_key() != load_key("target.backend=tensorrt")
    gpu = plan_stages(load_recipe(REPO / "recipes/tiny-llama3-trtllm-none.yaml", ("target.backend=tensorrt",)))
    assert "backend.safetensors_only" not in gpu[0].inputs


def test_every_backend_names_a_memory_plan_that_plan_runs():
    from builder.plan.report import MEMORY_PLANS, build_report

    assert {b.memory_plan for b in BACKENDS.values()} <= set(MEMORY_PLANS)
    own = build_report(load_recipe(REPO / "recipes/llama3-8b-1xh100-fp8-eagle.yaml"), "/nonexistent")["memory"]
    paged = build_report(load_recipe(REPO / "recipes/llama3-8b-1xh100-fp8-trtllm-eagle.yaml"), "/nonexistent")["memory"]
    assert own.get("layout") and "per-slot contiguous" in own["layout"]  # `builder.plan.own_engines`
    assert not paged.get("layout") and paged["kv_blocks"] > 0  # paged KV blocks (`builder.plan.memory`)
