"""`trtspec build` of a GPU recipe on a machine without TensorRT, and what the GPU build will use.

A tiny random HF checkpoint in a temporary folder and a recipe targeting one H100 (no quantization):
the build caches load and export (the export with the graphs' TensorRT form beside the ONNX Runtime
ones), stops before the engine stage with exit code 3, says why and prints the command that resumes on
a GPU host; a second run finds everything up to there cached and stops the same way.

The GPU build itself (TensorRT parsing, building, running) happens only on a GPU host with TensorRT
(scripts/gpu_check.sh). Here: the optimization profiles derived from the cached export must name exactly
the TensorRT-form graphs' inputs, with their cache shapes; and `FakeTensorRT` — a stand-in `tensorrt`
module that builds nothing — drives `build_engine` into the ONNX parser's failure and a profile that
does not fit the network, to check that the adapter creates a strongly typed network, registers the
plugin before parsing, and reports errors precisely.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import onnx
import pytest

from builder.engines.tensorrt import build as trt_build
from builder.engines.tensorrt.folder import TensorrtBuildSettings, graph_profiles
from builder.engines.tensorrt.profiles import pick
from tests.unit.model_utils import hf_model, save_checkpoint

REPO = Path(__file__).resolve().parents[2]
TOKENIZER = REPO / "tests" / "fixtures" / "tiny-llama3" / "base" / "tokenizer.json"
RECIPE = """\
model: {family: llama3, checkpoint: ./ckpt, dtype: fp32}
quantization: {mode: none}
target: {device: h100, gpus: 1}
build: {max_batch_size: 2, max_input_len: 32, max_seq_len: 64, max_num_tokens: 128}
speculative: {method: lookahead, window: 3, ngram: 3, verification_set: 3}
"""


@pytest.fixture(scope="module")
def recipe(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("gpu_recipe")
    save_checkpoint(hf_model(seed=2, num_hidden_layers=2), home / "ckpt")
    shutil.copy(TOKENIZER, home / "ckpt" / "tokenizer.json")
    (home / "recipe.yaml").write_text(RECIPE)
    return home / "recipe.yaml"


def trtspec_build(recipe: Path, cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "builder.cli", "build", str(recipe), "--cache-dir", str(cache), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**os.environ, "TRTSPEC_CACHE_DIR": str(cache)},
    )


@pytest.fixture(scope="module")
def stopped(recipe, tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    return cache, trtspec_build(recipe, cache), trtspec_build(recipe, cache)


def test_gpu_recipe_exits_3_after_caching_load_and_export(recipe, stopped):
    from builder.engines.tensorrt.probe import missing

    if missing() is None:
        pytest.skip("TensorRT is installed here: the build would not stop")
    cache, first, second = stopped
    for run, status in ((first, "built"), (second, "cached")):
        assert run.returncode == 3, run.stderr
        summary = json.loads(run.stdout)
        assert [(s["stage"], s["status"]) for s in summary["stages"]] == [("load", status), ("export", status)]
        assert "needs TensorRT >= 10.15 on a GPU host" in summary["stopped"]
        assert "target h100" in summary["stopped"] and missing() in summary["stopped"]
        assert f"Resume on a GPU host: trtspec build {recipe} --cache-dir {cache}" in run.stderr
        assert "Built and cached: load, export." in run.stderr and "Traceback" not in run.stderr
    assert not (cache / "engine").exists() or not [
        p for p in (cache / "engine").iterdir() if not p.name.startswith(".")
    ]


def test_the_cached_export_holds_the_tensorrt_form(stopped):
    cache = stopped[0]
    (export,) = [p for p in (cache / "export").iterdir() if not p.name.startswith(".")]
    info = json.loads((export / "export.json").read_text())
    assert info["tensorrt"] == {
        "greedy": "target-greedy/target.trt.onnx",
        "rejection": "target-rejection/target.trt.onnx",
    }
    for rel in info["tensorrt"].values():
        model = onnx.load(str(export / rel), load_external_data=False)
        assert {n.domain for n in model.graph.node} == {"", "trt", "trtspec"}


def test_profiles_name_the_tensorrt_graphs_inputs_with_their_shapes(stopped):
    """What the GPU build will pass TensorRT, derived from the cached export (as `build_folder` does)."""
    cache = stopped[0]
    (export,) = [p for p in (cache / "export").iterdir() if not p.name.startswith(".")]
    info = json.loads((export / "export.json").read_text())
    (load,) = [p for p in (cache / "load").iterdir() if not p.name.startswith(".")]
    arch = json.loads((load / "source.json").read_text())["architecture"]
    model = {
        "layers": arch["num_hidden_layers"],
        "kv_heads": arch["num_key_value_heads"],
        "head_dim": arch["head_dim"],
        "hidden": arch["hidden_size"],
        "vocab": arch["vocab_size"],
    }
    profiles = graph_profiles(
        info, model, TensorrtBuildSettings("r.yaml", "h100", (9, 0), max_batch_size=2, max_input_len=32)
    )
    assert set(profiles) == {"greedy", "rejection"}
    for mode, rel in info["tensorrt"].items():
        graph = onnx.load(str(export / rel), load_external_data=False).graph
        declared = {i.name: [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim] for i in graph.input}
        for profile in profiles[mode]:
            assert set(profile.shapes) == set(declared), (mode, profile.name)
            for name, (lo, _opt, hi) in profile.shapes.items():
                fixed = [(i, d) for i, d in enumerate(declared[name]) if isinstance(d, int)]
                assert all(lo[i] == d == hi[i] for i, d in fixed), (name, declared[name], lo, hi)
    greedy = profiles["greedy"]
    max_nodes = info["capacity"] - info["max_seq_len"]
    cache_shape = (2, model["kv_heads"], info["capacity"], model["head_dim"])
    step = {
        "tokens": (2, max_nodes),
        "tree_mask": (2, max_nodes, max_nodes),
        "verify_index": (2, max_nodes),
        "paths": (2, max_nodes, max_nodes),
        "past_key_0": cache_shape,
    }
    prompt = {"tokens": (1, 32), "tree_mask": (1, 32, 32), "verify_index": (1, 1), "paths": (1, 1, 1)}
    assert [p.name for p in greedy] == ["step", "prefill"]
    assert pick(greedy, step) == 0 and pick(greedy, prompt) == 1
    with pytest.raises(ValueError, match=r"tokens \[1, 33\] not in \[1, 1\]\.\.\[2, 32\]"):
        pick(greedy, {**prompt, "tokens": (1, 33)})


# -- FakeTensorRT: the adapter's control flow up to TensorRT's answers (nothing is built) ------------------


class FakeTensorRT:
    """A `tensorrt` module that records what `build_engine` asks for and answers as a failing parser would."""

    def __init__(self, parse_ok: bool, network_inputs: tuple[str, ...] = ()) -> None:
        self.calls: list[str] = []
        calls = self.calls
        mod = self.module = types.ModuleType("tensorrt")
        mod.__version__ = "10.15.1"

        class Level(int):
            name = "ERROR"

        class ILogger:
            Severity = types.SimpleNamespace(ERROR=Level(1), WARNING=Level(2))

            def __init__(self) -> None:
                calls.append("logger")

        class Error:
            node, node_name, node_operator = (lambda s: 17), (lambda s: "layer0/Attention"), (lambda s: "Attention")
            desc, code = (lambda s: "no importer for this attribute"), (lambda s: "UNSUPPORTED_NODE")
            file, line, func = (lambda s: "onnxOpImporters.cpp"), (lambda s: 42), (lambda s: "importAttention")

        class Network:
            num_inputs, num_layers = len(network_inputs), 0

            def get_input(self, i):
                return types.SimpleNamespace(name=network_inputs[i])

        class OnnxParser:
            num_errors = 1

            def __init__(self, network, logger) -> None:
                calls.append("parser")

            def parse_from_file(self, path: str) -> bool:
                calls.append(f"parse {Path(path).name}")
                return parse_ok

            def get_error(self, i):
                return Error()

        class Builder:
            def __init__(self, logger) -> None:
                calls.append("builder")

            def create_network(self, flags: int):
                calls.append(f"network flags={flags}")
                return Network()

            def create_builder_config(self):
                raise AssertionError("FakeTensorRT builds nothing")

        mod.ILogger, mod.Builder, mod.OnnxParser = ILogger, Builder, OnnxParser
        mod.NetworkDefinitionCreationFlag = types.SimpleNamespace(STRONGLY_TYPED=1)
        self.network = Network()


@pytest.fixture
def fake_trt(monkeypatch):
    def install(parse_ok: bool, network_inputs: tuple[str, ...] = ()) -> FakeTensorRT:
        fake = FakeTensorRT(parse_ok, network_inputs)
        monkeypatch.setitem(sys.modules, "tensorrt", fake.module)
        return fake

    return install


def test_FakeTensorRT_parser_errors_are_reported_with_node_and_source(fake_trt, tmp_path):
    fake = fake_trt(parse_ok=False)
    with pytest.raises(trt_build.EngineBuildError) as err:
        trt_build.build_engine(
            tmp_path / "target.trt.onnx",
            tmp_path / "target.engine",
            fp8=False,
            profiles=[],
            timing_cache=None,
            plugin=lambda: fake.calls.append("plugin"),
        )
    assert fake.calls == ["plugin", "logger", "builder", "network flags=2", "parser", "parse target.trt.onnx"]
    assert str(err.value).splitlines() == [
        f"{tmp_path / 'target.trt.onnx'}: TensorRT's ONNX parser failed (1 error(s))",
        "  node #17 'layer0/Attention' (Attention): no importer for this attribute "
        "[UNSUPPORTED_NODE; onnxOpImporters.cpp:42 importAttention]",
    ]  # the network flag is 1 << STRONGLY_TYPED
    assert not (tmp_path / "target.engine").exists()


def test_FakeTensorRT_a_profile_must_name_exactly_the_network_inputs(fake_trt):
    from builder.engines.tensorrt.profiles import Profile

    fake = fake_trt(parse_ok=True, network_inputs=("tokens", "past_key_0"))
    profile = Profile("step", {"tokens": ((1, 1), (2, 4), (2, 4)), "uniforms": ((1, 1), (2, 4), (2, 4))})
    with pytest.raises(
        trt_build.EngineBuildError, match=r"profile 'step' .*missing \['past_key_0'\], unknown \['uniforms'\]"
    ):
        trt_build.add_profiles(None, None, fake.network, [profile])
