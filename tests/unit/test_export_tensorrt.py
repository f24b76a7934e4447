"""The TensorRT form of the exported graphs (`builder.export.tensorrt`), checked without TensorRT.

Structure: every standard Attention / RotaryEmbedding / TensorScatter is replaced by its trt:: twin with
Edge-LLM's attributes, the I/O contract (names, types, shapes) is the canonical graph's, no ONNX
Runtime contrib op remains, TreeVerify stays the trtspec::TreeVerify plugin node, the model passes
onnx.checker (the trt:: schemas registered), and a hand-written graph rewrites to exactly the node list
written out below (FP8 Q/DQ nodes untouched).

Types: every node of every exported TensorRT form — fp32 CPU form, bfloat16 GPU form with FP8 weights,
greedy, rejection, Medusa, EAGLE — has the operator and the input dtypes TensorRT 10.15 documents
(`trt_schemas.operator_problems`: onnx-tensorrt's support matrix as data, index inputs included: position
ids and cache write indices INT64); the int32 ids TensorRT Edge-LLM's exporter writes are flagged, and an
FP8 KV cache is refused (TensorRT's KV-cache update takes float32 / float16 / bfloat16 caches only).

Numbers: ONNX Runtime cannot run trt:: nodes, but each has a standard op of the same meaning (the
module docstring's table read backwards). `_lower` maps them back — trt::Attention to a standard
Attention with the additive mask over all CAP slots — so the rewritten
graph runs in ORT, and must match the canonical graph (which attends the live prefix only, with RMSNorm
and Swish as single ops) on a prefill and a tree step. That checks the full-cache mask, the -inf
mask, the RMSNorm and SiLU decompositions; what TensorRT itself does with the nodes is for a GPU host.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from builder.errors import UserError
from builder.export.contract import Precision
from builder.export.eagle import export_eagle
from builder.export.target import build_target, export_target
from builder.export.tensorrt import TRT_DOMAIN, to_tensorrt, write_tensorrt, write_tensorrt_graphs
from builder.export.trt_schemas import INDEX_INPUTS, OPERATOR_TYPES, operator_problems, register_schemas, value_types
from builder.model.config import LlamaConfig
from builder.quantize.checkpoint import read_fp8_checkpoint
from builder.speculative.eagle.draft_model import EagleDraft
from builder.speculative.medusa.heads import MedusaHeads
from plugins.tree_verify import onnx_op
from plugins.tree_verify.contract import DOMAIN as PLUGIN_DOMAIN
from tests.unit.model_utils import LLAMA3_SCALING, hf_config
from tests.unit.test_export_harness import Session, ancestors, randomize, tiny_target
from tests.unit.test_quantize_ptq import fixture_fp8

CAP, LAYERS = 48, 2
STANDARD = ("Attention", "RotaryEmbedding", "TensorScatter")


def ops(model: onnx.ModelProto) -> list[str]:
    return [f"{n.domain}::{n.op_type}" if n.domain else n.op_type for n in model.graph.node]


def load(path) -> onnx.ModelProto:
    return onnx.load(str(path), load_external_data=False)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """{name: folder} of canonical `standard` exports: target greedy + rejection, EAGLE draft."""
    base = tmp_path_factory.mktemp("trt")
    model = tiny_target(3, scaling=True, tied=False, head_dim=16, layers=LAYERS)
    for mode in ("greedy", "rejection"):
        export_target(model, base / f"target-{mode}", variant="standard", mode=mode, max_seq_len=CAP)
    hf = hf_config(
        num_attention_heads=8, num_key_value_heads=2, head_dim=16, rope_scaling=LLAMA3_SCALING, num_hidden_layers=1
    )
    torch.manual_seed(5)
    draft = EagleDraft(LlamaConfig.from_hf_dict(hf.to_dict()), fc_bias=True).eval()
    randomize(draft, std=0.1)
    lm_head = 0.2 * torch.randn(hf.vocab_size, hf.hidden_size)
    draft.set_lm_head(lm_head)
    export_eagle(draft, lm_head, base / "eagle", variant="standard", top_k=4, max_seq_len=CAP)
    return {"model": model, "base": base}


@pytest.mark.parametrize(
    "folder,stem,layers",
    [("target-greedy", "target", LAYERS), ("target-rejection", "target", LAYERS), ("eagle", "eagle", 1)],
)
def test_every_standard_attention_op_is_replaced_and_the_contract_kept(exported, folder, stem, layers):
    src = exported["base"] / folder
    canonical = load(src / f"{stem}.onnx")
    path = write_tensorrt(src, stem)  # runs onnx.checker (full check)
    rewritten = load(path)
    counts = {op: ops(rewritten).count(op) for op in set(ops(rewritten))}
    assert not [op for op in ops(rewritten) if op in STANDARD], "a standard node survived"
    assert (counts["trt::Attention"], counts["trt::RotaryEmbedding"], counts["trt::TensorScatter"]) == (
        layers,
        layers,
        2 * layers,
    )
    assert "RMSNormalization" not in counts and "Swish" not in counts and "Slice" not in counts
    assert not [n for n in rewritten.graph.node if n.domain == "com.microsoft"]
    assert [i.SerializeToString() for i in rewritten.graph.input] == [
        i.SerializeToString() for i in canonical.graph.input
    ]
    assert [o.SerializeToString() for o in rewritten.graph.output] == [
        o.SerializeToString() for o in canonical.graph.output
    ]
    assert {(o.domain, o.version) for o in rewritten.opset_import} >= {("", 24), (TRT_DOMAIN, 1)}
    for node in rewritten.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "Attention":  # Edge-LLM's _attention_onnx_translation attributes
            assert attrs == {"is_causal": 0, "TRT_decomposable": 1, "scale": pytest.approx(1 / math.sqrt(16))}
            assert node.input[1].startswith("present_key_") and node.input[2].startswith("present_value_")
        if node.domain == TRT_DOMAIN and node.op_type != "Attention":
            assert attrs == {}
        if node.op_type == "TensorScatter":
            assert node.input[0].startswith("past_") and node.output[0].startswith("present_")
    verify = [n for n in rewritten.graph.node if n.op_type == "TreeVerify"]
    assert len(verify) == (0 if stem == "eagle" else 1)
    for node in verify:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        assert (
            node.domain == PLUGIN_DOMAIN and attrs["plugin_namespace"] == b"trtspec" and attrs["plugin_version"] == b"1"
        )


def test_write_tensorrt_graphs_names_every_graph_and_refuses_the_ort_variant(exported, tmp_path):
    files = write_tensorrt_graphs(exported["base"], "standard")
    assert files == {
        "greedy": "target-greedy/target.trt.onnx",
        "rejection": "target-rejection/target.trt.onnx",
        "eagle": "eagle/eagle.trt.onnx",
    }
    with pytest.raises(UserError, match="standard"):
        write_tensorrt_graphs(exported["base"], "ort")
    moved = write_tensorrt(exported["base"] / "eagle", "eagle", tmp_path / "elsewhere")  # weights linked along
    assert moved.is_file() and (tmp_path / "elsewhere" / "eagle.data").is_file()


def test_the_ort_variant_is_refused_naming_the_contrib_op(tmp_path):
    model = tiny_target(1, scaling=False, tied=True, head_dim=16)
    export_target(model, tmp_path / "t", variant="ort", mode="greedy", max_seq_len=CAP)
    with pytest.raises(UserError, match="com.microsoft ops are ONNX Runtime-only"):
        to_tensorrt(load(tmp_path / "t" / "target.onnx"))


# -- the rewritten graph computes what the canonical one does (lowered back to standard ops, in ORT) ------


def _lower(model: onnx.ModelProto) -> onnx.ModelProto:
    """trt:: nodes back to the standard ops of the same meaning; TreeVerify decomposed (test-only)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes = []
    for n in out.graph.node:
        if n.domain == TRT_DOMAIN:
            ins, name = list(n.input), n.name  # (index inputs are INT64 already: ORT's types)
            attrs = {"axis": 2} if n.op_type == "TensorScatter" else {}
            if n.op_type == "Attention":
                attrs = {"scale": next(a.f for a in n.attribute if a.name == "scale")}
            nodes.append(helper.make_node(n.op_type, ins, list(n.output), name=name, **attrs))
        else:
            nodes.append(n)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    kept = [o for o in out.opset_import if o.domain != TRT_DOMAIN]
    del out.opset_import[:]
    out.opset_import.extend(kept)
    return onnx_op.decompose(out)


def _feeds_prefill(lens: list[int], vocab: int, gen: np.random.Generator) -> dict[str, np.ndarray]:
    b, t = len(lens), max(lens)
    return dict(
        tokens=gen.integers(0, vocab, (b, t)),
        position_ids=np.tile(np.arange(t), (b, 1)),
        tree_mask=np.tile(np.tril(np.ones((t, t), bool)), (b, 1, 1)),
        past_len=np.zeros(b, np.int64),
        num_nodes=np.array(lens, np.int64),
        verify_index=np.array(lens, np.int64)[:, None] - 1,
        paths=np.zeros((b, 1, 1), np.int32),
    )


def _feeds_step(past: list[int], vocab: int, gen: np.random.Generator) -> dict[str, np.ndarray]:
    parents = [-1, 0, 0, 1, 2, 3]
    mask, depth = ancestors(parents)
    leaves = [[0, 1, 3, 5], [0, 2, 4, -1]]
    b, t = len(past), len(parents)
    return dict(
        tokens=gen.integers(0, vocab, (b, t)),
        position_ids=np.array(past)[:, None] + depth[None],
        tree_mask=np.tile(mask, (b, 1, 1)),
        past_len=np.array(past, np.int64),
        num_nodes=np.full(b, t, np.int64),
        verify_index=np.tile(np.arange(t), (b, 1)),
        paths=np.tile(np.array(leaves, np.int32), (b, 1, 1)),
    )


def test_lowered_back_it_computes_what_the_canonical_graph_computes(exported):
    src = exported["base"] / "target-greedy"
    cfg = exported["model"].cfg
    lowered = src / "target.lowered.onnx"  # beside the weights file (ORT reads no weights from elsewhere)
    onnx.save_model(_lower(load(write_tensorrt(src, "target"))), str(lowered))
    dims = (2, LAYERS, cfg.num_key_value_heads, CAP, cfg.head_dim)
    canonical, trt = (Session(p, *dims) for p in (src / "target.ort.onnx", lowered))
    gen = np.random.default_rng(0)
    for feeds in (_feeds_prefill([7, 4], cfg.vocab_size, gen), _feeds_step([7, 4], cfg.vocab_size, gen)):
        want, got = canonical.run(feeds), trt.run(feeds)
        for name in ("hidden",):
            scale = np.abs(want[name]).max()
            assert np.abs(got[name] - want[name]).max() <= 1e-5 * scale, name
        for name in ("node_argmax", "accepted_len", "best_path", "output_tokens"):
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)
        for mine, theirs in ((trt.k, canonical.k), (trt.v, canonical.v)):
            assert np.abs(mine - theirs).max() <= 1e-5 * np.abs(theirs).max()


# -- a hand-written graph and the node list it must become -------------------------------------------------


def _hand_graph() -> onnx.ModelProto:
    """One attention block as the `standard` variant builds it (live-prefix Slices, a Range-made boolean
    mask), plus an FP8 Q/DQ pair, RMSNormalization and Swish. B, T dynamic; H 2, KV 1, D 4, CAP 8."""
    c = lambda name, v, dt=np.int64: numpy_helper.from_array(np.asarray(v, dt), name)  # noqa: E731
    inits = [
        c("zero", [0]),
        c("one", [1]),
        c("axes2", [2]),
        c("ax0", [0]),
        c("ax1", [1]),
        c("ax12", [1, 2]),
        c("cos", np.ones((8, 2)), np.float32),
        c("sin", np.zeros((8, 2)), np.float32),
        c("s", 0.5, np.float32),
        c("zp", 0, np.float32),
        c("w", np.ones(4), np.float32),
    ]
    inits[9] = helper.make_tensor("zp", TensorProto.FLOAT8E4M3FN, [], [0])
    n = helper.make_node
    nodes = [
        n("ReduceMax", ["end"], ["live"], name="live", keepdims=0),
        n("Unsqueeze", ["live", "ax0"], ["live1"], name="live1"),
        n("Range", ["zero", "live", "one"], ["slots"], name="slots"),
        n("Unsqueeze", ["past_len", "ax1"], ["pl"], name="pl"),
        n("Less", ["slots", "pl"], ["seen"], name="seen"),
        n("Unsqueeze", ["seen", "ax12"], ["mask"], name="mask"),
        n("RotaryEmbedding", ["q", "cos", "sin", "position_ids"], ["q_rot"], name="rope"),
        n("TensorScatter", ["past_key", "k", "past_len"], ["present_key"], name="scatter_k", axis=2),
        n("TensorScatter", ["past_value", "v", "past_len"], ["present_value"], name="scatter_v", axis=2),
        n("Slice", ["present_key", "zero", "live1", "axes2"], ["k_live"], name="k_live"),
        n("Slice", ["present_value", "zero", "live1", "axes2"], ["v_live"], name="v_live"),
        n("Attention", ["q_rot", "k_live", "v_live", "mask"], ["y"], name="attn"),
        n("Transpose", ["y"], ["yt"], name="yt", perm=[0, 2, 1, 3]),
        n("QuantizeLinear", ["yt", "s", "zp"], ["yq"], name="q8"),
        n("DequantizeLinear", ["yq", "s", "zp"], ["ydq"], name="dq8"),
        n("RMSNormalization", ["ydq", "w"], ["yn"], name="norm", axis=-1, epsilon=1e-5),
        n("Swish", ["yn"], ["out"], name="silu"),
    ]
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    inputs = [
        helper.make_tensor_value_info("q", f, ["B", 2, "T", 4]),
        helper.make_tensor_value_info("k", f, ["B", 1, "T", 4]),
        helper.make_tensor_value_info("v", f, ["B", 1, "T", 4]),
        helper.make_tensor_value_info("position_ids", i64, ["B", "T"]),
        helper.make_tensor_value_info("past_len", i64, ["B"]),
        helper.make_tensor_value_info("end", i64, ["B"]),
        helper.make_tensor_value_info("past_key", f, ["B", 1, 8, 4]),
        helper.make_tensor_value_info("past_value", f, ["B", 1, 8, 4]),
    ]
    outputs = [
        helper.make_tensor_value_info("out", f, ["B", "T", 2, 4]),
        helper.make_tensor_value_info("present_key", f, ["B", 1, 8, 4]),
        helper.make_tensor_value_info("present_value", f, ["B", 1, 8, 4]),
    ]
    graph = helper.make_graph(nodes, "hand", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)])
    model.ir_version = 10
    return model


def _resolved(model: onnx.ModelProto) -> list[tuple]:
    """(op, inputs with generated constants shown by value, outputs, attributes) per node."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    show = lambda name: f"={inits[name].tolist()}" if name.startswith("trt_const") else name  # noqa: E731
    return [
        (
            f"{n.domain}::{n.op_type}" if n.domain else n.op_type,
            [show(i) for i in n.input],
            list(n.output),
            {a.name: helper.get_attribute_value(a) for a in n.attribute},
        )
        for n in model.graph.node
    ]


def test_hand_written_graph_rewrites_to_the_expected_node_list():
    model = _hand_graph()
    onnx.checker.check_model(model, full_check=True)
    got = to_tensorrt(model)
    qdq_before = [n.SerializeToString() for n in model.graph.node if n.op_type.endswith("QuantizeLinear")]
    inf = float("-inf")
    assert _resolved(got) == [
        ("Unsqueeze", ["past_len", "ax1"], ["pl"], {}),
        ("Less", ["slots", "pl"], ["seen"], {}),
        ("Unsqueeze", ["seen", "ax12"], ["mask"], {}),
        ("trt::RotaryEmbedding", ["q", "cos", "sin", "position_ids"], ["q_rot"], {}),  # INT64 ids: no Cast
        ("trt::TensorScatter", ["past_key", "k", "past_len"], ["present_key"], {}),
        ("trt::TensorScatter", ["past_value", "v", "past_len"], ["present_value"], {}),
        ("Where", ["mask", "=0.0", f"={inf}"], ["mask/additive"], {}),
        (
            "trt::Attention",
            ["q_rot", "present_key", "present_value", "mask/additive"],
            ["y"],
            {"is_causal": 0, "TRT_decomposable": 1, "scale": 0.5},
        ),
        ("Transpose", ["y"], ["yt"], {"perm": [0, 2, 1, 3]}),
        ("QuantizeLinear", ["yt", "s", "zp"], ["yq"], {}),
        ("DequantizeLinear", ["yq", "s", "zp"], ["ydq"], {}),
        ("Pow", ["ydq", "=2.0"], ["norm/pow"], {}),
        ("ReduceMean", ["norm/pow", "=[-1]"], ["norm/mean"], {"keepdims": 1}),
        ("Add", ["norm/mean", f"={np.float32(1e-5).item()}"], ["norm/add_eps"], {}),
        ("Sqrt", ["norm/add_eps"], ["norm/sqrt"], {}),
        ("Reciprocal", ["norm/sqrt"], ["norm/rsqrt"], {}),
        ("Mul", ["ydq", "norm/rsqrt"], ["norm/normed"], {}),
        ("Mul", ["norm/normed", "w"], ["yn"], {}),
        ("Sigmoid", ["yn"], ["silu/sigmoid"], {}),
        ("Mul", ["yn", "silu/sigmoid"], ["out"], {}),
    ]
    assert [n.SerializeToString() for n in got.graph.node if n.op_type.endswith("QuantizeLinear")] == qdq_before
    slots = next(t for t in got.graph.initializer if t.name == "slots")  # the Range, now [0, CAP)
    np.testing.assert_array_equal(numpy_helper.to_array(slots), np.arange(8))
    assert {o.domain for o in got.opset_import} == {"", TRT_DOMAIN}
    register_schemas()
    onnx.checker.check_model(got, full_check=True)
    assert operator_problems(got) == []


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda m: m.graph.node[11].input.pop(), "with a boolean mask"),
        (lambda m: m.graph.node[6].attribute.append(helper.make_attribute("interleaved", 1)), "non-interleaved"),
        (lambda m: m.graph.node[7].attribute[0].CopyFrom(helper.make_attribute("axis", 1)), "axis 2"),
        (lambda m: m.graph.node[11].input.__setitem__(1, "k"), "not a Slice"),
    ],
)
def test_unsupported_forms_are_refused_naming_the_node(edit, message):
    model = _hand_graph()
    edit(model)
    with pytest.raises(UserError, match=message):
        to_tensorrt(model)


# -- types: TensorRT's documented operator support, index inputs included ----------------------------------------


@pytest.fixture(scope="module")
def gpu_forms(exported, tmp_path_factory):
    """{name: canonical graph}: the fixture's exports, a Medusa target, and the bfloat16 GPU form with FP8
    weights (bf16 KV: the own backend's only KV form) in greedy and rejection mode."""
    base = exported["base"]
    folders = (("target-greedy", "target"), ("target-rejection", "target"), ("eagle", "eagle"))
    graphs = {f: load(base / f / f"{stem}.onnx") for f, stem in folders}
    model = exported["model"]
    heads = MedusaHeads(3, 2, model.cfg.hidden_size, model.cfg.vocab_size)
    randomize(heads)
    out = tmp_path_factory.mktemp("medusa")
    export_target(model, out, variant="standard", mode="greedy", max_seq_len=CAP, medusa=heads, medusa_topk=4)
    graphs["medusa"] = load(out / "target.onnx")
    ckpt = read_fp8_checkpoint(fixture_fp8()[0])
    for mode in ("greedy", "rejection"):
        graphs[f"bf16-fp8-{mode}"] = build_target(
            ckpt.model,
            variant="standard",
            mode=mode,
            max_seq_len=CAP,
            fp8=ckpt.spec,
            precision=Precision("bfloat16", "bfloat16"),
        )
    return graphs


def test_every_node_has_the_operator_and_types_tensorrt_documents(gpu_forms):
    seen: set[str] = set()
    for name, canonical in gpu_forms.items():
        trt = to_tensorrt(canonical)
        assert operator_problems(trt) == [], name
        types = value_types(trt)
        for node in trt.graph.node:
            seen.add(node.op_type)
            if node.op_type in ("RotaryEmbedding", "TensorScatter"):  # the index inputs, by name
                index = node.input[3] if node.op_type == "RotaryEmbedding" else node.input[2]
                assert types[index] == "INT64", (name, node.name, types[index])
                assert types[node.input[0]] in ("FP32", "BF16"), (name, node.name)
    assert {"RotaryEmbedding", "TensorScatter", "Attention", "TreeVerify", "DequantizeLinear", "TopK"} <= seen
    assert seen - {"TreeVerify"} <= set(OPERATOR_TYPES)


def test_the_int32_ids_edge_llm_writes_are_flagged(gpu_forms):
    """TensorRT Edge-LLM's exporter casts position ids and cache indices to int32; TensorRT documents INT64."""
    trt = to_tensorrt(gpu_forms["target-greedy"])
    narrowed = []
    for node in trt.graph.node:
        if node.domain == TRT_DOMAIN and node.op_type in INDEX_INPUTS:
            i = max(INDEX_INPUTS[node.op_type])
            narrowed.append(
                helper.make_node(
                    "Cast", [node.input[i]], [f"{node.name}/int32"], name=f"{node.name}/int32", to=TensorProto.INT32
                )
            )
            node.input[i] = f"{node.name}/int32"
    trt.graph.node.extend(narrowed)  # (order does not matter to inference)
    problems = operator_problems(trt)
    assert len(problems) == 3 * LAYERS  # one RoPE and two scatters per layer
    assert all("is INT32; TensorRT documents INT64" in p for p in problems), problems


def test_int32_ids_in_the_canonical_graph_are_widened():
    model = _hand_graph()
    for vi in model.graph.input:
        if vi.name in ("position_ids", "past_len"):
            vi.type.tensor_type.elem_type = TensorProto.INT32
    got = _resolved(to_tensorrt(model))
    assert ("Cast", ["position_ids"], ["position_ids/int64"], {"to": TensorProto.INT64}) in got
    assert ("trt::TensorScatter", ["past_key", "k", "past_len/int64"], ["present_key"], {}) in got


def test_an_fp8_kv_cache_has_no_tensorrt_form(gpu_forms):
    ckpt = read_fp8_checkpoint(fixture_fp8()[0])
    proto = build_target(
        ckpt.model,
        variant="standard",
        mode="greedy",
        max_seq_len=CAP,
        fp8=ckpt.spec,
        precision=Precision("bfloat16", "float8e4m3fn"),
    )
    with pytest.raises(UserError, match="float32/float16/bfloat16 caches only") as err:
        to_tensorrt(proto)
    assert err.value.field == "quantization.kv_cache" and "trtllm" in err.value.allowed


def test_an_operator_outside_the_support_matrix_is_flagged():
    model = to_tensorrt(_hand_graph())
    assert operator_problems(model) == []
    model.graph.node.append(helper.make_node("Unique", ["out"], ["uniq"], name="uniq"))  # "N" in the 10.15 table
    assert operator_problems(model) == [
        "node 'uniq' (Unique): not in TensorRT 10.15's ONNX support matrix as we record it"
    ]


def test_the_runtime_binds_the_index_inputs_as_int64(gpu_forms):
    """The engines' host side binds graph inputs with the I/O contract's types (`contract_io_dtypes`, checked
    against the built network): every graph input that feeds a RoPE's position ids or a KV update's write
    indices is INT64 there, as in the graph, so nothing narrows or widens them on the way."""
    from builder.engines.tensorrt.build import contract_io_dtypes

    for name, canonical in gpu_forms.items():
        trt = to_tensorrt(canonical)
        producer = {o: n for n in trt.graph.node for o in n.output}
        inputs = {v.name for v in trt.graph.input}
        graph = "eagle" if name == "eagle" else "target"
        io = contract_io_dtypes(
            graph, Precision("float32", "float32"), layers=1, rejection="rejection" in name, medusa=name == "medusa"
        )
        fed = set()
        for node in trt.graph.node:
            if node.domain == TRT_DOMAIN and node.op_type in INDEX_INPUTS:
                todo = [node.input[i] for i in INDEX_INPUTS[node.op_type]]
                while todo:  # back through the integer arithmetic (EAGLE: past_len + write_offset)
                    value = todo.pop()
                    if value in inputs:
                        fed.add(value)
                    elif value in producer:
                        assert producer[value].op_type != "Cast", (name, value)  # no narrowing / widening
                        todo.extend(i for i in producer[value].input if i)
        assert fed and all(io[v] == "INT64" for v in fed), (name, {v: io[v] for v in fed})
        assert {"position_ids", "past_len"} <= fed, (name, fed)
