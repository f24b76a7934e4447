"""The lean `ort` graph (builder.export.ort_variant, builder.export.verify, builder.engines.ort.session) and the
ORT-profiler tooling (devtools.bench.profile), each against an oracle:

* greedy verification (`verify.lean_greedy`: 5 nodes and an If of 5 or 25) against the torch reference
  (`plugins.tree_verify.reference.tree_verify`) on random batched trees with padding, and the edge cases
  (everything rejected, a perfect drafter with tied paths, W = 1, padding-only rows);
* the tree attention bias against a brute-force loop over (row, node, slot) written from the contract's rule;
* each decoder layer's ops against ONNX Runtime GenAI 0.18's builder output, recorded as data;
* GroupQueryAttention's per-head kernel (the engine's sessions) against the flash kernel and the float64
  reference, and the environment left as it was;
* the profile parser on a hand-made Chrome trace.
Whole-graph token and cache equality of the `ort` variant is tests/unit/test_export_target.py and
tests/unit/test_engine_ort.py (both variants).
"""

from __future__ import annotations

import collections
import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

from builder.engines.ort.build import pick_variant
from builder.engines.ort.session import GQA_FLASH_ENV, gqa_per_head_kernel, make_session
from builder.export.attn_base import AttnShape, StepValues
from builder.export.contract import CPU, Precision
from builder.export.graph import BOOL, F32, I64, Graph, prune
from builder.export.ort_variant import OrtVariant
from builder.export.target import export_target
from builder.export.verify import lean_greedy
from builder.speculative.protocols import SamplingBatch
from devtools.bench.profile import parse_trace
from plugins.tree_verify import onnx_op
from plugins.tree_verify.contract import DOMAIN, OP_VERSION, Mode
from plugins.tree_verify.reference import tree_verify
from tests.unit.test_export_harness import (
    Session,
    ancestors,
    assert_close,
    f64,
    leaf_paths,
    pad_paths,
    random_parents,
    reference_pass,
    sequence_mask,
    tiny_target,
)

I32 = TensorProto.INT32


# -- greedy verification ---------------------------------------------------------------------------


def _verify_model() -> ort.InferenceSession:
    """A graph holding one greedy TreeVerify node, rewritten by `lean_greedy`, in ONNX Runtime."""
    onnx_op.register_schema()
    dims = {
        "logits": (F32, ["B", "T", "V"]),
        "tokens": (I32, ["B", "T"]),
        "paths": (I32, ["B", "P", "W"]),
        "temperature": (F32, ["B"]),
        "top_p": (F32, ["B"]),
        "uniforms": (F32, ["B", "W"]),
        "draft_probs": (F32, ["B", "T"]),
    }
    outs = ["accepted_len", "best_path", "output_tokens"]
    node = onnx_op.make_node(list(dims), outs, Mode.GREEDY, name="verify")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, t, d) for n, (t, d) in dims.items()],
        [helper.make_tensor_value_info(n, I32, d) for n, d in zip(outs, (["B"], ["B"], ["B", "W"]))],
    )
    opsets = [helper.make_opsetid("", 24), helper.make_opsetid(DOMAIN, OP_VERSION)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    lean = prune(lean_greedy(model))
    assert all(n.domain != DOMAIN for n in lean.graph.node)
    (branch,) = [n for n in lean.graph.node if n.op_type == "If"]
    sizes = sorted(len(a.g.node) for a in branch.attribute)
    assert len(lean.graph.node) == 5 and sizes == [5, 25]  # Cast, ArgMax, Shape, Equal, If; root-only, tree
    onnx.checker.check_model(lean, full_check=True)
    return ort.InferenceSession(lean.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def verify_session() -> ort.InferenceSession:
    return _verify_model()


def _run_verify(sess: ort.InferenceSession, logits: np.ndarray, tokens: np.ndarray, paths: np.ndarray) -> None:
    """The lean graph's outputs equal the reference's on the same logits (float32: the argmax is exact)."""
    b, t = tokens.shape
    w = paths.shape[2]
    feeds = {
        "logits": logits,
        "tokens": tokens,
        "paths": paths,
        "temperature": np.zeros(b, np.float32),
        "top_p": np.ones(b, np.float32),
        "uniforms": np.zeros((b, w), np.float32),
        "draft_probs": np.ones((b, t), np.float32),
    }
    got = sess.run(None, feeds)
    want = tree_verify(torch.from_numpy(logits), torch.from_numpy(tokens), torch.from_numpy(paths))
    for name, g, r in zip(("accepted_len", "best_path", "output_tokens"), got, want):
        np.testing.assert_array_equal(g, r.numpy(), err_msg=name)


def _random_batch(gen: np.random.Generator, b: int, v: int, follow: float) -> tuple[np.ndarray, ...]:
    """Per row a random tree (own size, padded to the batch's T, P, W); each node's token is the argmax at its
    parent with probability `follow`, else random (so chains of every length get accepted)."""
    sizes = gen.integers(1, 9, b)
    t = int(sizes.max())
    logits = gen.standard_normal((b, t, v)).astype(np.float32)
    tokens = gen.integers(0, v, (b, t)).astype(np.int32)
    rows = []
    for i, n in enumerate(sizes):
        parents = random_parents(gen, int(n))
        for node in range(1, int(n)):
            if gen.random() < follow:
                tokens[i, node] = int(logits[i, parents[node]].argmax())
        rows.append(leaf_paths(parents))
    return logits, tokens, pad_paths(rows)


@pytest.mark.parametrize("seed", range(12))
def test_lean_greedy_verify_matches_the_reference_on_random_batches(verify_session, seed: int) -> None:
    gen = np.random.default_rng(seed)
    _run_verify(verify_session, *_random_batch(gen, int(gen.integers(1, 5)), 64, follow=[0.5, 0.9, 1.0][seed % 3]))


def test_lean_greedy_verify_edge_cases(verify_session) -> None:
    gen = np.random.default_rng(3)
    v = 32
    logits = gen.standard_normal((3, 5, v)).astype(np.float32)
    g = logits.argmax(-1)
    # row 0: every draft rejected; row 1: a perfect drafter on two equal chains (the lower path wins);
    # row 2: a chain with a padding-only path row in front
    tokens = np.stack([(g[0] + 1) % v, np.zeros(5, np.int64), np.zeros(5, np.int64)]).astype(np.int32)
    tokens[1, 1], tokens[1, 2] = g[1, 0], g[1, 0]  # nodes 1 and 2: children of the root, both right
    tokens[1, 3], tokens[1, 4] = g[1, 1], g[1, 2]  # node 3 under 1, node 4 under 2
    tokens[2, 1], tokens[2, 2] = g[2, 0], g[2, 1]
    paths = np.full((3, 3, 3), -1, np.int32)
    paths[:, :, 0] = 0
    paths[0, 0], paths[0, 1] = [0, 1, 2], [0, 3, 4]
    paths[1, 0], paths[1, 1] = [0, 2, 4], [0, 1, 3]
    paths[2, 1] = [0, 1, 2]  # row 2's path 0 is padding ([0, -1, -1])
    _run_verify(verify_session, logits, tokens, paths)
    zero = np.zeros((2, 4, v), np.float32)  # every prediction is token 0 (ties: the lowest id), every draft 0:
    zero[..., 1:] = -1.0  # accepted to the end of each path, where only the padding sentinel stops it
    chain = np.array([[[0, 1, 2, 3]], [[0, 1, -1, -1]]], np.int32)
    _run_verify(verify_session, zero, np.zeros((2, 4), np.int32), chain)
    one = gen.standard_normal((2, 1, v)).astype(np.float32)  # prefill: one verify node, paths [[[0]]]
    _run_verify(verify_session, one, np.zeros((2, 1), np.int32), np.zeros((2, 1, 1), np.int32))


# -- the tree bias ------------------------------------------------------------------------------------


def _bias_session(capacity: int = 64) -> ort.InferenceSession:
    """The `ort` variant's per-graph attention inputs (`OrtVariant.prepare`) for the EAGLE form of the step
    values (write_at = past_len + write_offset); the graph's output is the attention bias GroupQueryAttention
    reads (an If: zeros when U = 1, else `tree_bias`)."""
    g = Graph("bias")
    for name, elem, dims in (
        ("past_len", I64, ["B"]),
        ("write_offset", I64, ["B"]),
        ("num_new", I64, ["B"]),
        ("position_ids", I64, ["B", "F"]),
        ("tree_mask", BOOL, ["B", "F", "U"]),
    ):
        g.input(name, elem, dims)
    write_at = g.op("Add", "past_len", "write_offset")
    variant = OrtVariant()
    rope = np.zeros((capacity, 8), np.float32)
    variant.prepare(
        g, StepValues("position_ids", "past_len", write_at, "num_new", "tree_mask"), rope, rope, AttnShape(4, 2, 16)
    )
    g.op("Identity", variant.bias, out="bias")
    g.output("bias", F32, ["Bb", 1, "Fb", "S"])
    return ort.InferenceSession(g.model(variant.opsets).SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def bias_session() -> ort.InferenceSession:
    return _bias_session()


@pytest.mark.parametrize("seed", range(10))
def test_tree_bias_is_the_contract_rule_where_causality_does_not_decide(bias_session, seed: int) -> None:
    """bias[b, 0, i, s] = −inf iff 0 ≤ s − past_len[b] < U and not tree_mask[b, i, s − past_len[b]], else 0 —
    for every slot s up to the row's own one (write_at + i); later slots are GroupQueryAttention's causal
    rule's. The EAGLE form (write_offset > 0, U > F), one row over several tentative columns (F = 1 < U), a
    plain step (F = U = 1) and rows of different lengths included. A [1, …] bias is the same for every row."""
    gen = np.random.default_rng(seed)
    b = int(gen.integers(1, 4))
    f = 1 if seed % 3 == 0 else int(gen.integers(1, 6))
    offset = gen.integers(0, 4, b) if seed % 2 else np.zeros(b, np.int64)
    u = f + int(offset.max())
    past, num = gen.integers(0, 20, b), gen.integers(1, f + 1, b)
    tree = gen.random((b, f, u)) < 0.5
    for r in range(b):  # each new row attends itself (the contract)
        tree[r, np.arange(f), offset[r] + np.arange(f)] = True
    feeds = {
        "past_len": past,
        "write_offset": offset,
        "num_new": num,
        "tree_mask": tree,
        "position_ids": np.zeros((b, f), np.int64),
    }
    bias = bias_session.run(None, feeds)[0]
    s_max = int((past + offset + num).max())
    assert bias.shape[1:] == (1, f, s_max) or bias.shape == (1, 1, 1, s_max)
    bias = np.broadcast_to(bias, (b, 1, f, s_max))
    for r in range(b):
        for i in range(f):
            for s in range(min(s_max, int(past[r] + offset[r]) + i + 1)):
                col = s - int(past[r])
                visible = col < 0 or col >= u or bool(tree[r, i, col])
                assert bias[r, 0, i, s] == (0.0 if visible else -np.inf), (r, i, s)


# -- the layer layout ---------------------------------------------------------------------------------

# onnxruntime-genai 0.18.0's model builder (`python -m onnxruntime_genai.models.builder -p fp32 -e cpu`,
# onnxruntime_genai/models/builders/base.py) on tests/fixtures/tiny-llama3, read off its model.onnx here: the ops
# of each decoder layer (names "/model/layers.{i}/…"; layer i's input norm adds layer i−1's MLP output).
GENAI_LAYER_0 = {
    "SimplifiedLayerNormalization": 1,
    "MatMul": 5,
    "GroupQueryAttention": 1,
    "SkipSimplifiedLayerNormalization": 1,
    "Sigmoid": 1,
    "Mul": 2,
}
GENAI_LAYER = {"SkipSimplifiedLayerNormalization": 2, "MatMul": 5, "GroupQueryAttention": 1, "Sigmoid": 1, "Mul": 2}
# The same ops in our spelling: ONNX's RMSNormalization is ORT's SimplifiedLayerNormalization (which onnx.checker
# does not know), and x · Sigmoid(x) is the QuickGelu(alpha=1) that ONNX Runtime's QuickGeluFusion makes of it.
SPELLING = {"SimplifiedLayerNormalization": {"RMSNormalization": 1}, "Sigmoid": {"QuickGelu": 1, "Mul": -1}}


def _ours(genai: dict[str, int]) -> collections.Counter:
    out = collections.Counter(genai)
    for theirs, mine in SPELLING.items():
        if out.pop(theirs, 0):
            out.update(mine)
    return +out


def _non_layer(graph: onnx.GraphProto) -> int:
    return sum(not n.name.startswith("layer") for n in graph.node)


def test_each_layer_holds_what_genai_builder_emits(tmp_path: Path) -> None:
    """Per layer exactly GenAI's ops (packed QKV, GroupQueryAttention, fused norms, separate gate / up), and
    fewer nodes outside the layers than the `standard` graph's ORT twin."""
    model = tiny_target(0, scaling=False, tied=False, head_dim=16, layers=3)
    res = export_target(model, tmp_path / "t", variant="ort", mode="greedy", max_seq_len=64)
    graph = onnx.load(str(res.ort), load_external_data=False).graph
    for layer in range(3):
        ops = collections.Counter(n.op_type for n in graph.node if n.name.startswith(f"layer{layer}/"))
        assert ops == _ours(GENAI_LAYER_0 if layer == 0 else GENAI_LAYER), layer
    std = export_target(model, tmp_path / "s", variant="standard", mode="greedy", max_seq_len=64)
    assert _non_layer(graph) < _non_layer(onnx.load(str(std.ort), load_external_data=False).graph)


# -- the engine's sessions ------------------------------------------------------------------------


def test_groupqueryattention_per_head_kernel_and_flash_both_match_the_reference(tmp_path: Path) -> None:
    """One lean graph, two sessions: the engine's (`make_session`: GroupQueryAttention one GEMM per head) and a
    plain one (its flash kernel). A prefill, then a tree step: the new nodes' hidden states and the caches
    against the float64 reference within the torch fp32 reference's own error (harness bounds); the
    environment as it was before."""
    model = tiny_target(4, scaling=True, tied=False, head_dim=16)
    cfg, cap = model.cfg, 64
    res = export_target(model, tmp_path / "t", variant="ort", mode="greedy", max_seq_len=cap)
    before = os.environ.get(GQA_FLASH_ENV)
    per_head = Session(res.ort, 1, cfg.num_hidden_layers, cfg.num_key_value_heads, cap, cfg.head_dim)
    per_head.sess = make_session(res.ort)
    assert os.environ.get(GQA_FLASH_ENV) == before
    flash = Session(res.ort, 1, cfg.num_hidden_layers, cfg.num_key_value_heads, cap, cfg.head_dim)
    gen = np.random.default_rng(0)
    prompt = gen.integers(0, cfg.vocab_size, 9).tolist()
    parents = [-1, 0, 0, 1, 2]
    tree, depth = ancestors(parents)
    nodes = gen.integers(0, cfg.vocab_size, 5).tolist()
    one = np.ones((1, 1), bool)
    calls = [
        (prompt, np.tril(np.ones((9, 9), bool)), np.arange(9), 0, [8], np.zeros((1, 1), np.int32)),
        (nodes, tree, 9 + depth, 9, list(range(5)), pad_paths([leaf_paths(parents)])[0]),
        (nodes[:1], one, [9], 9, [0], np.zeros((1, 1), np.int32)),
    ]  # a plain step (T = 1) over slot 9
    m64 = f64(model)
    for tokens, tmask, pos, past, verify, paths in calls:
        n = len(tokens)
        feeds = {
            "tokens": np.array([tokens]),
            "position_ids": np.asarray(pos, np.int64)[None],
            "tree_mask": tmask[None],
            "past_len": np.array([past]),
            "num_nodes": np.array([n]),
            "verify_index": np.array([verify]),
            "paths": paths[None],
        }
        seq, positions = prompt + (tokens if past else []), list(range(9)) + (list(pos) if past else [])
        mask = sequence_mask(9, tmask) if past else torch.from_numpy(tmask)
        ref64 = reference_pass(m64, seq, mask, positions)
        ref32 = reference_pass(model, seq, mask, positions)
        for sess in (per_head, flash):
            out = sess.run(feeds)
            assert_close(out["hidden"][0, :n], ref32[1][past:], ref64[1][past:], "hidden")
            assert_close(sess.k[:, 0, :, : past + n], ref32[2], ref64[2], "keys")
            assert_close(sess.v[:, 0, :, : past + n], ref32[3], ref64[3], "values")
    assert os.environ.get(GQA_FLASH_ENV) == before


def test_gqa_per_head_kernel_respects_a_set_environment(monkeypatch) -> None:
    monkeypatch.setenv(GQA_FLASH_ENV, "0")
    with gqa_per_head_kernel():
        assert os.environ[GQA_FLASH_ENV] == "0"
    monkeypatch.delenv(GQA_FLASH_ENV)
    with gqa_per_head_kernel():
        assert os.environ[GQA_FLASH_ENV] == "1"
    assert GQA_FLASH_ENV not in os.environ


# -- the profile parser -------------------------------------------------------------------------------


def test_parse_trace_keeps_the_last_runs_and_takes_medians() -> None:
    """Three model runs; the first is a warm-up. Per op type the median over the kept runs of its sum; an If
    counts its own time only (its span minus the subgraph kernels inside it)."""
    events = []
    runs = [
        (0, [(0, "MatMul", 50), (10, "Add", 9)]),
        (100, [(0, "MatMul", 10), (10, "MatMul", 20), (30, "Add", 3)]),
        (200, [(0, "MatMul", 40), (10, "If", 30), (15, "Add", 1), (25, "Add", 4)]),
    ]  # the If encloses both Adds
    for run, (start, kernels) in enumerate(runs):
        events.append({"cat": "Session", "name": "model_run", "ts": start, "dur": 90})
        for j, (at, op, dur) in enumerate(kernels):
            events.append(
                {"cat": "Node", "name": f"n{run}{j}_kernel_time", "ts": start + at, "dur": dur, "args": {"op_name": op}}
            )
            events.append(
                {"cat": "Node", "name": f"n{run}{j}_fence_before", "ts": start + at, "dur": 0, "args": {"op_name": op}}
            )  # not a kernel
    totals, spans, ops, kernels = parse_trace(events, runs=2)
    assert totals == [33.0, 40 + 25 + 5] and spans == [90.0, 90.0] and kernels == 4  # round(median(3, 4))
    assert (ops["MatMul"].us, ops["MatMul"].kernels, ops["Add"].us, ops["If"].us) == (35.0, 1.5, 4.0, 12.5)
    with pytest.raises(ValueError, match="fewer than 4"):
        parse_trace(events, runs=4)


# -- the variant rule ---------------------------------------------------------------------------------


def test_the_lean_graph_is_the_default_for_the_cpu_form_only(monkeypatch) -> None:
    """Hand-worked table: `ort` for CPU-form graphs where GroupQueryAttention runs; `standard` for a head_dim it
    refuses, for a GPU form (its TensorRT rewrite starts from `standard`) and for callers that do not say."""
    monkeypatch.delenv("TRTSPEC_ORT_VARIANT", raising=False)
    bf16 = Precision("bfloat16", "bfloat16")
    table = [
        ((None, 32, CPU), "ort"),
        ((None, 24, CPU), "standard"),
        ((None, 32, None), "standard"),
        ((None, 32, bf16), "standard"),
        (("standard", 32, CPU), "standard"),
        (("ort", 32, None), "ort"),
    ]
    assert [pick_variant(*args) for args, _ in table] == [want for _, want in table]
    monkeypatch.setenv("TRTSPEC_ORT_VARIANT", "standard")
    assert pick_variant(None, 32, CPU) == "standard"
    with pytest.raises(ValueError, match="head_dim % 16"):
        pick_variant("ort", 24, CPU)


# -- the plain-steps twin (verify.plain_twin) ----------------------------------------------------------


def test_plain_twin_decodes_as_the_if_graph_and_refuses_trees(tmp_path: Path) -> None:
    """The plain-steps graph (no If, no attention bias; chains verified on the host) against the If graph it comes
    from (in-graph verification): token for token, in the KV cache it writes and, with n-gram chains, in every
    step's accepted count — alone and batched with prompts of different lengths (ragged chains); a draft tree that
    is not a chain is refused, not mis-verified."""
    from builder.engines.ort.target import OrtEngine, TargetSpec
    from builder.speculative.decoding import Decoder, Request, generate
    from builder.speculative.ngram.drafter import NgramDrafter
    from tests.unit.engine_cases import draft_from

    model = tiny_target(7, scaling=True, tied=False, head_dim=16)
    res = export_target(model, tmp_path / "g", variant="ort", mode="greedy", max_seq_len=96)
    assert res.plain is not None and res.plain.is_file()
    plain = onnx.load(str(res.plain), load_external_data=False)
    assert not any(n.op_type in ("If", "ArgMax") for n in plain.graph.node)  # greedy tokens: the host's (NumPy)
    outs = {o.name for o in plain.graph.output}
    assert "verify_logits" in outs and not outs & {
        "node_argmax",
        "output_tokens",
        "best_path",
        "accepted_len",
        "hidden",
    }
    gqa_out = [n for n in plain.graph.node if n.op_type == "GroupQueryAttention"][-1].output[0]
    o_proj = next(n for n in plain.graph.node if n.op_type == "MatMul" and n.input[0].startswith(gqa_out))
    picked = next(n for n in plain.graph.node if n.output[0] == o_proj.input[0])  # the last layer runs the verify rows
    assert picked.op_type == "GatherND" and picked.input[0] == gqa_out
    gqa = [n for n in plain.graph.node if n.op_type == "GroupQueryAttention"]
    assert gqa and all(len(n.input) <= 10 or n.input[10] == "" for n in gqa)
    cfg = model.cfg
    spec = TargetSpec(
        res.ort,
        None,
        cfg.num_hidden_layers,
        cfg.num_key_value_heads,
        cfg.head_dim,
        cfg.hidden_size,
        cfg.vocab_size,
        96,
        None,
        res.plain,
    )
    gen = np.random.default_rng(3)
    prompts = [[int(t) for t in gen.integers(0, cfg.vocab_size, int(n))] for n in gen.integers(1, 30, 6)]
    engines = {p: OrtEngine(spec, 80, 3, plain_only=p) for p in (False, True)}
    assert engines[True].plain_only and not engines[False].plain_only
    for p in prompts:
        a, b = (generate(engines[k], p, 24) for k in (False, True))
        assert a.token_ids == b.token_ids
        live = len(p) + 23  # the prompt and every emitted token but the last sit in row 0's cache
        assert np.array_equal(engines[False].kv.buf[:, :, 0, :, :live], engines[True].kv.buf[:, :, 0, :, :live])
    runs = {
        k: Decoder(engines[k], None).run([Request(tuple(p), 20 - i) for i, p in enumerate(prompts)])
        for k in (False, True)
    }
    assert [g.token_ids for g in runs[False]] == [g.token_ids for g in runs[True]]
    loops = [[3, 4, 5] * 5, [9, 9, 9, 9, 9, 8], [1, 2] * 7 + [3]]  # prompts that make the n-gram drafter draft
    for p in loops:
        a, b = (generate(engines[k], p, 30, NgramDrafter(6, 3, 1, 1)) for k in (False, True))
        assert a.token_ids == b.token_ids and a.accepted_per_step == b.accepted_per_step
    runs = {
        k: Decoder(engines[k], NgramDrafter(6, 3, 1, 1)).run([Request(tuple(p), 30) for p in loops])
        for k in (False, True)
    }
    assert [(g.token_ids, g.accepted_per_step) for g in runs[False]] == [
        (g.token_ids, g.accepted_per_step) for g in runs[True]
    ]
    assert sum(sum(g.accepted_per_step) for g in runs[True]) > 0  # the chains were really verified
    e = engines[True]
    ids, pre = e.start([prompts[0]], SamplingBatch.all_greedy(1, 1))
    with pytest.raises(ValueError, match="plain steps and chains"):
        e.step(ids, [draft_from([-1, 0, 0], [int(pre.tokens[0]), 5, 6])], SamplingBatch.all_greedy(1, 2))
