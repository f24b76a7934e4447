"""The TensorRT runtime's host layers over real CUDA, TensorRT itself stood in for (FakeTensorRT: the borrowed GPU
machines have torch with CUDA but no TensorRT). Nothing here claims TensorRT ran.

What is real on the "cuda" device: `Lane` (a torch.cuda.Stream, non-blocking), the arena and every device
allocation (torch's CUDA allocator), the page-locked staging (pin_memory), the async H2D / D2H copies of
`TrtBinding.run` on the lane's stream and its one synchronisation, `DeviceKV` (FP8 / bf16 / fp32 views of device
memory, compaction by device copies on the lane's stream), the decoding loop through the backend-neutral
`open_engine`. What stands in: the engine's computation. The stand-in context (`DeviceContextStandIn`, a
FakeContext of tests/unit/test_tensorrt_fakes.py) makes the same checks as the CPU fake, then on the stream
handle it was given copies every bound tensor device -> host, runs the fake graph's NumPy computation
(`target_compute` / `eagle_compute`) and copies the results host -> device, all ordered on that stream —
so a binding that pointed TensorRT at the wrong memory, a stream other than the lane's, or read its outputs
before the synchronisation would show up as wrong numbers here.

The same tests run on the "fake-cpu" device (FakeCuda: host memory posing as device memory) in the default
suite — that checks this file's own stand-in; the "cuda" cases are marked gpu (`pytest -m gpu tests/gpu`,
scripts/gpu_check.sh step host-cuda) and skip without a GPU. Expected values are the hand-worked ones of
tests/unit/test_tensorrt_runtime.py (argmax(token) = token + 1; KV key = token + layer / 2, value its negative).
"""

from __future__ import annotations

import ctypes
import math
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch

from builder.engines.tensorrt.device import Lane, TorchCuda
from builder.export.contract import FP8, numpy_dtype
from builder.speculative.protocols import SamplingBatch
from builder.speculative.tree import tree_draft, tree_from_parents
from tests.unit import test_tensorrt_fakes as fakes
from tests.unit.test_tensorrt_fakes import FakeCuda, FakeTensorRT
from tests.unit.test_tensorrt_runtime import BF16, CAP, KV, C, D, L, eagle_graph, kv_value, make_target, slots

CUDA = torch.cuda.is_available()


class CountingCuda(TorchCuda):
    """The real `CudaApi` (torch), counting allocations and synchronisations as FakeCuda does."""

    def __init__(self) -> None:
        self.streams: list[Any] = []
        self.device: list[Any] = []
        self.pinned: list[Any] = []
        self.syncs = 0

    def new_stream(self) -> Any:
        self.streams.append(super().new_stream())
        return self.streams[-1]

    def synchronize(self, stream: Any) -> None:
        self.syncs += 1
        super().synchronize(stream)

    def device_bytes(self, nbytes: int) -> Any:
        self.device.append(super().device_bytes(nbytes))
        return self.device[-1]

    def pinned_bytes(self, nbytes: int) -> Any:
        self.pinned.append(super().pinned_bytes(nbytes))
        assert self.pinned[-1].is_pinned()
        return self.pinned[-1]

    def counts(self) -> tuple[int, int, int]:
        return len(self.device), len(self.pinned), self.syncs

    def handles(self) -> set[int]:
        return {int(s.cuda_stream) for s in self.streams}


class _CudaBytes:
    def __init__(self, ptr: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {
            "data": (ptr, False),
            "shape": (nbytes,),
            "typestr": "|u1",
            "version": 3,
            "strides": None,
        }


@dataclass
class Memory:
    """Copies bytes between the host and "device" memory: CUDA (torch) or FakeCuda's host memory (ctypes)."""

    kind: str  # "cuda" | "fake-cpu"

    def read(self, ptr: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        n = math.prod(shape) * np.dtype(dtype).itemsize
        if self.kind == "cuda":
            raw = torch.as_tensor(_CudaBytes(ptr, n), device="cuda").cpu().numpy()
        else:
            raw = np.frombuffer((ctypes.c_ubyte * n).from_address(ptr), dtype=np.uint8).copy()
        return raw.view(dtype).reshape(shape)

    def write(self, ptr: int, array: np.ndarray) -> None:
        raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        if self.kind == "cuda":
            torch.as_tensor(_CudaBytes(ptr, raw.nbytes), device="cuda").copy_(torch.from_numpy(raw.copy()))
        else:
            ctypes.memmove(ptr, raw.ctypes.data, raw.nbytes)


class DeviceContextStandIn(fakes.FakeContext):
    """A FakeContext whose engine reads and writes its bound memory by copies, ordered on the given stream."""

    mover: Memory  # set per test by the fixture (a subclass)
    handles: Any  # () -> the stream handles the runtime may use

    def execute_async_v3(self, stream_handle: int) -> bool:
        p = self._profile()
        assert self.memory is not None and self.memory[1] >= self.engine.graph.memory[p], "scratch too small / unset"
        assert set(self.addresses) == set(self.engine.dtypes), set(self.engine.dtypes) ^ set(self.addresses)
        assert set(self.shapes) == self.engine.inputs
        assert stream_handle in self.handles(), "not a stream of the lane"
        self.executed.append(stream_handle)
        ctx = torch.cuda.stream(torch.cuda.ExternalStream(stream_handle)) if self.mover.kind == "cuda" else _null()
        with ctx:
            arrays: dict[tuple[int, tuple[int, ...], str], np.ndarray] = {}
            views = {}
            for name, ptr in self.addresses.items():  # past_* and present_* share one array (same memory)
                shape, dtype = self.get_tensor_shape(name), numpy_dtype(self.engine.dtype_names[name])
                key = (ptr, shape, str(np.dtype(dtype)))
                if key not in arrays:
                    arrays[key] = self.mover.read(ptr, shape, dtype)
                views[name] = arrays[key]
            self.engine.graph.compute(views, self.engine.graph.layers)
            for (ptr, _, _), array in arrays.items():
                self.mover.write(ptr, array)
        return True


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


@dataclass
class Host:
    trt: FakeTensorRT
    cuda: Any  # FakeCuda | CountingCuda
    memory: Memory

    def kv(self, kv: Any) -> np.ndarray:
        """A DeviceKV's contents as a NumPy array of its dtype (a copy)."""
        raw = kv.buf.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[kv.buf.element_size()])
        return raw.cpu().numpy().view(numpy_dtype(kv.dtype))

    def set_kv(self, kv: Any, values: np.ndarray) -> None:
        raw = kv.buf.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[kv.buf.element_size()])
        raw.copy_(torch.from_numpy(np.ascontiguousarray(values).view(raw.cpu().numpy().dtype)))
        if self.memory.kind == "cuda":
            torch.cuda.synchronize()


@pytest.fixture(params=["fake-cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def host(request, monkeypatch) -> Host:
    if request.param == "cuda" and not CUDA:
        pytest.skip("needs a CUDA device")
    from plugins.tree_verify import trt_plugin

    fake = FakeTensorRT()
    monkeypatch.setitem(sys.modules, "tensorrt", fake.module)
    monkeypatch.setitem(sys.modules, "tensorrt.plugin", fake.plugin)
    monkeypatch.setattr(trt_plugin, "_registered", [])
    memory = Memory(request.param)
    if request.param == "cuda":
        cuda: Any = CountingCuda()
        handles = cuda.handles
    else:
        cuda = FakeCuda()

        def handles() -> set[int]:
            return {s.handle for s in cuda.streams}

    context = type("DeviceContextStandIn", (DeviceContextStandIn,), {"mover": memory, "handles": staticmethod(handles)})
    monkeypatch.setattr(fakes, "FakeContext", context)  # what FakeEngine.create_execution_context makes
    return Host(fake, cuda, memory)


def test_stand_in_target_prefill_and_tree_step_on_device(host, tmp_path):
    lane = Lane(host.cuda)
    engine = make_target(host.trt, tmp_path, lane)
    kv = engine.kv
    assert kv.dtype == FP8 and kv.buf.dtype == torch.float8_e4m3fn
    assert kv.buf.device.type == ("cuda" if host.memory.kind == "cuda" else "cpu")
    syncs = host.cuda.syncs
    prompt = [1, 2, 3, 4, 5, 6, 7]
    (seq,), pre = engine.start([prompt], SamplingBatch.all_greedy(1, 1))
    assert host.cuda.syncs == syncs + 1 and pre.tokens.tolist() == [8]
    assert pre.hidden[0].dtype == numpy_dtype("bfloat16") and pre.hidden[0].astype(np.float32)[:, 0].tolist() == prompt
    cache = host.kv(kv)  # [L, 2, B, KV, CAP, D]
    for layer in range(L):
        for kind in (0, 1):
            assert slots(cache, layer, kind, 0, range(7)) == [kv_value(t, layer, FP8, kind) for t in prompt]
    tree = tree_from_parents([-1, 0, 0, 1])  # root 8; 9 and 13 its children; 10 under 9: 9, 10 accepted, bonus 11
    out = engine.step([seq], [tree_draft(tree, np.array([8, 9, 13, 10]))], SamplingBatch.all_greedy(1, 3))
    assert host.cuda.syncs == syncs + 2
    assert out.accepted_len.tolist() == [3] and out.chain[0, :3].tolist() == [0, 1, 3]
    assert out.tokens[0, :3].tolist() == [9, 10, 11] and out.node_argmax[0].tolist() == [9, 10, 14, 11]
    cache = host.kv(kv)  # node 3's KV (slot 10) compacted over node 2's (slot 9) on the device
    for layer in range(L):
        for kind in (0, 1):
            assert slots(cache, layer, kind, 0, (7, 8, 9)) == [kv_value(t, layer, FP8, kind) for t in (8, 9, 10)]
    before = host.cuda.counts()
    out2 = engine.step([seq], [tree_draft(tree, np.array([11, 12, 1, 13]))], SamplingBatch.all_greedy(1, 3))
    assert out2.tokens[0, :3].tolist() == [12, 13, 14]
    assert host.cuda.counts() == (before[0], before[1], before[2] + 1)  # steady state: no allocation, one sync
    graph = engine._last[1].graph
    assert all(np.shares_memory(a, graph.io.host.numpy()) for a in engine._last[1].y.values())  # outputs land pinned
    if host.memory.kind == "cuda":
        assert graph.io.host.is_pinned() and graph.io.device.is_cuda
        assert lane.handle not in (0, 1, 2)  # not the legacy / per-thread default stream
    assert all(c.executed and set(c.executed) == {lane.handle} for c in graph.contexts if c.executed)


def test_stand_in_folder_decodes_through_the_neutral_host_layer(host, tmp_path):
    from builder.engines.folder import open_engine
    from builder.speculative.decoding import generate
    from builder.speculative.protocols import Sampling
    from tests.unit.test_triton_tensorrt_fake import fake_folder

    fake_folder(host.trt, tmp_path)  # lookahead drafter, target greedy engine
    opened = open_engine(tmp_path, max_batch_size=2, cuda=host.cuda)
    prompt = [3, 1, 4, 1, 5, 9, 2]
    g = generate(opened.engine, prompt, 9, opened.make_drafter(), Sampling(0.0, 1.0, 0), opened.stop_ids)
    assert g.token_ids == list(range(3, 12))  # the stand-in target's greedy continuation
    assert g.steps < len(g.token_ids)  # n-gram drafts of a counting sequence are accepted: steps were saved
    contexts = host.trt.contexts()
    lane = opened.engine.lane
    assert {c.strategy for c in contexts} == {"USER_MANAGED"}
    assert {c.memory for c in contexts} == {(lane.arena_ptr, lane.arena_bytes)} and lane.generation == 1


def test_stand_in_eagle_extend_and_expand_on_device(host, tmp_path):
    from builder.engines.tensorrt.eagle import TrtEagleNet

    path = host.trt.add(tmp_path, "eagle", eagle_graph())
    net = TrtEagleNet(
        path,
        eagle_graph().profiles,
        layers=1,
        kv_heads=KV,
        head_dim=D,
        hidden_size=C,
        top_k=3,
        capacity=CAP,
        max_batch_size=2,
        precision=BF16,
        lane=Lane(host.cuda),
    )
    assert net.kv.buf.dtype == torch.bfloat16
    net.start([40, 41])
    hidden = np.arange(2 * 3 * C, dtype=np.float32).reshape(2, 3, C) / 4  # exact in bfloat16
    out = net.extend([41, 40], np.array([[1, 2, 3], [4, 5, 0]]), hidden, np.array([3, 2]))
    assert (out.hidden.astype(np.float32) == 2 * hidden[[0, 1], [2, 1]][:, None]).all()
    assert out.topk_tokens[:, 0].tolist() == [[3, 4, 5], [5, 6, 7]]
    syncs = host.cuda.syncs
    out = net.expand([40], np.array([[7, 6]]), hidden[:1, :2], np.array([[2, 2]]), 0, np.ones((2, 2, 2), dtype=bool))
    assert host.cuda.syncs == syncs + 1 and out.topk_tokens[0, :, 0].tolist() == [7, 6]
    cache = host.kv(net.kv)
    assert slots(cache, 0, 0, 1, range(3)) == [1, 2, 3]
    assert slots(cache, 0, 0, 0, range(4)) == [4, 5, 7, 6]


@pytest.mark.parametrize("dtype", ["bfloat16", FP8, "float32"])
def test_device_kv_moves_equal_the_numpy_reference_on_device(host, dtype):
    from builder.engines.ort.kv import KVBuffers
    from builder.engines.tensorrt.kv import DeviceKV

    rng = np.random.default_rng(0)
    kv = DeviceKV(Lane(host.cuda), L, 3, KV, 12, D, dtype)
    ref = KVBuffers(L, 3, KV, 12, D, dtype=numpy_dtype(dtype))
    ref.buf[:] = rng.normal(size=ref.buf.shape).astype(np.float32).astype(ref.buf.dtype)
    host.set_kv(kv, ref.buf)
    chains = [(0, 2, [0, 1, 2]), (1, 3, [0, 2, 5]), (2, 1, [0, 3, 4, 5]), (0, 4, [0, 1, 6, 7]), (1, 0, [0, 3, 1])]
    for row, start, nodes in chains:  # in place, gaps, consecutive, partly in place, a non-increasing order
        kv.compact(row, start, np.array(nodes))
        ref.compact(row, start, np.array(nodes))
        kv.lane.sync()
        assert host.kv(kv).tobytes() == ref.buf.tobytes(), (row, start, nodes)
    kv.move_row(0, 2, 7)
    ref.move_row(0, 2, 7)
    kv.lane.sync()
    assert host.kv(kv).tobytes() == ref.buf.tobytes()
