"""Fakes of what is physically absent here — TensorRT (`FakeTensorRT`) and a CUDA device (`FakeCuda`) — for the
CPU tests of the TensorRT runtime (tests/unit/test_tensorrt_runtime.py), and the tests that keep the fakes
honest: every TensorRT name they offer exists, as the same kind (class, method, property), in
tensorrt-stubs — so a fake cannot invent API the runtime then relies on.

FakeCuda: "device" memory is CPU torch memory (its addresses are real host addresses), a stream is a handle
number, and every allocation and synchronisation is counted. FakeTensorRT: an engine is a graph of the I/O
contract (`builder.export.contract`) whose `execute_async_v3` reads its inputs from, and writes its outputs
and KV to, the addresses bound on the context — with a trivially specified computation (`target_compute`,
`eagle_compute`), so the tests can tell what the runtime moved where. Its contexts check what TensorRT
requires: a profile selected, input shapes inside that profile, device memory set and large enough, every
tensor bound.
"""

from __future__ import annotations

import ast
import ctypes
import math
import sys
import types
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from builder.engines.tensorrt.build import TRT_TYPES
from builder.engines.tensorrt.profiles import Profile
from builder.export.contract import GraphContract, Precision, numpy_dtype

FAKE_VERSION = "10.15.1.29"
DROPPED = {"num_nodes", "num_new"}  # inputs the TensorRT form never reads: TensorRT drops them from the engine


# -- FakeCuda ---------------------------------------------------------------------------------------------


@dataclass
class FakeStream:
    handle: int


class FakeCuda:
    """The runtime's `CudaApi` on the CPU, counting allocations and synchronisations."""

    def __init__(self) -> None:
        self.streams: list[FakeStream] = []
        self.device: list[Any] = []  # every device allocation (torch uint8 tensors)
        self.pinned: list[Any] = []  # every page-locked host allocation
        self.syncs = 0

    def new_stream(self) -> FakeStream:
        self.streams.append(FakeStream(0x5EED0 + len(self.streams)))  # never 0 (legacy) or 2 (per-thread default)
        return self.streams[-1]

    def stream_handle(self, stream: FakeStream) -> int:
        return stream.handle

    def on(self, stream: FakeStream) -> Any:
        assert stream in self.streams
        return nullcontext()

    def synchronize(self, stream: FakeStream) -> None:
        assert stream in self.streams
        self.syncs += 1

    def device_bytes(self, nbytes: int) -> Any:
        import torch

        self.device.append(torch.full((max(nbytes, 1),), 0xA5, dtype=torch.uint8))  # not zeros: nothing relies on it
        return self.device[-1]

    def pinned_bytes(self, nbytes: int) -> Any:
        import torch

        self.pinned.append(torch.full((max(nbytes, 1),), 0x5A, dtype=torch.uint8))
        return self.pinned[-1]

    def counts(self) -> tuple[int, int, int]:
        return len(self.device), len(self.pinned), self.syncs


def at(ptr: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An array over `shape` elements of `dtype` at host address `ptr` (FakeCuda memory)."""
    n = math.prod(shape) * np.dtype(dtype).itemsize
    return np.frombuffer((ctypes.c_ubyte * n).from_address(ptr), dtype=np.uint8).view(dtype).reshape(shape)


# -- FakeTensorRT: engines ----------------------------------------------------------------------------------


@dataclass
class FakeGraph:
    """What a fake engine was "built" from: a contract graph at given fixed dims, its profiles and scratch."""

    contract: GraphContract
    precision: Precision
    layers: int
    fixed: dict[str, int]
    profiles: list[Profile]
    memory: list[int]  # scratch bytes per profile
    compute: Callable[[dict[str, np.ndarray], int], None]
    rejection: bool = False

    def specs(self, io: str) -> list[Any]:
        out = self.contract.specs(io, layers=self.layers, rejection=self.rejection)
        return [s for s in out if s.name not in DROPPED]


class DType:
    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DType) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


class FakeContext:
    def __init__(self, engine: "FakeEngine", strategy: Any) -> None:
        self.engine, self.strategy = engine, strategy
        self.memory: tuple[int, int] | None = None
        self.memory_history: list[tuple[int, int]] = []
        self.profile: int | None = None
        self.profile_streams: list[int] = []
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.addresses: dict[str, int] = {}
        self.executed: list[int] = []  # stream handles

    def set_device_memory(self, memory: int, size: int) -> None:
        self.memory = (memory, size)
        self.memory_history.append(self.memory)

    def set_optimization_profile_async(self, profile_index: int, stream_handle: int) -> bool:
        self.profile = profile_index
        self.profile_streams.append(stream_handle)
        return True

    def set_input_shape(self, name: str, shape: tuple[int, ...]) -> bool:
        lo, _opt, hi = self.engine.graph.profiles[self._profile()].shapes[name]
        if name not in self.engine.inputs or len(shape) != len(lo):
            return False
        if not all(a <= s <= b for s, a, b in zip(shape, lo, hi)):
            return False
        self.shapes[name] = tuple(shape)
        return True

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        if name in self.engine.inputs:
            return self.shapes.get(name, (-1,) * len(self.engine.dims[name]))
        sizes = dict(self.engine.graph.fixed)
        for n, shape in self.shapes.items():
            sizes |= dict(zip(self.engine.dims[n], shape))
        return tuple(sizes.get(d, -1) for d in self.engine.dims[name])

    def set_tensor_address(self, name: str, memory: int) -> bool:
        assert name in self.engine.dtypes, name
        self.addresses[name] = memory
        return True

    def _profile(self) -> int:
        assert self.profile is not None, "no optimization profile selected"
        return self.profile

    def execute_async_v3(self, stream_handle: int) -> bool:
        p = self._profile()
        assert self.memory is not None and self.memory[1] >= self.engine.graph.memory[p], "scratch too small / unset"
        assert set(self.addresses) == set(self.engine.dtypes), set(self.engine.dtypes) ^ set(self.addresses)
        assert set(self.shapes) == self.engine.inputs
        self.executed.append(stream_handle)
        views = {
            n: at(ptr, self.get_tensor_shape(n), numpy_dtype(self.engine.dtype_names[n]))
            for n, ptr in self.addresses.items()
        }
        self.engine.graph.compute(views, self.engine.graph.layers)
        return True


class FakeEngine:
    def __init__(self, graph: FakeGraph, trt: Any) -> None:
        self.graph, self.trt = graph, trt
        ins, outs = graph.specs("inputs"), graph.specs("outputs")
        self.names = [s.name for s in (*ins, *outs)]
        self.inputs = {s.name for s in ins}
        self.dims = {s.name: s.dims for s in (*ins, *outs)}
        self.dtype_names = {s.name: graph.precision.resolve(s.dtype) for s in (*ins, *outs)}
        self.dtypes = {n: DType(TRT_TYPES[d]) for n, d in self.dtype_names.items()}
        self.contexts: list[FakeContext] = []

    num_io_tensors = property(lambda self: len(self.names))
    num_optimization_profiles = property(lambda self: len(self.graph.profiles))
    device_memory_size_v2 = property(lambda self: max(self.graph.memory))

    def get_tensor_name(self, index: int) -> str:
        return self.names[index]

    def get_tensor_mode(self, name: str) -> Any:
        return self.trt.TensorIOMode.INPUT if name in self.inputs else self.trt.TensorIOMode.OUTPUT

    def get_tensor_dtype(self, name: str) -> DType:
        return self.dtypes[name]

    def get_device_memory_size_for_profile_v2(self, profile_index: int) -> int:
        return self.graph.memory[profile_index]

    def create_execution_context(self, strategy: Any = None) -> FakeContext:
        self.contexts.append(FakeContext(self, strategy))
        return self.contexts[-1]


class FakeTensorRT:
    """A `tensorrt` module (and `tensorrt.plugin`) for the runtime: engines are `FakeGraph`s registered by name;
    an engine file holds b"fake-engine:" + its name."""

    def __init__(self) -> None:
        self.graphs: dict[str, FakeGraph] = {}
        self.engines: list[FakeEngine] = []
        self.plugin_calls: list[str] = []
        fake = self
        mod = self.module = types.ModuleType("tensorrt")
        mod.__version__ = FAKE_VERSION
        mod.Builder = object  # probe.missing() asks for it
        mod.TensorIOMode = types.SimpleNamespace(INPUT="INPUT", OUTPUT="OUTPUT")
        mod.ExecutionContextAllocationStrategy = types.SimpleNamespace(
            STATIC="STATIC", ON_PROFILE_CHANGE="ON_PROFILE_CHANGE", USER_MANAGED="USER_MANAGED"
        )

        class Logger:
            WARNING, ERROR = 2, 1

            def __init__(self, min_severity: int = 2) -> None:
                pass

        class Runtime:
            def __init__(self, logger: Any) -> None:
                pass

            def deserialize_cuda_engine(self, serialized_engine: bytes) -> FakeEngine | None:
                name = bytes(serialized_engine).decode().removeprefix("fake-engine:")
                if name not in fake.graphs:
                    return None
                fake.engines.append(FakeEngine(fake.graphs[name], mod))
                return fake.engines[-1]

        mod.Logger, mod.Runtime = Logger, Runtime
        plugin = self.plugin = types.ModuleType("tensorrt.plugin")

        def recorder(kind: str) -> Callable[..., Any]:
            def decorator(plugin_id: str, *args: Any, **kwargs: Any) -> Callable[[Any], Any]:
                def record(f: Any) -> Any:
                    fake.plugin_calls.append(f"{kind} {plugin_id}")
                    return f

                return record

            return decorator

        plugin.register, plugin.impl, plugin.autotune = recorder("register"), recorder("impl"), recorder("autotune")
        plugin.TensorDesc, plugin.Tensor = type("TensorDesc", (), {}), type("Tensor", (), {})
        plugin.AutoTuneCombination = object
        mod.plugin = plugin

    def add(self, folder: Path, name: str, graph: FakeGraph) -> Path:
        self.graphs[name] = graph
        path = folder / f"{name}.engine"
        path.write_bytes(f"fake-engine:{name}".encode())
        return path

    def contexts(self) -> list[FakeContext]:
        return [c for e in self.engines for c in e.contexts]


@pytest.fixture
def fake_trt(monkeypatch) -> FakeTensorRT:
    from plugins.tree_verify import trt_plugin

    fake = FakeTensorRT()
    monkeypatch.setitem(sys.modules, "tensorrt", fake.module)
    monkeypatch.setitem(sys.modules, "tensorrt.plugin", fake.plugin)
    monkeypatch.setattr(trt_plugin, "_registered", [])
    return fake


# -- the fake engines' computation (what the tests check the runtime against) --------------------------------


def _kv(v: dict[str, np.ndarray], layers: int) -> list[tuple[np.ndarray, np.ndarray]]:
    for layer in range(layers):  # past_* and present_* must be the same memory (TensorRT's in-place update)
        assert v[f"past_key_{layer}"].ctypes.data == v[f"present_key_{layer}"].ctypes.data
    return [(v[f"present_key_{layer}"], v[f"present_value_{layer}"]) for layer in range(layers)]


def write_kv(caches: list[tuple[np.ndarray, np.ndarray]], row: int, slot: int, token: int) -> None:
    """Node KV: every key element = token + 0.5 * layer, every value = -(that)."""
    for layer, (k, v) in enumerate(caches):
        k[row, :, slot, :] = token + 0.5 * layer
        v[row, :, slot, :] = -(token + 0.5 * layer)


def target_compute(v: dict[str, np.ndarray], layers: int) -> None:
    """A fake target step graph: argmax(token) = token + 1, hidden = token, greedy tree verification over the
    verified nodes (verify_index; paths index them): the longest path whose every node is its parent's argmax,
    bonus = argmax of its last node; each node's KV written at past_len + its index (all T nodes are written)."""
    tokens, paths, past = v["tokens"], v["paths"], v["past_len"]
    caches = _kv(v, layers)
    verified = np.take_along_axis(tokens, v["verify_index"], axis=1)  # [B, Tv]
    v["hidden"][:] = tokens[:, :, None]
    v["node_argmax"][:] = verified + 1
    for row in range(tokens.shape[0]):
        for i in range(tokens.shape[1]):
            write_kv(caches, row, int(past[row]) + i, int(tokens[row, i]))
        best, best_len = 0, 0
        for p, path in enumerate(paths[row]):
            k = 1
            while k < len(path) and path[k] >= 0 and verified[row, path[k]] == verified[row, path[k - 1]] + 1:
                k += 1
            if k > best_len:
                best, best_len = p, k
        chain = paths[row, best, :best_len]
        v["accepted_len"][row], v["best_path"][row] = best_len, best
        v["output_tokens"][row] = -1
        v["output_tokens"][row, : best_len - 1] = verified[row, chain[1:]]
        v["output_tokens"][row, best_len - 1] = verified[row, chain[-1]] + 1


def eagle_compute(v: dict[str, np.ndarray], layers: int) -> None:
    """A fake EAGLE draft graph: hidden_out = 2 * hidden_in, top-k tokens token + k with log-probs -k, each
    row's F new slots written at past_len + write_offset + f."""
    caches = _kv(v, layers)
    tokens, k = v["tokens"], v["topk_tokens"].shape[-1]
    v["hidden_out"][:] = (2 * v["hidden_in"].astype(np.float32)).astype(v["hidden_out"].dtype)
    v["topk_tokens"][:] = tokens[:, :, None] + np.arange(k)
    v["topk_logprobs"][:] = -np.arange(k, dtype=np.float32)
    for row in range(tokens.shape[0]):
        for f in range(tokens.shape[1]):
            write_kv(caches, row, int(v["past_len"][row] + v["write_offset"][row]) + f, int(tokens[row, f]))


# -- the fakes offer only TensorRT's own names ------------------------------------------------------------------


def _stub_classes(work: Path) -> dict[str, dict[str, str]]:
    """{class: {member: "method" | "property" | "attribute"}} of tensorrt-stubs' tensorrt_bindings/tensorrt.pyi
    (as repaired for mypy by `plugins.tree_verify.typecheck.stub_root`: the shipped file does not parse)."""
    from plugins.tree_verify.typecheck import stub_root

    try:
        root = stub_root(work)
    except FileNotFoundError as err:
        pytest.skip(str(err))
    tree = ast.parse((root / "tensorrt_bindings" / "tensorrt.pyi").read_text())
    out: dict[str, dict[str, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            members: dict[str, str] = {}
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    prop = any(isinstance(d, ast.Name) and d.id == "property" for d in item.decorator_list)
                    members.setdefault(item.name, "property" if prop else "method")
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    members[item.target.id] = "attribute"
            out[node.name] = members
    return out


FAKE_AS = {FakeEngine: "ICudaEngine", FakeContext: "IExecutionContext"}  # fake class -> the stub class it imitates
FAKE_OWN = {
    "graph",
    "trt",
    "names",
    "inputs",
    "dims",
    "dtype_names",
    "dtypes",
    "contexts",
    "engine",
    "strategy",
    "memory",
    "memory_history",
    "profile",
    "profile_streams",
    "shapes",
    "addresses",
    "executed",
}  # bookkeeping


def test_FakeTensorRT_offers_only_names_tensorrt_stubs_declare(tmp_path):
    stubs = _stub_classes(tmp_path)
    for fake_cls, real in FAKE_AS.items():
        for name, value in vars(fake_cls).items():
            if name.startswith("_") or name in FAKE_OWN:
                continue
            kind = "property" if isinstance(value, property) else "method"
            theirs = stubs[real].get(name)
            assert theirs == kind, f"{fake_cls.__name__}.{name}: {kind}, tensorrt-stubs {real}.{name}: {theirs}"
    mod = FakeTensorRT().module
    for name in ("Logger", "Runtime", "TensorIOMode", "ExecutionContextAllocationStrategy", "Builder"):
        assert name in stubs, name
    for member in vars(mod.ExecutionContextAllocationStrategy):
        assert member in stubs["ExecutionContextAllocationStrategy"], member
    used = {"get_tensor_shape", "set_input_shape", "execute_async_v3", "set_device_memory"}
    assert used <= set(stubs["IExecutionContext"])


def test_FakeCuda_memory_is_addressable_and_counted():
    cuda = FakeCuda()
    buf = cuda.device_bytes(16)
    at(int(buf.data_ptr()), (4,), np.float32)[:] = [1, 2, 3, 4]
    assert buf.view(dtype=__import__("torch").float32).tolist() == [1.0, 2.0, 3.0, 4.0]
    assert cuda.counts() == (1, 0, 0)
