"""Stage hand-offs as typed models with a format (`builder.handoffs`).

The oracle for the models is what the stages really write: each hand-off file of real builds (tiny recipes for
Lookahead, Medusa and EAGLE up to their engine; TensorRT-LLM's build.json from the real command builder) is
read by its model and written back to exactly the same JSON — the model neither drops nor adds anything. Then an
artifact of another format is refused with the rebuild command, never read as if it were ours: a cached stage
output (`trtspec build`, exit 2; `--force` rebuilds it) and a served repository's engine folder (spec_decoder's
load path, with a stand-in for the Triton stub's `triton_python_backend_utils`, which exists only inside
tritonserver). `trtspec pull` is tested in test_ci_publish.py.
"""

from __future__ import annotations

import json
import shutil
import sys
import types
from pathlib import Path

import pytest

from builder.handoffs import (
    ExportJson,
    OrtEngineJson,
    OtherFormat,
    SourceJson,
    TensorrtEngineJson,
    TrtllmBuildJson,
    check_folder,
    read_engine_json,
)
from builder.recipe.loader import load_recipe
from builder.stages.decoders import cache_dir
from builder.stages.runner import build
from tests.unit.recipe_helpers import run

REPO = Path(__file__).resolve().parents[2]
TINY = "recipes/tiny-llama3.yaml"


@pytest.mark.parametrize("recipe", [TINY, "recipes/tiny-llama3-medusa.yaml", "recipes/tiny-llama3-eagle1.yaml"])
def test_models_spell_exactly_the_files_the_stages_write(recipe):
    result = build(load_recipe(REPO / recipe), cache_dir(), until="engine")
    for model, stage in ((SourceJson, "load"), (ExportJson, "export"), (OrtEngineJson, "engine")):
        folder = result.folder(stage)
        written = json.loads((folder / model.FILE).read_text(encoding="utf-8"))
        assert model.read(folder).to_json() == written, (recipe, model.FILE)
        assert written["format"] == model.FORMAT
    engine = json.loads((result.folder("engine") / "engine.json").read_text())
    assert read_engine_json(result.folder("engine")) == engine
    assert ("eagle" in recipe) == (engine["eagle"] is not None) and ("medusa" in recipe) == (
        engine["medusa"] is not None
    )


def test_trtllm_build_json_is_the_command_builders_manifest():
    from builder.recipe.resolve import tree_field
    from builder.trtllm.build_cmd import build_command

    loaded = load_recipe(REPO / "recipes/llama3-8b-1xh100-fp8-trtllm-eagle.yaml")
    cmd = build_command(loaded.recipe, "/ckpt", "/engine", tree_dir=loaded.dir_of(tree_field(loaded.recipe)))
    doc = cmd.manifest()
    assert TrtllmBuildJson.model_validate(doc).to_json() == doc and doc["format"] == TrtllmBuildJson.FORMAT


def _same_size(path: Path, old: str, new: str) -> None:
    """Rewrite one JSON value keeping the file's size (the cache checks sizes on a hit, hashes on a pull)."""
    text = path.read_text(encoding="utf-8")
    assert len(old) == len(new) and text.count(old) == 1
    path.write_text(text.replace(old, new), encoding="utf-8")


def test_a_cached_output_of_another_format_is_refused_naming_the_rebuild(tmp_path):
    cache = tmp_path / "cache"
    recipe = str(REPO / TINY)
    res = run("build", recipe, "--cache-dir", str(cache), "--until", "engine", "--quiet")
    assert res.exit_code == 0, res.output
    (engine,) = (cache / "engine").iterdir()
    _same_size(engine / "engine.json", f'"format": {OrtEngineJson.FORMAT}', '"format": 7')
    res = run("build", recipe, "--cache-dir", str(cache), "--until", "engine", "--quiet")
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert (
        f"{engine / 'engine.json'}: format 7, this trtspec reads format {OrtEngineJson.FORMAT}: built by a newer trtspec"
        in res.output
    )
    assert f"rebuild with `trtspec build {recipe} --force`" in res.output
    res = run("build", recipe, "--cache-dir", str(cache), "--until", "engine", "--quiet", "--force")
    assert res.exit_code == 0 and json.loads((engine / "engine.json").read_text())["format"] == OrtEngineJson.FORMAT
    (export,) = (cache / "export").iterdir()
    _same_size(export / "export.json", f'"format": {ExportJson.FORMAT}', '"format": 0')
    res = run("build", recipe, "--cache-dir", str(cache), "--until", "engine", "--quiet")
    assert (
        res.exit_code == 2
        and f"export.json: format 0, this trtspec reads format {ExportJson.FORMAT}: built by an older" in res.output
    )


@pytest.fixture
def fake_pb_utils(monkeypatch):
    """A stand-in for `triton_python_backend_utils`, the module tritonserver's Python stub provides (absent
    outside the server): only what spec_decoder reads at import."""
    stub = types.ModuleType("triton_python_backend_utils")
    stub.TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", stub)
    monkeypatch.delitem(sys.modules, "triton_repo.models.spec_decoder", raising=False)
    return stub


def test_serving_refuses_an_engine_folder_of_another_format(tmp_path, fake_pb_utils):
    from builder.engines.folder import read_meta

    repo = tmp_path / "repo"
    shutil.copytree(build(load_recipe(REPO / TINY), cache_dir(), until="repo").folder("repo"), repo)
    engine = repo / "spec_decoder" / "1" / "engine"
    meta = read_meta(engine)  # as built: read
    from triton_repo.models.spec_decoder import Model

    args = {"model_name": "spec_decoder", "model_repository": str(repo / "spec_decoder"), "model_version": "1"}
    _same_size(engine / "engine.json", f'"format": {OrtEngineJson.FORMAT}', '"format": 0')
    with pytest.raises(ValueError) as exc:
        Model(args, {"engine_dir": "engine"})
    assert isinstance(exc.value, OtherFormat)
    assert str(exc.value).startswith(
        f"{engine / 'engine.json'}: format 0, this trtspec reads format {OrtEngineJson.FORMAT}: built by an"
    )
    assert f"rebuild with `trtspec build {meta['recipe']} --force`" in str(exc.value)


def test_check_folder_reads_every_handoff_and_leaves_the_bundle_lock_alone(tmp_path):
    ExportJson.model_validate(
        {
            "format": ExportJson.FORMAT,
            "variant": "ort",
            "capacity": 64,
            "max_seq_len": 48,
            "drafter": {"method": "none"},
            "medusa": None,
            "eagle": None,
            "fp8": False,
            "precision": {"act": "float32", "kv": "float32"},
            "draft_precision": {"act": "float32", "kv": "float32"},
            "draft_weights": None,
        }
    ).write(tmp_path)
    (tmp_path / "engine.json").write_text(json.dumps({"format": 1, "backend": "trtllm", "files": []}))
    check_folder(tmp_path)  # TensorRT-LLM's engine.json is the bundle's lock (plain JSON, checked there)
    (tmp_path / "engine.json").write_text(json.dumps({"format": 1, "backend": "tvm"}))
    with pytest.raises(OtherFormat, match="backend 'tvm' is none this trtspec opens"):
        check_folder(tmp_path)
    (tmp_path / "engine.json").unlink()
    data = json.loads((tmp_path / "export.json").read_text())
    (tmp_path / "export.json").write_text(json.dumps({**data, "capacity": "lots"}))
    with pytest.raises(OtherFormat, match=rf"not a format {ExportJson.FORMAT} export.json \(capacity: "):
        check_folder(tmp_path, "r.yaml")
    (tmp_path / "export.json").write_text(json.dumps({**data, "surprise": 1}))
    with pytest.raises(OtherFormat, match="rebuild with `trtspec build r.yaml --force`"):
        check_folder(tmp_path, "r.yaml")


def test_engine_folder_formats_are_the_models():
    from builder.engines.folder import FORMATS

    assert FORMATS == {"onnxruntime": OrtEngineJson.FORMAT, "tensorrt": TensorrtEngineJson.FORMAT}
