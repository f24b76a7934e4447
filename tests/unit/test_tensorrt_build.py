"""The engine folder's build side without TensorRT or a GPU: `build_folder` driven through FakeTensorRT's builder
(a parser that yields the I/O contract's network, a timing cache of text lines, engines the runtime fakes can
open) and a fake device (no GPU: an H200's name and compute capability).

Checked: the timing cache is the host's ($XDG_CACHE_HOME/trtspec/timing/<version>-<gpu>-sm<cc>.cache), never in
the engine folder, loaded before the builds and saved after, atomically (a failed write leaves the old file
and no temporary), and merged with timings another build saved meanwhile; every engine is built against the
I/O contract's types in the export's precision (a float32 `hidden` where bfloat16 is due is refused);
engine.json records both precisions and the version lock; `check_lock` refuses another TensorRT, another
compute capability or other plugin code, naming both sides.
"""

from __future__ import annotations

import json
import os
import shutil
import types
from pathlib import Path

import pytest
import torch

from builder.engines.tensorrt import build as trt_build
from builder.engines.tensorrt import lock, timing
from builder.engines.tensorrt.folder import TensorrtBuildSettings, build_folder
from builder.errors import UserError
from builder.export.contract import EAGLE, FP8, TARGET, Precision
from tests.unit.test_tensorrt_fakes import FAKE_VERSION, DType, fake_trt  # noqa: F401 (fake_trt: a fixture)

REPO = Path(__file__).resolve().parents[2]
TOKENIZER = REPO / "tests" / "fixtures" / "tiny-llama3" / "base" / "tokenizer.json"
H200 = {"device": "NVIDIA H200 (fake, no GPU)", "compute_capability": [9, 0]}
ARCH = {"num_hidden_layers": 2, "num_key_value_heads": 2, "head_dim": 4, "hidden_size": 8, "vocab_size": 64}
EAGLE_INFO = {"layers": 1, "kv_heads": 2, "head_dim": 4, "hidden": 8, "top_k": 3, "capacity": 24}


class FakeTimingCache:
    """A timing cache as a set of text lines (one per timed layer)."""

    def __init__(self, data: bytes) -> None:
        self.lines = {line for line in bytes(data).decode().splitlines() if line}

    def combine(self, input_cache: "FakeTimingCache", ignore_mismatch: bool) -> bool:
        self.lines |= input_cache.lines
        return True

    def serialize(self) -> memoryview:
        return memoryview("\n".join(sorted(self.lines)).encode())


def install_builder(fake, export: Path, wrong: dict[str, str] | None = None, meanwhile=None) -> list[bytes]:
    """FakeTensorRT's builder: parsing `<graph>.trt.onnx` yields the network of the fake graph registered under
    the folder's name (`wrong`: tensor -> a trt.DataType name that replaces the contract's); building it times
    one layer into the cache and returns that graph's engine. Returns the bytes each build loaded as cache."""
    mod, loaded = fake.module, []

    class ILogger:
        Severity = types.SimpleNamespace(ERROR=1, WARNING=2)

        def __init__(self) -> None:
            pass

    class Network:
        def __init__(self) -> None:
            self.name, self.num_layers = "", 0

        def _tensors(self, io: str) -> list:
            g = fake.graphs[self.name]
            specs = g.contract.specs(io, layers=g.layers, rejection=g.rejection)  # the parser keeps unread inputs
            return [
                types.SimpleNamespace(
                    name=s.name,
                    dtype=DType((wrong or {}).get(s.name) or trt_build.TRT_TYPES[g.precision.resolve(s.dtype)]),
                )
                for s in specs
            ]

        num_inputs = property(lambda self: len(self._tensors("inputs")))
        num_outputs = property(lambda self: len(self._tensors("outputs")))
        get_input = lambda self, i: self._tensors("inputs")[i]  # noqa: E731
        get_output = lambda self, i: self._tensors("outputs")[i]  # noqa: E731

    class OnnxParser:
        def __init__(self, network: Network, logger) -> None:
            self.network = network

        def parse_from_file(self, path: str) -> bool:
            self.network.name = Path(path).parent.name
            return True

    class Config:
        builder_optimization_level = 3

        def create_timing_cache(self, serialized_timing_cache: bytes) -> FakeTimingCache:
            return FakeTimingCache(serialized_timing_cache)

        def set_timing_cache(self, cache: FakeTimingCache, ignore_mismatch: bool) -> bool:
            loaded.append("\n".join(sorted(cache.lines)).encode())
            self.cache = cache
            return True

        def get_timing_cache(self) -> FakeTimingCache:
            return self.cache

        def add_optimization_profile(self, profile) -> int:
            return 0

    class Builder:
        def __init__(self, logger) -> None:
            pass

        def create_network(self, flags: int) -> Network:
            return Network()

        def create_builder_config(self) -> Config:
            return Config()

        def create_optimization_profile(self):
            return types.SimpleNamespace(set_shape=lambda *a: None)

        def build_serialized_network(self, network: Network, config: Config) -> memoryview:
            config.cache.lines.add(f"timed {network.name} on {FAKE_VERSION}")
            if meanwhile is not None:
                meanwhile()
            return memoryview(f"fake-engine:{network.name}".encode())

    mod.ILogger, mod.Builder, mod.OnnxParser, mod.Config = ILogger, Builder, OnnxParser, Config
    mod.NetworkDefinitionCreationFlag = types.SimpleNamespace(STRONGLY_TYPED=1)
    mod.Dims = lambda shape: tuple(shape)
    mod.LayerType = types.SimpleNamespace(QUANTIZE="Q", DEQUANTIZE="DQ")
    mod.DataType = types.SimpleNamespace(FP8=DType("FP8"))
    return loaded


@pytest.fixture
def export(fake_trt, tmp_path, monkeypatch) -> Path:
    """An export folder (export.json, bfloat16 graphs with an FP8 target KV cache, an EAGLE draft), its fake
    graphs registered, a fake H200 and $XDG_CACHE_HOME in tmp."""
    from tests.unit.test_tensorrt_runtime import eagle_graph, target_graph

    monkeypatch.setattr(trt_build, "device_facts", lambda: dict(H200))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    folder = tmp_path / "export"
    for name, graph in (
        ("target-greedy", target_graph()),
        ("target-rejection", target_graph(rejection=True)),
        ("eagle", eagle_graph()),
    ):
        (folder / name).mkdir(parents=True)
        fake_trt.graphs[name] = graph
    info = {
        "variant": "standard",
        "capacity": 24,
        "max_seq_len": 18,
        "medusa": None,
        "eagle": EAGLE_INFO,
        "drafter": {"method": "eagle", "version": 1, "choices": [[0], [1], [0, 0]]},
        "fp8": False,
        "precision": Precision("bfloat16", FP8).as_dict(),
        "draft_precision": Precision("bfloat16", "bfloat16").as_dict(),
        "tensorrt": {
            "greedy": "target-greedy/target.trt.onnx",
            "rejection": "target-rejection/target.trt.onnx",
            "eagle": "eagle/eagle.trt.onnx",
        },
    }
    (folder / "export.json").write_text(json.dumps(info))
    (tmp_path / "tok").mkdir()
    shutil.copy(TOKENIZER, tmp_path / "tok" / "tokenizer.json")
    return folder


def build(export: Path, out: Path) -> dict:
    source = {"architecture": ARCH, "tokenizer": str(export.parent / "tok"), "stop_ids": [0]}
    out.mkdir()
    return build_folder(
        export, source, TensorrtBuildSettings("r.yaml", "h200", (9, 0), max_batch_size=2, max_input_len=8), out
    )


def test_timing_cache_path_is_per_tensorrt_and_gpu_under_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    want = tmp_path / "xdg" / "trtspec" / "timing" / "10.15.1.29-NVIDIA_H200-sm90.cache"
    assert timing.cache_path("10.15.1.29", "NVIDIA H200", (9, 0)) == want
    assert timing.cache_root({"HOME": "/home/u"}) == Path("/home/u/.cache/trtspec/timing")  # XDG unset
    assert timing.cache_root({"HOME": "/home/u", "XDG_CACHE_HOME": "rel"}) == Path("/home/u/.cache/trtspec/timing")
    assert (
        timing.cache_path("10.16.1.11", "NVIDIA H100 80GB HBM3", [9, 0], root=tmp_path).name
        == "10.16.1.11-NVIDIA_H100_80GB_HBM3-sm90.cache"
    )


def test_timing_cache_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "t" / "x.cache"
    timing.write_atomic(path, b"old")

    def broken_fsync(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk full"):
        timing.write_atomic(path, b"new, half written")
    assert path.read_bytes() == b"old" and sorted(p.name for p in path.parent.iterdir()) == ["x.cache"]


def test_FakeTensorRT_no_GPU_build_folder_timing_cache_lock_and_precision(fake_trt, export, tmp_path):
    cache = timing.cache_path(FAKE_VERSION, H200["device"], (9, 0))
    timing.write_atomic(cache, b"timed by an earlier build")

    def another_build_saves() -> None:  # a concurrent build on this host saves its timings mid-way
        if b"other" not in timing.read(cache):
            timing.write_atomic(cache, timing.read(cache) + b"\ntimed by the other build")

    loaded = install_builder(fake_trt, export, meanwhile=another_build_saves)
    meta = build(export, tmp_path / "out")
    assert loaded[0] == b"timed by an earlier build"  # loaded before the first build
    assert timing.read(cache).decode().splitlines() == sorted(
        ["timed by an earlier build", "timed by the other build"]
        + [f"timed {g} on {FAKE_VERSION}" for g in ("eagle", "target-greedy", "target-rejection")]
    )
    assert not list(cache.parent.glob(".*.tmp")) and not list((tmp_path / "out").rglob("*.cache"))
    assert str(tmp_path / "out") not in json.dumps(meta)  # no build-host path of the cache in engine.json
    assert meta["engines"]["greedy"]["timing_cache"]["file"] == cache.name
    assert meta["precision"] == {"act": "bfloat16", "kv": FP8} and meta["draft_precision"]["kv"] == "bfloat16"
    assert meta["tensorrt"] == {
        "version": FAKE_VERSION,
        "device": H200["device"],
        "compute_capability": [9, 0],
        "plugin": {"id": "trtspec::TreeVerify", "sha256": lock.plugin_sha256(), "files": list(lock.PLUGIN_FILES)},
    }
    assert meta["engines"]["greedy"]["io"]["past_key_0"]["dtype"] == "FP8"
    assert meta["engines"]["eagle"]["io"]["hidden_in"]["dtype"] == "BF16"
    assert meta["engines"]["rejection"]["device_memory_max_bytes"] == 5000
    assert json.loads((tmp_path / "out" / "engine.json").read_text()) == meta


def test_FakeTensorRT_no_GPU_a_graph_off_the_io_contract_is_refused(fake_trt, export, tmp_path):
    install_builder(fake_trt, export, wrong={"hidden": "FLOAT"})
    with pytest.raises(trt_build.EngineBuildError, match="hidden: FLOAT, the contract says BF16"):
        build(export, tmp_path / "out")
    assert not (tmp_path / "out" / "target-greedy.engine").exists()


def test_version_lock_names_what_differs(tmp_path):
    meta = {"tensorrt": lock.engine_lock("10.15.1.29", "NVIDIA H200", (9, 0))}
    digest = lock.plugin_sha256()
    assert digest is not None and len(digest) == 64
    lock.check_lock(meta, lock.Host("10.15.1.29", "NVIDIA H200", (9, 0), digest))
    lock.check_lock(meta, lock.Host("10.15.1", "NVIDIA H200", (9, 0), digest))  # the components both spell out
    cases = {  # host -> what check_lock must say differs
        lock.Host("10.15.0.1", "NVIDIA H200", (9, 0), digest): "TensorRT differs",
        lock.Host("10.16.1.11", "NVIDIA H200", (9, 0), digest): "TensorRT differs",
        lock.Host(None, None, None, digest): "TensorRT differs; the engines need an sm90 GPU",
        lock.Host("10.15.1.29", "NVIDIA L40S", (8, 9), digest): "the engines need an sm90 GPU",
        lock.Host("10.15.1.29", "NVIDIA H200", (9, 0), "0" * 64): "the tree_verify plugin code differs",
    }
    for host, says in cases.items():
        with pytest.raises(UserError, match=f"\\({says}\\)") as err:
            lock.check_lock(meta, host)
        assert "TensorRT 10.15.1.29, NVIDIA H200 (sm90)" in str(err.value) and host.describe() in str(err.value)
    with pytest.raises(UserError, match="no tensorrt .* lock"):
        lock.check_lock({"tensorrt": {"version": "10.15.1.29"}}, lock.Host("10.15.1.29", "x", (9, 0), digest))


def test_host_facts_here_no_GPU_no_tensorrt():
    from builder.engines.tensorrt.probe import missing

    if missing() is None or torch.cuda.is_available():
        pytest.skip("this host has TensorRT or a GPU")
    here = lock.host_facts()  # tensorrt-stubs make `import tensorrt` succeed without a version
    assert here == lock.Host(None, None, None, lock.plugin_sha256())
    with pytest.raises(UserError, match="TensorRT differs; the engines need an sm90 GPU"):
        lock.check_lock({"tensorrt": lock.engine_lock("10.15.1.29", "NVIDIA H200", (9, 0))}, here)


def test_plugin_digest_follows_the_plugin_code(tmp_path):
    src = lock.plugin_folder()
    assert src is not None
    copy = tmp_path / "tree_verify"
    copy.mkdir()
    for name in lock.PLUGIN_FILES:
        shutil.copy(src / name, copy / name)
    assert lock.plugin_sha256(copy) == lock.plugin_sha256()
    (copy / "kernel.py").write_text((copy / "kernel.py").read_text() + "\n# changed\n")
    assert lock.plugin_sha256(copy) != lock.plugin_sha256()
    (copy / "trt_plugin.py").unlink()
    assert lock.plugin_sha256(copy) is None


def test_contract_io_dtypes_cover_every_graph_of_an_export():
    from builder.engines.tensorrt.folder import graph_io_dtypes, precisions

    info = {
        "medusa": None,
        "eagle": EAGLE_INFO,
        "precision": Precision("float16", FP8).as_dict(),
        "draft_precision": Precision("float16", "float16").as_dict(),
    }
    got = graph_io_dtypes(info, {"layers": 2}, precisions(info))
    assert set(got) == {"greedy", "rejection", "eagle"}
    assert set(got["greedy"]) == {s.name for io in ("inputs", "outputs") for s in TARGET.specs(io, layers=2)}
    assert {"temperature", "uniforms"} <= set(got["rejection"]) and "temperature" not in got["greedy"]
    assert set(got["eagle"]) == {s.name for io in ("inputs", "outputs") for s in EAGLE.specs(io, layers=1)}
    assert got["greedy"]["present_value_1"] == "FP8" and got["greedy"]["hidden"] == got["eagle"]["past_key_0"] == "HALF"
    assert precisions({}) == (Precision(), Precision())  # an export that predates precisions: float32
