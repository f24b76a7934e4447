"""The ONNX face: trtspec::TreeVerify passes onnx.checker with its registered schema, and the
standard-op decomposition run by ONNX Runtime matches the reference on an exported graph
(MatMul hidden → logits, then TreeVerify), on batches whose sequences have different trees."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from devtools.verify_cases import Case, compare, edge_case, random_case
from plugins.tree_verify import onnx_op
from plugins.tree_verify.contract import DOMAIN, INPUT_NAMES, OP_TYPE, OUTPUT_NAMES, Mode
from plugins.tree_verify.reference import VerifyResult

HIDDEN = 8
_LOGITS_TYPE = {
    torch.float32: TensorProto.FLOAT,
    torch.float16: TensorProto.FLOAT16,
    torch.bfloat16: TensorProto.BFLOAT16,
}


def _model(vocab: int, mode: Mode, dtype: torch.dtype, weight: np.ndarray) -> onnx.ModelProto:
    """hidden [B, T, H] · W [H, V] → logits (cast to dtype) → TreeVerify; the logits come out too
    (as fp32, exact for fp16 / bf16) so that the reference sees what ORT computed."""
    onnx_op.register_schema()
    f, i32 = TensorProto.FLOAT, TensorProto.INT32
    inputs = [
        helper.make_tensor_value_info("hidden", f, ["B", "T", HIDDEN]),
        helper.make_tensor_value_info("tokens", i32, ["B", "T"]),
        helper.make_tensor_value_info("paths", i32, ["B", "P", "W"]),
        helper.make_tensor_value_info("temperature", f, ["B"]),
        helper.make_tensor_value_info("top_p", f, ["B"]),
        helper.make_tensor_value_info("uniforms", f, ["B", "W"]),
        helper.make_tensor_value_info("draft_probs", f, ["B", "T"]),
    ]
    outputs = [
        helper.make_tensor_value_info("accepted_len", i32, ["B"]),
        helper.make_tensor_value_info("best_path", i32, ["B"]),
        helper.make_tensor_value_info("output_tokens", i32, ["B", "W"]),
        helper.make_tensor_value_info("logits_seen", f, ["B", "T", vocab]),
    ]
    nodes = [
        helper.make_node("MatMul", ["hidden", "lm_head"], ["logits_fp32"]),
        helper.make_node("Cast", ["logits_fp32"], ["logits"], to=_LOGITS_TYPE[dtype]),
        helper.make_node("Cast", ["logits"], ["logits_seen"], to=f),
        onnx_op.make_node(("logits",) + INPUT_NAMES[1:], OUTPUT_NAMES, mode),
    ]
    graph = helper.make_graph(nodes, "step", inputs, outputs, [numpy_helper.from_array(weight, "lm_head")])
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid(DOMAIN, 1)]
    return helper.make_model(graph, opset_imports=opsets)


def _session(vocab: int, mode: Mode, dtype: torch.dtype, weight: np.ndarray) -> ort.InferenceSession:
    model = _model(vocab, mode, dtype, weight)
    onnx.checker.check_model(model)  # the custom op passes thanks to the registered schema
    lowered = onnx_op.decompose(model)
    onnx.checker.check_model(lowered, full_check=True)
    assert all(n.domain != DOMAIN for n in lowered.graph.node)
    return ort.InferenceSession(lowered.SerializeToString(), providers=["CPUExecutionProvider"])


def _ort(case: Case, hidden: np.ndarray, weight: np.ndarray, dtype: torch.dtype) -> tuple[Case, VerifyResult]:
    session = _session(weight.shape[1], case.mode, dtype, weight)
    feed = {"hidden": hidden, **{k: v.contiguous().numpy() for k, v in zip(INPUT_NAMES[1:], case.inputs()[1:])}}
    acc, best, out, logits = session.run(None, feed)
    case.logits = torch.from_numpy(logits).to(dtype)  # exactly the logits ORT computed
    return case, VerifyResult(torch.from_numpy(acc), torch.from_numpy(best), torch.from_numpy(out))


def _run(seed: int, batch: int, nodes: int, vocab: int, mode: Mode, dtype: torch.dtype, deterministic: bool):
    gen = np.random.default_rng(seed)
    weight = gen.standard_normal((HIDDEN, vocab)).astype(np.float32)
    hidden = gen.standard_normal((batch, nodes, HIDDEN)).astype(np.float32)
    logits = (torch.from_numpy(hidden) @ torch.from_numpy(weight)).to(dtype)  # drafts aimed at these
    case = random_case(seed, batch, nodes, vocab, mode, deterministic_draft=deterministic, logits=logits)
    return _ort(case, hidden, weight, dtype)


@settings(max_examples=20, derandomize=True, deadline=None)
@given(
    seed=st.integers(0, 2**20),
    batch=st.integers(1, 3),
    nodes=st.integers(1, 10),
    vocab=st.integers(2, 24),
    mode=st.sampled_from(list(Mode)),
    dtype=st.sampled_from([torch.float32, torch.float16]),
    deterministic=st.booleans(),
)
def test_ort_decomposition_matches_reference(seed, batch, nodes, vocab, mode, dtype, deterministic):
    case, got = _run(seed, batch, nodes, vocab, mode, dtype, deterministic)
    result = compare(case, got)
    assert not result.wrong, result.describe()


@pytest.mark.parametrize("mode", list(Mode))
def test_ort_bf16_logits_and_a_bigger_tree(mode):
    case, got = _run(4, 2, 16, 50, mode, torch.bfloat16, True)
    assert not compare(case, got).wrong


@pytest.mark.parametrize("mode", list(Mode))
def test_ort_mixed_trees_edge_case(mode):
    # `edge_case`'s hand-made batch: its logits come in as hidden states through an identity lm_head
    case = edge_case(mode)
    case, got = _ort(case, case.logits.numpy(), np.eye(8, dtype=np.float32), torch.float32)
    assert [tuple(r) for r in got.output_tokens.tolist()] == [tuple(r) for r in case.reference().output_tokens.tolist()]
    assert not compare(case, got).wrong


@pytest.mark.parametrize("mode", list(Mode))
def test_ort_shared_tree_and_root_only(mode):
    gen = np.random.default_rng(3)
    weight = gen.standard_normal((HIDDEN, 12)).astype(np.float32)
    hidden = gen.standard_normal((3, 7, HIDDEN)).astype(np.float32)
    logits = torch.from_numpy(hidden) @ torch.from_numpy(weight)
    shared = random_case(3, 3, 7, 12, mode, logits=logits, parents=[-1, 0, 0, 1, 2, 2, 4])  # stride-0 paths
    assert not compare(*_ort(shared, hidden, weight, torch.float32)).wrong
    alone = random_case(4, 3, 1, 12, mode, logits=logits[:, :1])  # T = 1, D+1 = 1: paths [[[0]]] per row
    assert alone.paths.shape[1:] == (1, 1) or (alone.paths[:, :, 1:] < 0).all()
    assert not compare(*_ort(alone, hidden[:, :1], weight, torch.float32)).wrong


def test_decomposition_size():
    # it runs inside a decoding step graph, where every op costs a few µs on the CPU: keep it small
    onnx_op.register_schema()
    for mode, most in ((Mode.GREEDY, 60), (Mode.REJECTION, 160)):
        graph = helper.make_graph([onnx_op.make_node(INPUT_NAMES, OUTPUT_NAMES, mode)], "g", [], [])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(DOMAIN, 1)])
        assert len(onnx_op.decompose(model).graph.node) <= most


def test_node_carries_tensorrt_plugin_attributes():
    node = onnx_op.make_node(INPUT_NAMES, OUTPUT_NAMES, "rejection")
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert (node.op_type, node.domain) == (OP_TYPE, DOMAIN)
    assert attrs == {"mode": 1, "plugin_namespace": b"trtspec", "plugin_version": b"1"}


def test_checker_rejects_unknown_attribute():
    onnx_op.register_schema()
    node = helper.make_node(OP_TYPE, list(INPUT_NAMES), list(OUTPUT_NAMES), domain=DOMAIN, mode=0, colour=1)
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_node(node, onnx.checker.DEFAULT_CONTEXT.__class__())
