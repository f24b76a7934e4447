"""ONNX face of `tree_verify`: the custom op `trtspec::TreeVerify` and its ONNX Runtime route.

* `register_schema()` registers the op's schema with `onnx.defs` so `onnx.checker` accepts graphs
  that contain it; `make_node()` is what the exporter emits. The node carries `plugin_namespace`
  ("trtspec") so TensorRT's ONNX parser maps it to the plugin of `trt_plugin.py`.
* `decompose(model)` is the ONNX Runtime route: a graph rewrite that replaces every TreeVerify node
  by standard ONNX ops (opset ≥ 18) computing the same contract, so any ORT build runs it. It is an
  independent, vectorised formulation of the reference's algorithm: every edge (parent, child) of
  every path of every sequence gets its verdict at once, laid out like the paths [B, P, D]; the
  accepted chain is the longest run of accepted edges from the root (ties: lowest path index).

Greedy: the verdict on the edge at depth k of path p is tok(paths[b, p, k]) == argmax at
paths[b, p, k − 1]; no tree structure is needed.

Rejection mode, vectorised: with p the tempered top-p distribution of every node and, for each
child c, a(c) = p_parent(tok c) / q(c) (0 for a token already drafted by an earlier sibling), the
walk "accept c iff t < a(c), else t −= a(c)" accepts child c exactly when
    S(c) ≤ u_parent < S(c) + a(c),      S(c) = Σ a(c') over the earlier siblings c' of c,
so the verdicts are one batched matrix product away. Per sequence, parent [B, T] comes from one
ScatterElements over the paths' edges (-1: not a child), the sibling matrix [B, T, T] from it, and
u_parent is uniforms[b, k − 1] for the edge at depth k. The bonus token is the inverse CDF of the
last node's residual (its children's tokens removed) at t = u_last − Σ a(children of the last node).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from plugins.tree_verify.contract import DOMAIN, INPUTS, OP_TYPE, OP_VERSION, OUTPUTS, TEMPERATURE_EPS, Mode

MIN_OPSET = 18  # ReduceMax with axes as an input; ScatterElements with reduction max / min
_ONNX_TYPES = {
    "float32": "tensor(float)",
    "float16": "tensor(float16)",
    "bfloat16": "tensor(bfloat16)",
    "int32": "tensor(int32)",
}
F, I64, I32, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL


def register_schema() -> None:
    """Register trtspec::TreeVerify (version 1) with onnx.defs; idempotent."""
    if onnx.defs.has(OP_TYPE, DOMAIN):
        return
    io = onnx.defs.OpSchema.FormalParameter
    doc = lambda s: f"[{', '.join(s.dims)}] {s.doc}"  # noqa: E731  e.g. "[B, P, D+1] per sequence: ..."
    inputs = [io(s.name, "L" if s.name == "logits" else _ONNX_TYPES[s.dtypes[0]], doc(s)) for s in INPUTS]
    outputs = [io(s.name, _ONNX_TYPES[s.dtypes[0]], doc(s)) for s in OUTPUTS]
    attr = onnx.defs.OpSchema.Attribute
    schema = onnx.defs.OpSchema(
        OP_TYPE,
        DOMAIN,
        OP_VERSION,
        "Tree verification for speculative decoding; see plugins/tree_verify/contract.py.",
        inputs=inputs,
        outputs=outputs,
        type_constraints=[("L", [_ONNX_TYPES[d] for d in ("float32", "float16", "bfloat16")], "logits type")],
        attributes=[
            attr("mode", onnx.defs.OpSchema.AttrType.INT, "0 = greedy, 1 = rejection", required=True),
            attr("plugin_namespace", onnx.defs.OpSchema.AttrType.STRING, "TensorRT plugin namespace", required=False),
            attr("plugin_version", onnx.defs.OpSchema.AttrType.STRING, "TensorRT plugin version", required=False),
        ],
    )
    onnx.defs.register_schema(schema)


def make_node(
    inputs: Sequence[str], outputs: Sequence[str], mode: Mode | int | str, name: str = "tree_verify"
) -> onnx.NodeProto:
    """The TreeVerify node (inputs/outputs in contract order), with TensorRT's plugin attributes."""
    if len(inputs) != len(INPUTS) or len(outputs) != len(OUTPUTS):
        raise ValueError(f"TreeVerify takes {len(INPUTS)} inputs and {len(OUTPUTS)} outputs")
    return helper.make_node(
        OP_TYPE,
        list(inputs),
        list(outputs),
        name=name,
        domain=DOMAIN,
        mode=int(Mode.parse(mode)),
        plugin_namespace=DOMAIN,
        plugin_version=str(OP_VERSION),  # read by TensorRT's ONNX parser
    )


def decompose(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` with every TreeVerify node replaced by standard ONNX ops (for ORT)."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < MIN_OPSET:
        raise ValueError(f"decompose needs default-domain opset ≥ {MIN_OPSET}, the model has {opset}")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes = []
    for node in out.graph.node:
        if node.op_type == OP_TYPE and node.domain == DOMAIN:
            nodes.extend(_expand(node))
        else:
            nodes.append(node)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    kept = [o for o in out.opset_import if o.domain != DOMAIN]
    del out.opset_import[:]
    out.opset_import.extend(kept)
    return out


class _Graph:
    """Emits nodes with unique output names under a prefix; equal constants are emitted once."""

    def __init__(self, prefix: str) -> None:
        self.prefix, self._n = prefix, 0
        self.nodes: list[onnx.NodeProto] = []
        self._consts: dict[tuple[str, tuple[int, ...], bytes], str] = {}

    def op(self, op_type: str, *inputs: str, n_out: int = 1, **attrs: Any) -> str:
        outs = [f"{self.prefix}/{op_type}_{self._n}_{i}" for i in range(n_out)]
        self._n += 1
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, **attrs))
        return outs[0]

    def const(self, value: object, dtype: type = np.int64) -> str:
        array = np.asarray(value, dtype=dtype)
        key = (array.dtype.str, array.shape, array.tobytes())
        if key not in self._consts:
            self._consts[key] = self.op("Constant", value=numpy_helper.from_array(array))
        return self._consts[key]

    def f32(self, value: float) -> str:
        return self.const(np.float32(value), np.float32)

    def cast(self, x: str, to: int) -> str:
        return self.op("Cast", x, to=to)

    def unsq(self, x: str, *axes: int) -> str:
        return self.op("Unsqueeze", x, self.const(list(axes)))

    def cols(self, x: str, start: int, stop: int = 2**62, axis: int = -1) -> str:
        return self.op("Slice", x, self.const([start]), self.const([stop]), self.const([axis]))

    def reduce(self, kind: str, x: str, axes: Sequence[int], keepdims: int = 0) -> str:
        return self.op(kind, x, self.const(list(axes)), keepdims=keepdims)


def _expand(node: onnx.NodeProto) -> list[onnx.NodeProto]:
    mode = Mode(next(a.i for a in node.attribute if a.name == "mode"))
    g = _Graph(node.name or "tree_verify")
    logits, tokens, paths, temperature, top_p, uniforms, draft_probs = node.input
    x = g.cast(logits, F)  # [B, T, V] fp32 (exact for fp16 / bf16)
    pa = g.cast(paths, I64)  # [B, P, W]
    kids, parents = g.cols(pa, 1), g.cols(pa, 0, -1)  # [B, P, D] each edge's child and parent
    kid_ok = g.op("GreaterOrEqual", kids, g.const(0))  # [B, P, D] a real edge (not -1 padding)
    kid0 = g.op("Max", kids, g.const(0))  # [B, P, D] -1 → the root (masked by kid_ok)
    kid_at = g.unsq(kid0, 3)  # [B, P, D, 1] GatherND indices
    par_at = g.unsq(g.op("Max", parents, g.const(0)), 3)
    greedy = g.cast(g.op("ArgMax", x, axis=2, keepdims=0, select_last_index=0), I32)  # [B, T] lowest id on ties
    kid_tok = g.op("GatherND", tokens, kid_at, batch_dims=1)  # [B, P, D] int32
    accepted = g.op("Equal", kid_tok, g.op("GatherND", greedy, par_at, batch_dims=1))  # greedy verdicts
    if mode is Mode.REJECTION:
        eps = g.f32(TEMPERATURE_EPS)
        greedy_row = g.unsq(g.op("LessOrEqual", temperature, eps), 1)  # [B, 1]
        p = _nucleus(g, x, g.op("Max", temperature, eps), top_p)  # [B, T, V]
        tree = _tree(g, kid0, parents, kid_ok, tokens)
        a = _draft_ratio(g, p, draft_probs, tree)  # [B, T]
        s_prev = g.op("Squeeze", g.op("MatMul", g.unsq(a, 1), tree["sib_lt"]), g.const([1]))  # [B, T] Σ a, earlier sibs
        u = g.unsq(g.cols(uniforms, 0, -1), 1)  # [B, 1, D] the uniform of each edge's parent depth
        lo = g.op("GatherND", s_prev, kid_at, batch_dims=1)  # [B, P, D]
        hi = g.op("GatherND", g.op("Add", s_prev, a), kid_at, batch_dims=1)
        verdict = g.op("And", g.op("GreaterOrEqual", u, lo), g.op("Less", u, hi))  # S(c) ≤ u < S(c) + a(c)
        pick = g.op("And", g.unsq(greedy_row, 2), g.op("Xor", accepted, verdict))  # ORT's Where has no bool kernel:
        accepted = g.op("Xor", verdict, pick)  # greedy rows take the greedy verdicts, the others `verdict`
    n_acc, best, alive = _score_paths(g, g.op("And", accepted, kid_ok))  # [B, 1], [B, 1], [B, P, D]
    last = g.op("GatherElements", g.op("GatherND", pa, best, batch_dims=1), n_acc, axis=1)  # [B, 1] last node
    bonus = g.op("GatherElements", greedy, last, axis=1)  # [B, 1] int32
    if mode is Mode.REJECTION:
        sampled = _residual_sample(g, p, a, uniforms, tree, n_acc, last, g.cast(bonus, I64))
        bonus = g.op("Where", greedy_row, bonus, g.cast(sampled, I32))
    chain = g.op(
        "Where",
        g.op("GatherND", alive, best, batch_dims=1),
        g.op("GatherND", kid_tok, best, batch_dims=1),
        g.const(-1, np.int32),
    )  # [B, D] the accepted draft tokens, then -1
    _outputs(g, node.output, chain, n_acc, best, bonus)
    return g.nodes


def _tree(g: _Graph, kid0: str, parents: str, kid_ok: str, tokens: str) -> dict[str, str]:
    """Per sequence, from the paths' edges [B, P, D] (child, -1 → 0; parent; real edge): parent
    [B, T] (-1: the root, or on no path), sib_lt [B, T, T] fp32 (c' an earlier sibling of c, at
    [b, c', c]) and the child nodes' tokens tok [B, T] int64 (0 elsewhere: never read)."""
    edges = g.const([0, -1])  # reshape [B, P, D] → [B, P·D]
    kid_e = g.op("Reshape", kid0, edges)  # [B, E]; a -1 child lands on the root, with parent -1
    par_e = g.op("Reshape", g.op("Where", kid_ok, parents, g.const(-1)), edges)  # [B, E]
    none = g.op("Expand", g.const(-1), g.op("Shape", tokens))  # [B, T]
    parent = g.op("ScatterElements", none, kid_e, par_e, axis=1, reduction="max")  # [B, T] (edges repeat)
    same = g.cast(g.op("Equal", g.unsq(parent, 2), g.unsq(parent, 1)), F)  # [B, T(c'), T(c)]
    sib_lt = g.op("Trilu", same, g.const(1), upper=1)  # c' < c; a child's siblings are children
    is_kid = g.op("GreaterOrEqual", parent, g.const(0))  # [B, T]
    tok = g.op("Where", is_kid, g.cast(tokens, I64), g.const(0))  # [B, T] safe as an index into V
    return dict(parent=parent, sib_lt=sib_lt, tok=tok)


def _nucleus(g: _Graph, x: str, temperature: str, top_p: str) -> str:
    """p [B, T, V]: softmax(x / temperature) on the top-p nucleus (closed under ties), renormalised."""
    p = g.op("Softmax", g.op("Div", x, g.unsq(temperature, 1, 2)), axis=-1)
    vocab = g.op("Gather", g.op("Shape", x), g.const([2]))  # [1]
    ranked = g.op("TopK", p, vocab, axis=-1, largest=1, sorted=1, n_out=2)  # [B, T, V] descending
    before = g.op("CumSum", ranked, g.const(2), exclusive=1)  # mass ranked ahead (monotone)
    tp = g.unsq(top_p, 1, 2)  # [B, 1, 1]; top_p ≥ 1 keeps every token: compare with 2 instead
    tp = g.op("Where", g.op("GreaterOrEqual", tp, g.f32(1)), g.f32(2), tp)
    kept = g.op("Where", g.op("Less", before, tp), ranked, g.f32(np.inf))  # the nucleus, a prefix
    tau = g.reduce("ReduceMin", kept, [2], keepdims=1)  # [B, T, 1] its least probability
    p = g.op("Where", g.op("GreaterOrEqual", p, tau), p, g.f32(0))
    return g.op("Div", p, g.reduce("ReduceSum", p, [2], keepdims=1))


def _draft_ratio(g: _Graph, p: str, q: str, tree: dict[str, str]) -> str:
    """a [B, T] = p_parent(tok c) / q(c), 0 where an earlier sibling drafted the same token."""
    tok = g.unsq(tree["tok"], 2)  # [B, T, 1]
    w = g.op(
        "GatherND", p, g.op("Concat", g.unsq(g.op("Max", tree["parent"], g.const(0)), 2), tok, axis=2), batch_dims=1
    )  # [B, T] p at (parent, token)
    same_tok = g.cast(g.op("Equal", tok, g.unsq(tree["tok"], 1)), F)  # [B, T(c'), T(c)]
    repeat = g.reduce("ReduceMax", g.op("Mul", same_tok, tree["sib_lt"]), [1])  # [B, T] 1: a repeated token
    w = g.op("Where", g.op("Greater", repeat, g.f32(0)), g.f32(0), w)
    return g.op("Div", w, q)


def _score_paths(g: _Graph, accepted: str) -> tuple[str, str, str]:
    """From each edge's verdict [B, P, D]: accepted draft nodes n_acc [B, 1] (the longest run of
    accepted edges from the root), the best path [B, 1] (lowest index among the longest) and
    alive [B, P, D] (the edge and all before it accepted)."""
    misses = g.op("CumSum", g.cast(g.op("Not", accepted), I64), g.const(2))  # [B, P, D]
    alive = g.op("Equal", misses, g.const(0))
    per_path = g.reduce("ReduceSum", g.cast(alive, I64), [2])  # [B, P]
    best = g.op("ArgMax", per_path, axis=1, keepdims=1, select_last_index=0)  # [B, 1] lowest index
    return g.op("GatherElements", per_path, best, axis=1), best, alive


def _residual_sample(
    g: _Graph, p: str, a: str, uniforms: str, tree: dict[str, str], n_acc: str, last: str, fallback: str
) -> str:
    """Rejection bonus [B, 1] int64: inverse CDF of the last node's residual at t = u − Σ a(children)."""
    kids_of_last = g.op("Equal", tree["parent"], last)  # [B, T]
    spent = g.reduce("ReduceSum", g.op("Where", kids_of_last, a, g.f32(0)), [1], keepdims=1)  # [B, 1]
    t = g.op("Sub", g.op("GatherElements", uniforms, n_acc, axis=1), spent)  # [B, 1]
    p_last = g.op("GatherND", p, last, batch_dims=1)  # [B, V]
    drop = g.op("Where", kids_of_last, g.f32(0), g.f32(1))  # [B, T] min(p, 0) removes a child's token
    res = g.op("ScatterElements", p_last, tree["tok"], drop, axis=1, reduction="min")  # [B, V] residual
    hit = g.cast(g.op("Greater", g.op("CumSum", res, g.const(1)), t), I32)  # [B, V]
    pos = g.cast(g.op("Greater", res, g.f32(0)), I32)
    first = g.op("ArgMax", hit, axis=1, keepdims=1, select_last_index=0)
    last_pos = g.op("ArgMax", pos, axis=1, keepdims=1, select_last_index=1)
    some = lambda v: g.op("Greater", g.reduce("ReduceMax", v, [1], keepdims=1), g.const(0, np.int32))  # noqa: E731
    return g.op("Where", some(hit), first, g.op("Where", some(pos), last_pos, fallback))


def _outputs(g: _Graph, names: Sequence[str], chain: str, n_acc: str, best: str, bonus: str) -> None:
    """chain [B, D] int32: accepted draft tokens, then -1; n_acc, best [B, 1] int64; bonus [B, 1] int32."""
    acc_len, best_path, out_tokens = names
    toks = g.op("Pad", chain, g.const([0, 0, 0, 1]), g.const(-1, np.int32))  # [B, W]
    g.nodes.append(helper.make_node("ScatterElements", [toks, n_acc, bonus], [out_tokens], axis=1))  # bonus at n_acc
    emitted = g.op("Squeeze", g.op("Add", n_acc, g.const(1)), g.const([1]))  # [B] accepted + bonus
    g.nodes.append(helper.make_node("Cast", [emitted], [acc_len], to=I32))
    g.nodes.append(helper.make_node("Cast", [g.op("Squeeze", best, g.const([1]))], [best_path], to=I32))
