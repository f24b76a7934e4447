"""The graph I/O contract (`builder.export.contract`) is the one source of the graphs' inputs and outputs.

Checked for every graph the exporters write — target (both variants, greedy / rejection, with and without
fused Medusa heads, CPU form and GPU forms: bfloat16, bfloat16 with an FP8 KV cache) and EAGLE — in each
of its three forms (canonical, the ONNX Runtime twin, the TensorRT form — none for an FP8 KV cache, which
TensorRT's KV update cannot hold): the declared inputs and outputs,
names, element types and dims (symbolic names kept), in order, are the contract's. Then what is generated
from the contract: the ORT engines' bindings equal the sessions' own inputs and outputs, the host side's
layout (`builder.engines.bindings.target_io`, still written out by hand) equals the contract's, the
TensorRT profiles equal a hand-written table, and the prose in `builder.export` names every tensor.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

import builder.export
from builder.engines.bindings import target_io
from builder.engines.tensorrt.profiles import CacheDims, eagle_profiles, target_profiles
from builder.export.artifacts import ort_twin
from builder.export.contract import CPU, EAGLE, FP8, TARGET, Precision, call_spec, declared, numpy_dtype
from builder.export.eagle import build_eagle
from builder.export.graph import ELEM
from builder.export.qdq import Fp8Spec
from builder.export.target import build_target
from builder.export.tensorrt import to_tensorrt
from builder.speculative.medusa.heads import MedusaHeads
from devtools.ort_engines import eagle_net, target_engine
from tests.unit.test_export_eagle import eagle_draft_pair
from tests.unit.test_export_harness import randomize, tiny_target

CAP, LAYERS, HM, K = 40, 2, 3, 4
BF16, BF16_FP8 = Precision("bfloat16", "bfloat16"), Precision("bfloat16", FP8)
CASES = [
    (v, m, med, p)
    for v in ("standard", "ort")
    for m in ("greedy", "rejection")
    for med in (False, True)
    for p in ((CPU, BF16, BF16_FP8) if v == "standard" else (CPU,))
]


def io_of(graph: onnx.GraphProto, which: str) -> list[tuple[str, int, list[int | str]]]:
    values = graph.input if which == "inputs" else graph.output
    return [
        (
            v.name,
            v.type.tensor_type.elem_type,
            [d.dim_param if d.HasField("dim_param") else d.dim_value for d in v.type.tensor_type.shape.dim],
        )
        for v in values
    ]


def contract_io(contract, which: str, fixed: dict[str, int], precision: Precision, **kw) -> list[tuple[str, int, list]]:
    return [(n, ELEM[t], d) for n, t, d in declared(contract, which, fixed, precision, layers=kw.pop("layers"), **kw)]


@pytest.fixture(scope="module")
def model():
    return tiny_target(4, scaling=True, tied=False, head_dim=16, layers=LAYERS)


@pytest.mark.parametrize("variant,mode,medusa,precision", CASES)
def test_target_graphs_declare_exactly_the_contract(model, variant, mode, medusa, precision):
    cfg = model.cfg
    heads = None
    if medusa:
        torch.manual_seed(0)
        heads = MedusaHeads(HM, 1, cfg.hidden_size, cfg.vocab_size).eval()
        randomize(heads)
    fp8 = Fp8Spec({}, {i: (0.05, 0.04) for i in range(LAYERS)}) if precision.fp8_kv else None
    proto = build_target(
        model,
        variant=variant,
        mode=mode,
        max_seq_len=CAP,
        medusa=heads,
        medusa_topk=K if medusa else None,
        fp8=fp8,
        precision=precision,
    )
    fixed = {"KV": cfg.num_key_value_heads, "CAP": CAP, "D": cfg.head_dim, "C": cfg.hidden_size, "Hm": HM, "K": K}
    kw = dict(layers=LAYERS, rejection=mode == "rejection", medusa=medusa)
    forms = {"canonical": (proto, precision), "ort twin": (ort_twin(proto), CPU)}
    if variant == "standard" and not precision.fp8_kv:  # an FP8 KV cache has no TensorRT form (test_export_tensorrt)
        forms["tensorrt"] = (to_tensorrt(proto), precision)
    for form, (graph, prec) in forms.items():
        for which in ("inputs", "outputs"):
            assert io_of(graph.graph, which) == contract_io(TARGET, which, fixed, prec, **dict(kw)), (form, which)


@pytest.mark.parametrize("variant,precision", [("standard", CPU), ("ort", CPU), ("standard", BF16)])
def test_eagle_graphs_declare_exactly_the_contract(variant, precision):
    draft, lm_head = eagle_draft_pair(0, 1, fc_bias=True)
    proto = build_eagle(draft, lm_head, variant=variant, top_k=K, max_seq_len=CAP, precision=precision)
    rows = variant == "ort"  # (the ort variant picks its output rows: `out_rows`)
    cfg = draft.cfg
    fixed = {"KV": cfg.num_key_value_heads, "CAP": CAP, "D": cfg.head_dim, "C": cfg.hidden_size, "K": K}
    forms = {"canonical": (proto, precision), "ort twin": (ort_twin(proto), CPU)}
    if variant == "standard":
        forms["tensorrt"] = (to_tensorrt(proto), precision)
    for form, (graph, prec) in forms.items():
        for which in ("inputs", "outputs"):
            assert io_of(graph.graph, which) == contract_io(EAGLE, which, fixed, prec, layers=1, rows=rows), (
                form,
                which,
            )


def _session_io(session) -> dict[str, str]:
    return {v.name: v.type for v in (*session.get_inputs(), *session.get_outputs())}


def test_ort_bindings_are_the_contract_and_the_sessions_io(model, tmp_path: Path):
    cfg = model.cfg
    torch.manual_seed(0)
    heads = MedusaHeads(HM, 1, cfg.hidden_size, cfg.vocab_size).eval()
    engine = target_engine(
        model, tmp_path, max_seq_len=CAP - 8, max_nodes=8, max_batch_size=2, medusa=heads, medusa_topk=K
    )
    for mode in ("greedy", "rejection"):
        x, y = target_io(mode, 2, 5, 5, 3, 4, cfg.hidden_size, (HM, K))  # the host side's layout
        bound = engine._make_binding(mode, 0, 2, x, y)
        want = call_spec(
            TARGET,
            {"B": 2, "T": 5, "Tv": 5, "P": 3, "W": 4, "C": cfg.hidden_size, "Hm": HM, "K": K},
            rejection=mode == "rejection",
            medusa=True,
        )
        assert {k: (v.shape, v.dtype) for k, v in bound.x.items()} == want[0]
        assert {k: (v.shape, v.dtype) for k, v in bound.y.items()} == want[1]
        declared_io = _session_io(engine._session(mode))
        for name, arr in (*bound.x.items(), *bound.y.items()):
            assert declared_io[name] == f"tensor({_ort_type(arr.dtype)})", name
        caches = {n for n in declared_io if n.startswith(("past_key", "past_value", "present_"))}
        assert set(declared_io) - caches == set(bound.x) | set(bound.y)
    x, y = target_io("greedy", 2, 5, 5, 3, 4, cfg.hidden_size, (HM, K))
    with pytest.raises(ValueError, match="not the graph contract"):
        engine._make_binding("greedy", 0, 2, {**x, "tokens": ((2, 5), np.int32)}, y)
    draft, lm_head = eagle_draft_pair(0, 1, fc_bias=True)
    net = eagle_net(draft, lm_head, tmp_path, top_k=K, capacity=CAP)
    assert net.pick_rows  # the ort variant's graph
    bound = net._build_rows(0, 1, 3, 5, 2)
    want = call_spec(EAGLE, {"B": 1, "F": 3, "U": 5, "R": 2, "C": draft.cfg.hidden_size, "K": K}, rows=True)
    assert {k: (v.shape, v.dtype) for k, v in (*bound.x.items(), *bound.y.items())} == {**want[0], **want[1]}
    declared_io = _session_io(net.session)
    assert all(declared_io[n] == f"tensor({_ort_type(a.dtype)})" for n, a in (*bound.x.items(), *bound.y.items()))


def _ort_type(dtype: np.dtype) -> str:
    return {"float32": "float", "bool": "bool", "int64": "int64", "int32": "int32"}[np.dtype(dtype).name]


def test_tensorrt_profiles_from_the_contract_equal_the_table():
    """B ≤ 2, prompts ≤ 8 (opt 8), steps ≤ 3 nodes; caches [B, 2, 40, 16]; written out by hand."""
    (step, prefill) = target_profiles(
        max_batch_size=2, max_input_len=8, max_nodes=3, cache=CacheDims(1, 2, 40, 16), rejection=True
    )
    cache = ((1, 2, 40, 16), (2, 2, 40, 16), (2, 2, 40, 16))
    b = ((1,), (2,), (2,))
    assert step.as_dict()["shapes"] == {
        k: [list(d) for d in v]
        for k, v in {
            "tokens": ((1, 1), (2, 3), (2, 3)),
            "position_ids": ((1, 1), (2, 3), (2, 3)),
            "tree_mask": ((1, 1, 1), (2, 3, 3), (2, 3, 3)),
            "past_len": b,
            "num_nodes": b,
            "verify_index": ((1, 1), (2, 3), (2, 3)),
            "paths": ((1, 1, 1), (2, 3, 3), (2, 3, 3)),
            "temperature": b,
            "top_p": b,
            "uniforms": ((1, 1), (2, 3), (2, 3)),
            "past_key_0": cache,
            "past_value_0": cache,
        }.items()
    }
    assert prefill.shapes["tokens"] == ((1, 1), (2, 8), (2, 8)) and prefill.shapes["verify_index"] == (
        (1, 1),
        (2, 1),
        (2, 1),
    )
    assert prefill.shapes["paths"] == ((1, 1, 1), (2, 1, 1), (2, 1, 1)) and prefill.shapes["uniforms"] == (
        (1, 1),
        (2, 1),
        (2, 1),
    )
    e_step, e_prefill = eagle_profiles(
        max_batch_size=2, max_input_len=8, max_rows=5, hidden_size=64, cache=CacheDims(1, 2, 40, 16)
    )
    assert list(e_step.shapes) == [s.name for s in EAGLE.specs("inputs", layers=1)]
    assert e_step.shapes["hidden_in"] == ((1, 1, 64), (2, 5, 64), (2, 5, 64))
    assert e_prefill.shapes["tree_mask"] == ((1, 1, 1), (2, 8, 8), (2, 8, 8))


def test_the_prose_names_every_tensor_of_the_contract():
    doc = builder.export.__doc__ or ""
    for contract in (TARGET, EAGLE):
        for s in (*contract.inputs, *contract.outputs):
            assert s.name.replace("{l}", "{l}") in doc, s.name
    assert "builder.export.contract" in doc


def test_dtype_names_resolve():
    assert numpy_dtype("bfloat16").itemsize == 2 and numpy_dtype(FP8).itemsize == 1
    assert Precision("float16", FP8).resolve("kv") == FP8 and Precision("float16", FP8).resolve("act") == "float16"
    with pytest.raises(ValueError):
        Precision("bfloat16", "float16")


def test_FakeTensorRT_network_io_types_are_checked_against_the_contract(tmp_path: Path):
    """No TensorRT here: a fake network (names and trt.DataType names) stands in for a parsed one."""
    from types import SimpleNamespace

    from builder.engines.tensorrt.build import EngineBuildError, check_io_types, contract_io_dtypes

    want = contract_io_dtypes("target", BF16_FP8, layers=1)
    assert (want["past_key_0"], want["hidden"], want["tokens"], want["accepted_len"]) == (
        "FP8",
        "BF16",
        "INT64",
        "INT32",
    )
    t = lambda name, kind: SimpleNamespace(name=name, dtype=SimpleNamespace(name=kind))  # noqa: E731
    ins = [t("tokens", "INT64"), t("past_key_0", "FP8")]  # num_nodes: unread, dropped by TensorRT — not checked
    outs = [t("hidden", "BF16"), t("present_key_0", "FP8")]
    net = SimpleNamespace(num_inputs=2, num_outputs=2, get_input=ins.__getitem__, get_output=outs.__getitem__)
    check_io_types(net, want, tmp_path / "g.trt.onnx")
    outs[0] = t("hidden", "FLOAT")  # a float32 graph where the recipe's bfloat16 one was expected
    with pytest.raises(EngineBuildError, match="hidden: FLOAT, the contract says BF16"):
        check_io_types(net, want, tmp_path / "g.trt.onnx")
