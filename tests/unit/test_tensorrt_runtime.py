"""The TensorRT runtime's protocol, on the CPU through FakeTensorRT + FakeCuda (no TensorRT, no GPU here; the
fakes and why they may be trusted: tests/unit/test_tensorrt_fakes.py). Nothing here claims TensorRT ran.

Checked: every execution context of every engine of a folder is created USER_MANAGED and given ONE shared
arena of the largest profile's size (allocated once; grown and re-pointed only when a later engine needs
more); all work goes to one dedicated non-default stream; each call synchronises once; steady-state steps
allocate nothing (device or pinned) and read their outputs from the page-locked staging; KV buffers are in
the contract's KV dtype (FP8 target, bfloat16 EAGLE draft) and host arrays in its I/O types (bfloat16
hidden states); the data the fake engines compute arrives where the host side reads it — a prefill and a
tree step of the target against a hand-worked table, with the accepted chain's KV compacted on the device;
EAGLE extend / expand; DeviceKV's moves equal the NumPy reference's (builder.engines.ort.kv).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from builder.engines.tensorrt.device import Lane
from builder.engines.tensorrt.profiles import CacheDims, eagle_profiles, target_profiles
from builder.export.contract import EAGLE, FP8, TARGET, Precision, numpy_dtype
from builder.handoffs import TensorrtEngineJson
from builder.speculative.protocols import SamplingBatch
from builder.speculative.tree import tree_draft, tree_from_parents
from tests.unit.test_tensorrt_fakes import (
    FakeCuda,
    FakeGraph,
    eagle_compute,
    fake_trt,  # noqa: F401 (a fixture)
    target_compute,
)

L, KV, D, C, V, CAP, MAX_SEQ = 2, 2, 4, 8, 64, 24, 18  # a tiny model: 6 draft nodes of room
BF16_FP8, BF16 = Precision("bfloat16", FP8), Precision("bfloat16", "bfloat16")
CACHE = CacheDims(L, KV, CAP, D)


def target_graph(memory=(3000, 5000), rejection=False) -> FakeGraph:
    profiles = target_profiles(
        max_batch_size=2, max_input_len=8, max_nodes=CAP - MAX_SEQ, cache=CACHE, rejection=rejection
    )
    return FakeGraph(
        TARGET, BF16_FP8, L, {"CAP": CAP, "KV": KV, "D": D, "C": C}, profiles, list(memory), target_compute, rejection
    )


def eagle_graph(memory=(700, 900)) -> FakeGraph:
    cache = CacheDims(1, KV, CAP, D)
    profiles = eagle_profiles(max_batch_size=2, max_input_len=8, max_rows=8, hidden_size=C, cache=cache)
    fixed = {"CAP": CAP, "KV": KV, "D": D, "C": C, "K": 3}
    return FakeGraph(EAGLE, BF16, 1, fixed, profiles, list(memory), eagle_compute)


def host_kv(kv) -> np.ndarray:
    """The DeviceKV's contents as a NumPy array of its dtype (FakeCuda memory is host memory)."""
    raw = kv.buf.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[kv.buf.element_size()])
    return raw.numpy().view(numpy_dtype(kv.dtype))


def kv_value(token: int, layer: int, dtype: str, kind: int = 0) -> float:
    """What the fake engines write (`write_kv`: key token + layer / 2, value its negative), rounded to `dtype`."""
    x = (token + 0.5 * layer) * (1 if kind == 0 else -1)
    return float(np.asarray(x, np.float32).astype(numpy_dtype(dtype)).astype(np.float32))


def slots(cache: np.ndarray, layer: int, kind: int, row: int, positions) -> list[float]:
    return [float(cache[layer, kind, row, 0, s, 0].astype(np.float32)) for s in positions]


def make_target(fake, tmp_path: Path, lane: Lane, memory=(3000, 5000)):
    from builder.engines.tensorrt.target import TrtEngine, TrtTargetSpec

    path = fake.add(tmp_path, "greedy", target_graph(memory))
    spec = TrtTargetSpec(path, None, L, KV, D, C, V, CAP, None, {"greedy": tuple(target_graph().profiles)}, BF16_FP8)
    return TrtEngine(spec, MAX_SEQ, max_batch_size=2, lane=lane)


def test_FakeTensorRT_FakeCuda_target_prefill_and_tree_step_hand_worked(fake_trt, tmp_path):
    cuda = FakeCuda()
    lane = Lane(cuda)
    engine = make_target(fake_trt, tmp_path, lane)
    assert fake_trt.plugin_calls[0] == "register trtspec::TreeVerify"  # registered before deserializing
    kv = engine.kv
    assert kv.dtype == FP8 and kv.buf.dtype == torch.float8_e4m3fn and kv.nbytes == L * 2 * 2 * KV * CAP * D  # 1 byte
    syncs = cuda.syncs
    prompt = [1, 2, 3, 4, 5, 6, 7]  # longer than a step's 6 nodes: the prefill profile
    (seq,), pre = engine.start([prompt], SamplingBatch.all_greedy(1, 1))
    assert cuda.syncs == syncs + 1  # one synchronisation per call
    assert pre.tokens.tolist() == [8]  # argmax(7)
    assert pre.hidden[0].dtype == numpy_dtype("bfloat16") and pre.hidden[0].astype(np.float32)[:, 0].tolist() == prompt
    cache = host_kv(kv)  # [L, 2, B, KV, CAP, D]
    for layer in range(L):
        for kind in (0, 1):
            assert slots(cache, layer, kind, 0, range(7)) == [kv_value(t, layer, FP8, kind) for t in prompt]
    # A tree: root 8 with children 9 and 13, and 10 under 9. argmax(x) = x + 1: 9 and 10 accepted, 13 not; bonus 11.
    tree = tree_from_parents([-1, 0, 0, 1])
    out = engine.step([seq], [tree_draft(tree, np.array([8, 9, 13, 10]))], SamplingBatch.all_greedy(1, 3))
    assert cuda.syncs == syncs + 2
    assert out.accepted_len.tolist() == [3] and out.chain[0, :3].tolist() == [0, 1, 3]
    assert out.tokens[0, :3].tolist() == [9, 10, 11] and out.node_argmax[0].tolist() == [9, 10, 14, 11]
    assert out.hidden[0, :3, 0].tolist() == [8, 9, 10]
    assert engine.committed_len(seq) == 10
    cache = host_kv(kv)
    for layer in range(L):  # slots 7..9 hold the chain 8, 9, 10: node 3's KV (slot 10) moved over node 2's (slot 9)
        for kind in (0, 1):
            assert slots(cache, layer, kind, 0, (7, 8, 9)) == [kv_value(t, layer, FP8, kind) for t in (8, 9, 10)]
    # Steady state: the same shape again allocates nothing, device or pinned, and syncs once.
    before = cuda.counts()
    out2 = engine.step([seq], [tree_draft(tree, np.array([11, 12, 1, 13]))], SamplingBatch.all_greedy(1, 3))
    assert out2.tokens[0, :3].tolist() == [12, 13, 14]
    assert cuda.counts() == (before[0], before[1], before[2] + 1)
    binding = engine._last[1]
    graph = binding.graph
    assert all(np.shares_memory(arr, graph.io.host.numpy()) for arr in binding.y.values())  # outputs land pinned
    assert binding.y["hidden"].dtype == numpy_dtype("bfloat16")  # the contract's act dtype, not float32
    ctx_step, ctx_prefill = graph.contexts
    assert lane.handle not in (0, 1, 2)  # not the legacy / per-thread default stream
    assert ctx_step.executed == [lane.handle] * 2 and ctx_prefill.executed == [lane.handle]
    assert ctx_step.profile_streams == ctx_prefill.profile_streams == [lane.handle]


def test_FakeTensorRT_FakeCuda_one_user_managed_arena_for_every_context_of_a_folder(fake_trt, tmp_path):
    from builder.engines.tensorrt.folder import open_tensorrt_engine

    files = {
        "greedy": fake_trt.add(tmp_path, "target-greedy", target_graph((3000, 5000))),
        "rejection": fake_trt.add(tmp_path, "target-rejection", target_graph((4000, 6000), rejection=True)),
        "eagle": fake_trt.add(tmp_path, "eagle", eagle_graph((700, 900))),
    }
    graphs = {k: fake_trt.graphs[f.stem] for k, f in files.items()}
    engines = {
        k: {
            "profiles": [p.as_dict() for p in g.profiles],
            "device_memory_bytes": g.memory,
            "device_memory_max_bytes": max(g.memory),
        }
        for k, g in graphs.items()
    }
    meta = {
        "format": TensorrtEngineJson.FORMAT,
        "backend": "tensorrt",
        "variant": "standard",
        "capacity": CAP,
        "max_seq_len": MAX_SEQ,
        "max_batch_size": 2,
        "max_input_len": 8,
        "model": {"layers": L, "kv_heads": KV, "head_dim": D, "hidden": C, "vocab": V},
        "precision": BF16_FP8.as_dict(),
        "draft_precision": BF16.as_dict(),
        "target": {"greedy": files["greedy"].name, "rejection": files["rejection"].name},
        "medusa": None,
        "eagle": {
            "graph": files["eagle"].name,
            "layers": 1,
            "kv_heads": KV,
            "head_dim": D,
            "hidden": C,
            "top_k": 3,
            "capacity": CAP,
        },
        "drafter": {
            "method": "eagle",
            "checkpoint": "eagle",
            "version": 1,
            "tree": {"type": "static", "choices": [[0], [1], [2], [0, 0]]},
        },
        "tokenizer": "tokenizer.json",
        "stop_ids": [0],
        "engines": engines,
    }
    (tmp_path / "engine.json").write_text(json.dumps(meta))
    cuda = FakeCuda()
    opened = open_tensorrt_engine(tmp_path, max_batch_size=2, cuda=cuda)
    engine = opened.engine
    lane = engine.lane
    assert len(cuda.streams) == 1 and opened.make_drafter().net.lane is lane  # one stream for target and draft
    assert engine.kv.buf.dtype == torch.float8_e4m3fn and opened.make_drafter().net.kv.buf.dtype == torch.bfloat16
    sampled = SamplingBatch(np.array([0.7], np.float32), np.array([1.0], np.float32), np.full((1, 1), 0.5, np.float32))
    engine.start([[1, 2, 3, 4, 5, 6, 7]], sampled)  # a sampled request: the rejection engine opens now
    assert len(fake_trt.engines) == 3
    contexts = fake_trt.contexts()
    assert len(contexts) == 6 and {c.strategy for c in contexts} == {"USER_MANAGED"}
    assert {c.memory for c in contexts} == {(lane.arena_ptr, 6000)}  # the largest profile of any engine
    arenas = [t for t in cuda.device if int(t.data_ptr()) == lane.arena_ptr]
    assert len(arenas) == 1 and arenas[0].numel() == 6000 and lane.generation == 1  # allocated once, never moved
    assert all(c.profile_streams == [lane.handle] for c in contexts)


def test_FakeTensorRT_FakeCuda_the_arena_grows_for_a_later_engine_and_contexts_follow(fake_trt, tmp_path):
    from builder.engines.tensorrt.eagle import TrtEagleNet

    cuda = FakeCuda()
    lane = Lane(cuda)
    engine = make_target(fake_trt, tmp_path, lane, memory=(300, 500))
    first = (lane.arena_ptr, lane.arena_bytes)
    assert first[1] == 500 and lane.generation == 1
    path = fake_trt.add(tmp_path, "eagle", eagle_graph((700, 900)))
    TrtEagleNet(
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
        lane=lane,
    )
    assert lane.arena_bytes == 900 and lane.generation == 2
    engine.start([[1]], SamplingBatch.all_greedy(1, 1))  # the target's contexts are re-pointed before they run
    for ctx in fake_trt.engines[0].contexts:
        assert ctx.memory == (lane.arena_ptr, 900) and ctx.memory_history[0] == first


def test_FakeTensorRT_FakeCuda_eagle_extend_and_expand(fake_trt, tmp_path):
    from builder.engines.tensorrt.eagle import TrtEagleNet

    cuda = FakeCuda()
    path = fake_trt.add(tmp_path, "eagle", eagle_graph())
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
        lane=Lane(cuda),
    )
    assert net.kv.buf.dtype == torch.bfloat16
    net.start([40, 41])
    hidden = np.arange(2 * 3 * C, dtype=np.float32).reshape(2, 3, C) / 4  # exact in bfloat16
    out = net.extend([41, 40], np.array([[1, 2, 3], [4, 5, 0]]), hidden, np.array([3, 2]))
    assert out.hidden.dtype == numpy_dtype("bfloat16")
    assert (out.hidden.astype(np.float32) == 2 * hidden[[0, 1], [2, 1]][:, None]).all()
    assert out.topk_tokens[:, 0].tolist() == [[3, 4, 5], [5, 6, 7]] and out.topk_logprobs[0, 0].tolist() == [0, -1, -2]
    assert (net.committed_len(41), net.committed_len(40)) == (3, 2)
    syncs = cuda.syncs
    mask = np.ones((2, 2, 2), dtype=bool)
    out = net.expand([40], np.array([[7, 6]]), hidden[:1, :2], np.array([[2, 2]]), 0, mask)
    assert cuda.syncs == syncs + 1 and out.topk_tokens[0, :, 0].tolist() == [7, 6]
    cache = host_kv(net.kv)  # the draft's own rows: 40 -> row 0, 41 -> row 1
    assert slots(cache, 0, 0, 1, range(3)) == [1, 2, 3]
    assert slots(cache, 0, 0, 0, range(4)) == [4, 5, 7, 6]  # two committed, two tentative
    with pytest.raises(ValueError, match="EAGLE draft cache full"):
        net.expand(
            [40], np.zeros((1, 1), np.int64), hidden[:1, :1], np.array([[2]]), CAP - 2, np.ones((1, 1, CAP), bool)
        )


@pytest.mark.parametrize("dtype", ["bfloat16", FP8, "float32"])
def test_FakeCuda_device_kv_moves_equal_the_numpy_reference(dtype):
    from builder.engines.ort.kv import KVBuffers
    from builder.engines.tensorrt.kv import DeviceKV

    rng = np.random.default_rng(0)
    kv = DeviceKV(Lane(FakeCuda()), L, 3, KV, 12, D, dtype)
    ref = KVBuffers(L, 3, KV, 12, D, dtype=numpy_dtype(dtype))
    ref.buf[:] = rng.normal(size=ref.buf.shape).astype(np.float32).astype(ref.buf.dtype)
    host_kv(kv)[:] = ref.buf  # FakeCuda memory is host memory: fill the device buffer directly
    chains = [(0, 2, [0, 1, 2]), (1, 3, [0, 2, 5]), (2, 1, [0, 3, 4, 5]), (0, 4, [0, 1, 6, 7]), (1, 0, [0, 3, 1])]
    for row, start, nodes in chains:  # in place, gaps, consecutive, partly in place, a non-increasing order
        kv.compact(row, start, np.array(nodes))
        ref.compact(row, start, np.array(nodes))
        assert host_kv(kv).tobytes() == ref.buf.tobytes(), (row, start, nodes)
    kv.move_row(0, 2, 7)
    ref.move_row(0, 2, 7)
    assert host_kv(kv).tobytes() == ref.buf.tobytes()
    assert kv.nbytes == ref.buf.nbytes
