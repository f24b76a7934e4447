"""GPU serving's CPU-checkable half, with FakeTensorRT + FakeCuda standing in for what is physically absent here
(no TensorRT, no GPU: tests/unit/test_tensorrt_fakes.py says what the fakes compute and why they may be trusted).
Nothing here claims TensorRT or a GPU ran.

* the one backend-neutral `builder.engines.folder.open_engine` dispatches on engine.json's backend: a TensorRT
  folder opens through the TensorRT host layer and decodes, through the decoding loop, exactly the fake target's
  greedy continuation (argmax(token) = token + 1), with and without a drafter; a GPU index on a host without one
  is refused by name; unknown backends and formats are refused naming the allowed ones;
* the repo stage runs after a TensorRT engine: an H100 recipe's repository around the fake folder has spec_decoder
  KIND_GPU on GPU 0, the other models KIND_CPU, the engine files and the runtime inside, no absolute path;
* the version lock at load: `triton_repo.compat.check` passes the host that built the folder and names both
  sides for another TensorRT, compute capability or plugin digest, and another trtspec; a TensorRT folder on a
  KIND_CPU instance is refused; a KIND_GPU instance's device id is the GPU the lock is checked against.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from builder.engines.tensorrt.lock import Host, engine_lock, plugin_sha256
from builder.handoffs import TensorrtEngineJson
from tests.unit.test_tensorrt_fakes import (
    FAKE_VERSION,
    FakeCuda,
    fake_trt,  # noqa: F401 (a fixture)
)
from tests.unit.test_tensorrt_runtime import BF16, BF16_FP8, CAP, KV, MAX_SEQ, C, D, L, V, target_graph

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER = ROOT / "tests" / "fixtures" / "tiny-llama3" / "base" / "tokenizer.json"
H100 = ("NVIDIA H100 80GB HBM3", (9, 0))


def fake_folder(fake, folder: Path, drafter: dict | None = None) -> dict:
    """A TensorRT engine folder as `build_folder` writes it (engine.json, engine files, tokenizer), its engines
    FakeTensorRT graphs; returns engine.json."""
    import builder

    folder.mkdir(parents=True, exist_ok=True)
    path = fake.add(folder, "target-greedy", target_graph((3000, 5000)))
    graph = fake.graphs["target-greedy"]
    shutil.copy(TOKENIZER, folder / "tokenizer.json")
    meta = {
        "format": TensorrtEngineJson.FORMAT,
        "backend": "tensorrt",
        "variant": "standard",
        "recipe": "recipe.yaml",
        "capacity": CAP,
        "max_seq_len": MAX_SEQ,
        "max_batch_size": 2,
        "max_input_len": 8,
        "model": {"layers": L, "kv_heads": KV, "head_dim": D, "hidden": C, "vocab": V},
        "precision": BF16_FP8.as_dict(),
        "draft_precision": BF16.as_dict(),
        "target": {"greedy": path.name, "rejection": None},
        "medusa": None,
        "eagle": None,
        "drafter": drafter or {"method": "lookahead", "window": 1, "ngram": 3, "verification_set": 1},
        "tokenizer": "tokenizer.json",
        "stop_ids": [0],
        "versions": {"trtspec": builder.__version__},
        "tensorrt": engine_lock(FAKE_VERSION, *H100),
        "engines": {
            "greedy": {
                "profiles": [p.as_dict() for p in graph.profiles],
                "device_memory_bytes": graph.memory,
                "device_memory_max_bytes": max(graph.memory),
            }
        },
    }
    (folder / "engine.json").write_text(json.dumps(meta))
    return meta


@pytest.mark.parametrize("drafter", [None, {"method": "none"}])
def test_fake_TensorRT_no_GPU_folder_opens_through_the_neutral_host_layer_and_decodes(fake_trt, tmp_path, drafter):
    from builder.engines.folder import open_engine
    from builder.speculative.decoding import generate
    from builder.speculative.protocols import Sampling

    fake_folder(fake_trt, tmp_path, drafter)
    opened = open_engine(tmp_path, max_batch_size=2, cuda=FakeCuda())
    assert type(opened.engine).__module__ == "builder.engines.tensorrt.target"
    assert opened.tokenizer_path == tmp_path / "tokenizer.json" and opened.stop_ids == [0]
    prompt = [3, 1, 4, 1, 5, 9, 2]
    g = generate(opened.engine, prompt, 9, opened.make_drafter(), Sampling(0.0, 1.0, 0), opened.stop_ids)
    assert g.token_ids == list(range(3, 12))  # the fake target's greedy continuation: 2 + 1, + 2, …
    if opened.drafter.method == "lookahead":
        assert g.steps < len(g.token_ids)  # a counting sequence is what n-gram drafts guess: steps were saved
    else:
        assert g.steps == len(g.token_ids) - 1  # one token per step after the prefill's


def test_fake_TensorRT_no_GPU_a_gpu_index_on_this_host_is_refused_by_name(fake_trt, tmp_path):
    from builder.engines.folder import open_engine

    fake_folder(fake_trt, tmp_path)
    with pytest.raises(ValueError, match="GPU 0 is not visible here"):
        open_engine(tmp_path, device=0)


def test_unknown_backend_or_format_is_refused_naming_the_allowed(tmp_path):
    from builder.engines.folder import read_meta

    for meta, needle in (
        ({"backend": "tvm", "format": 1}, "allowed: onnxruntime, tensorrt"),
        ({"backend": "tensorrt", "format": 7}, f"reads format {TensorrtEngineJson.FORMAT}"),
    ):
        (tmp_path / "engine.json").write_text(json.dumps(meta))
        with pytest.raises(ValueError, match=needle):
            read_meta(tmp_path)
    with pytest.raises(ValueError, match="no engine.json"):
        read_meta(tmp_path / "nowhere")


def test_fake_TensorRT_repo_stage_runs_after_a_TensorRT_engine(fake_trt, tmp_path):
    pytest.importorskip("tritonclient.grpc", reason="the serve extra renders configs")
    from builder.recipe.loader import load_recipe
    from builder.stages.registry import backend_of
    from builder.stages.repo import run
    from builder.stages.stage import StageContext
    from triton_repo.config import parse, pb2
    from triton_repo.runtime import FOLDER, absolute_paths, problems

    meta = fake_folder(fake_trt, tmp_path / "engine")
    loaded = load_recipe(str(ROOT / "recipes/llama3-8b-1xh100-fp8-none.yaml"))
    out = tmp_path / "repo"
    ctx = StageContext(loaded, backend_of(loaded.recipe), "repo", "key", {"engine": tmp_path / "engine"})
    run(ctx, out)
    m, name = pb2(), loaded.recipe.triton.model_name
    configs = {p.parent.name: parse(p.read_text()) for p in out.glob("*/config.pbtxt")}
    assert set(configs) == {name, "preprocessing", "spec_decoder", "postprocessing"}
    kinds = {n: [(g.kind, list(g.gpus)) for g in c.instance_group] for n, c in configs.items()}
    assert kinds.pop("spec_decoder") == [(m.ModelInstanceGroup.KIND_GPU, [0])]
    assert set(map(str, kinds.values())) == {str([(m.ModelInstanceGroup.KIND_CPU, [])])}
    engine = out / "spec_decoder" / "1" / "engine"
    assert (engine / "target-greedy.engine").read_bytes() == b"fake-engine:target-greedy"
    assert json.loads((engine / "engine.json").read_text())["tensorrt"] == meta["tensorrt"]
    for model in configs:
        assert (out / model / "1" / "model.py").is_file() and problems(out / model / "1" / FOLDER) == []
    assert absolute_paths(p.read_text() for p in out.glob("*/config.pbtxt")) == []
    info = json.loads((out / "trtspec-repo.json").read_text())
    assert info["engine"]["backend"] == "tensorrt" and info["settings"]["gpus"] == [0]
    assert ctx.info is not None and ctx.info.engine_backend == "tensorrt" and ctx.info.gpus == [0]


def test_emit_refuses_a_TensorRT_folder_without_gpus_and_an_onnxruntime_one_with_them(tmp_path):
    pytest.importorskip("tritonclient.grpc", reason="the serve extra renders configs")
    from triton_repo.config import RepositorySettings
    from triton_repo.emit import emit

    for backend, gpus, needle in (("tensorrt", (), "give settings.gpus"), ("onnxruntime", (0,), "the CPU")):
        folder = tmp_path / backend
        folder.mkdir()
        (folder / "engine.json").write_text(json.dumps({"format": 1, "backend": backend}))
        with pytest.raises(ValueError, match=needle):
            emit(tmp_path / f"out-{backend}", folder, RepositorySettings(gpus=gpus))


def _meta() -> dict:
    import builder

    return {
        "format": TensorrtEngineJson.FORMAT,
        "backend": "tensorrt",
        "versions": {"trtspec": builder.__version__},
        "tensorrt": engine_lock(FAKE_VERSION, *H100),
    }


def test_fake_TensorRT_version_lock_at_load_names_both_sides():
    from triton_repo.compat import check

    meta, digest = _meta(), plugin_sha256()
    assert check(meta, host=Host(FAKE_VERSION, H100[0], H100[1], digest)) is None
    cases = [
        (
            Host("10.16.0.1", H100[0], H100[1], digest),
            ["TensorRT 10.15.1.29", "TensorRT 10.16.0.1", "TensorRT differs"],
        ),
        (Host(FAKE_VERSION, "NVIDIA A100", (8, 0), digest), ["(sm90)", "NVIDIA A100 (sm80)", "need an sm90 GPU"]),
        (Host(FAKE_VERSION, None, None, digest), ["no GPU", "need an sm90 GPU"]),
        (Host(FAKE_VERSION, H100[0], H100[1], "0" * 64), [digest[:12], "000000000000", "plugin code differs"]),
    ]
    for host, needles in cases:
        msg = check(meta, host=host)
        assert msg is not None and all(n in msg for n in needles), (msg, needles)
    older = {**meta, "versions": {"trtspec": "0.0.9"}}
    msg = check(older, host=Host(FAKE_VERSION, H100[0], H100[1], digest))
    assert "trtspec 0.0.9" in msg and "onnxruntime" not in msg  # a TensorRT folder needs no ONNX Runtime


def test_instance_kind_and_device_decide_the_gpu():
    from triton_repo.compat import instance_gpu

    trt, ort = {"backend": "tensorrt"}, {"backend": "onnxruntime"}
    assert instance_gpu({"model_instance_kind": "GPU", "model_instance_device_id": "1"}, trt) == 1
    assert instance_gpu({"model_instance_kind": "CPU", "model_instance_device_id": "0"}, ort) is None
    with pytest.raises(RuntimeError, match="needs a KIND_GPU instance group"):
        instance_gpu({"model_instance_kind": "CPU", "model_instance_device_id": "0"}, trt)


def test_generate_on_a_GPU_recipe_without_TensorRT_says_why_no_GPU():
    """`trtspec generate` opens a GPU recipe's TensorRT folder through the same neutral host layer; here (no
    TensorRT, no GPU) it stops before building, naming the reason and the engine that does run."""
    from click.testing import CliRunner

    from builder.cli import cli
    from builder.engines.tensorrt.probe import missing

    reason = missing()
    if reason is None:
        pytest.skip("TensorRT is installed here")
    recipe = str(ROOT / "recipes/llama3-8b-1xh100-fp8-none.yaml")
    args = ["generate", recipe, "--prompt-ids", "1,2", "--max-new-tokens", "2", "--json"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 2 and "need TensorRT >= 10.15 on a GPU host" in res.output and reason in res.output
    assert "--engine torch" in res.output
    res = CliRunner().invoke(cli, [*args, "--engine", "onnxruntime"])
    assert res.exit_code == 2 and "builds tensorrt engines, not onnxruntime" in res.output, res.output
