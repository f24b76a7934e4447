"""ONNX face of `tree_verify`: the custom op `trtspec::TreeVerify` and its ONNX Runtime route.

* `register_schema()` registers the op's schema with `onnx.defs` so `onnx.checker` accepts graphs
  that contain it; `make_node()` is what the exporter emits. The node carries `plugin_namespace`
  ("trtspec") so TensorRT's ONNX parser maps it to the plugin of `trt_plugin.py`.
* `decompose(model)` is the ONNX Runtime route: a graph rewrite that replaces every TreeVerify node
  by standard ONNX ops (opset ≥ 18) computing the same contract, so any ORT build runs it. It is an
  independent, vectorised formulation of the reference's algorithm: each node's verdict on its
  children is computed for all nodes at once, then the paths are scored like the greedy ones.

Rejection mode, vectorised: with p the tempered top-p distribution of every node and, for each
child c, a(c) = p_parent(tok c) / q(c) (0 for a token already drafted by an earlier sibling), the
walk "accept c iff t < a(c), else t −= a(c)" accepts child c exactly when
    0 ≤ u_parent − S(c) < a(c),      S(c) = Σ a(c') over the earlier siblings c' of c,
so the verdicts are one matrix product away. The accepted chain is the longest path whose nodes
are all accepted; the bonus token is the inverse CDF of the last node's residual (its children's
tokens removed) at t = u_last − Σ a(children of the last node).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from plugins.tree_verify.contract import DOMAIN, INPUTS, OP_TYPE, OP_VERSION, OUTPUTS, TEMPERATURE_EPS, Mode

MIN_OPSET = 18  # ReduceMax with axes as an input
_ONNX_TYPES = {"float32": "tensor(float)", "float16": "tensor(float16)", "bfloat16": "tensor(bfloat16)",
               "int32": "tensor(int32)"}  # fmt: skip
F, I64, I32, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL


def register_schema() -> None:
    """Register trtspec::TreeVerify (version 1) with onnx.defs; idempotent."""
    if onnx.defs.has(OP_TYPE, DOMAIN):
        return
    io = onnx.defs.OpSchema.FormalParameter
    inputs = [io(s.name, "L" if s.name == "logits" else _ONNX_TYPES[s.dtypes[0]], s.doc) for s in INPUTS]
    outputs = [io(s.name, _ONNX_TYPES[s.dtypes[0]], s.doc) for s in OUTPUTS]
    attr = onnx.defs.OpSchema.Attribute
    schema = onnx.defs.OpSchema(
        OP_TYPE, DOMAIN, OP_VERSION,
        "Tree verification for speculative decoding; see plugins/tree_verify/contract.py.",
        inputs=inputs, outputs=outputs,
        type_constraints=[("L", [_ONNX_TYPES[d] for d in ("float32", "float16", "bfloat16")], "logits type")],
        attributes=[
            attr("mode", onnx.defs.OpSchema.AttrType.INT, "0 = greedy, 1 = rejection", required=True),
            attr("plugin_namespace", onnx.defs.OpSchema.AttrType.STRING, "TensorRT plugin namespace", required=False),
            attr("plugin_version", onnx.defs.OpSchema.AttrType.STRING, "TensorRT plugin version", required=False),
        ],
    )  # fmt: skip
    onnx.defs.register_schema(schema)


def make_node(
    inputs: Sequence[str], outputs: Sequence[str], mode: Mode | int | str, name: str = "tree_verify"
) -> onnx.NodeProto:
    """The TreeVerify node (inputs/outputs in contract order), with TensorRT's plugin attributes."""
    if len(inputs) != len(INPUTS) or len(outputs) != len(OUTPUTS):
        raise ValueError(f"TreeVerify takes {len(INPUTS)} inputs and {len(OUTPUTS)} outputs")
    return helper.make_node(
        OP_TYPE, list(inputs), list(outputs), name=name, domain=DOMAIN, mode=int(Mode.parse(mode)),
        plugin_namespace=DOMAIN, plugin_version=str(OP_VERSION),  # read by TensorRT's ONNX parser
    )  # fmt: skip


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
    """Emits nodes with unique output names under a prefix."""

    def __init__(self, prefix: str) -> None:
        self.prefix, self._n = prefix, 0
        self.nodes: list[onnx.NodeProto] = []

    def op(self, op_type: str, *inputs: str, n_out: int = 1, **attrs: Any) -> str:
        outs = [f"{self.prefix}/{op_type}_{self._n}_{i}" for i in range(n_out)]
        self._n += 1
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, **attrs))
        return outs[0]

    def const(self, value: object, dtype: type = np.int64) -> str:
        return self.op("Constant", value=numpy_helper.from_array(np.asarray(value, dtype=dtype)))

    def cast(self, x: str, to: int) -> str:
        return self.op("Cast", x, to=to)

    def unsq(self, x: str, *axes: int) -> str:
        return self.op("Unsqueeze", x, self.const(list(axes)))

    def dim(self, x: str, axis: int) -> str:  # [1] int64
        return self.op("Gather", self.op("Shape", x), self.const([axis]))

    def reduce(self, kind: str, x: str, axes: Sequence[int], keepdims: int = 0) -> str:
        return self.op(kind, x, self.const(list(axes)), keepdims=keepdims)


def _expand(node: onnx.NodeProto) -> list[onnx.NodeProto]:
    mode = Mode(next(a.i for a in node.attribute if a.name == "mode"))
    g = _Graph(node.name or "tree_verify")
    logits, tokens, paths, temperature, top_p, uniforms, draft_probs = node.input
    x = g.cast(logits, F)  # [B, T, V] fp32 (exact for fp16 / bf16)
    tk, pa = g.cast(tokens, I64), g.cast(paths, I64)  # [B, T], [P, W]
    tree = _tree(g, pa, g.dim(x, 1))
    greedy = g.op("ArgMax", x, axis=2, keepdims=0, select_last_index=0)  # [B, T] lowest id on ties
    accepted = g.op("And", g.op("Equal", tk, g.op("Gather", greedy, tree["parent"], axis=1)),
                    g.unsq(tree["is_kid"], 0))  # [B, T] greedy verdict on each node  # fmt: skip
    if mode is Mode.REJECTION:
        eps = g.const(np.float32(TEMPERATURE_EPS), np.float32)
        greedy_row = g.unsq(g.op("LessOrEqual", temperature, eps), 1)  # [B, 1]
        p = _nucleus(g, x, g.op("Max", temperature, eps), top_p)  # [B, T, V]
        a = _draft_ratio(g, p, tk, draft_probs, tree)  # [B, T]
        s_prev = g.op("MatMul", a, g.cast(tree["sib_lt"], F))  # [B, T] Σ a over earlier siblings
        t = g.op("Sub", g.op("Gather", uniforms, g.op("Gather", tree["depth"], tree["parent"]), axis=1), s_prev)
        zero = g.const(np.float32(0), np.float32)
        in_segment = g.op("And", g.op("GreaterOrEqual", t, zero), g.op("Less", t, a))  # 0 ≤ u − S(c) < a(c)
        verdict = g.op("And", in_segment, g.unsq(tree["is_kid"], 0))
        accepted = g.op("Or", g.op("And", greedy_row, accepted), g.op("And", g.op("Not", greedy_row), verdict))
    n_acc, best, row = _score_paths(g, accepted, pa)  # [B, 1], [B, 1], [B, W]
    last = g.op("GatherElements", row, n_acc, axis=1)  # [B, 1] last accepted node
    bonus = g.op("GatherElements", greedy, last, axis=1)  # [B, 1]
    if mode is Mode.REJECTION:
        bonus = g.op("Where", greedy_row, bonus, _residual_sample(g, p, a, tk, uniforms, tree, n_acc, last, bonus))
    _outputs(g, node.output, tk, row, n_acc, best, bonus)
    return g.nodes


def _tree(g: _Graph, pa: str, num_nodes: str) -> dict[str, str]:
    """Tree structure from paths [P, W]: parent, depth, is_kid [T]; adj, sib_lt [T, T]."""
    ar_t = g.op("Range", g.const(0), g.op("Squeeze", num_nodes), g.const(1))  # [T]
    big = g.const([2**62])
    par_e = g.op("Reshape", g.op("Slice", pa, g.const([0]), g.const([-1]), g.const([1])), g.const([-1]))  # [E]
    kid_e = g.op("Reshape", g.op("Slice", pa, g.const([1]), big, g.const([1])), g.const([-1]))  # [E]
    kid_hot = g.op("Equal", g.unsq(kid_e, 1), g.unsq(ar_t, 0))  # [E, T]
    is_edge = g.unsq(g.op("GreaterOrEqual", kid_e, g.const(0)), 1)  # [E, 1]
    par_hot = g.op("And", g.op("Equal", g.unsq(par_e, 1), g.unsq(ar_t, 0)), is_edge)  # [E, T]
    adj = g.op("MatMul", g.op("Transpose", g.cast(par_hot, F)), g.cast(kid_hot, F))  # [T, T] adj[n, c]
    adj = g.cast(g.op("Greater", adj, g.const(np.float32(0), np.float32)), F)  # 0/1 (paths repeat edges)
    is_kid = g.op("Greater", g.reduce("ReduceMax", adj, [0]), g.const(np.float32(0), np.float32))  # [T]
    parent = g.op("ArgMax", adj, axis=0, keepdims=0)  # [T]; root → 0 (never used: not a kid)
    on_path = g.op("Equal", g.unsq(pa, 2), g.unsq(ar_t, 0, 1))  # [P, W, T]
    levels = g.unsq(g.op("Range", g.const(0), g.op("Squeeze", g.dim(pa, 1)), g.const(1)), 0, 2)  # [1, W, 1]
    depth = g.reduce("ReduceMax", g.op("Where", on_path, levels, g.const(0)), [0, 1])  # [T]
    same_parent = g.op("Equal", g.unsq(parent, 1), g.unsq(parent, 0))  # [T(c'), T(c)]
    both_kids = g.op("And", g.unsq(is_kid, 1), g.unsq(is_kid, 0))
    earlier = g.op("Less", g.unsq(ar_t, 1), g.unsq(ar_t, 0))
    sib_lt = g.op("And", g.op("And", same_parent, both_kids), earlier)  # [T, T] c' earlier sibling of c
    return dict(parent=parent, depth=depth, is_kid=is_kid, adj=adj, sib_lt=sib_lt, ar_t=ar_t)


def _nucleus(g: _Graph, x: str, temperature: str, top_p: str) -> str:
    """p [B, T, V]: softmax(x / temperature) on the top-p nucleus (closed under ties), renormalised."""
    p = g.op("Softmax", g.op("Div", x, g.op("Reshape", temperature, g.const([-1, 1, 1]))), axis=-1)
    ranked = g.op("TopK", p, g.dim(x, 2), axis=-1, largest=1, sorted=1, n_out=2)  # [B, T, V] descending
    before = g.op("Sub", g.op("CumSum", ranked, g.const(2)), ranked)  # mass ranked ahead
    tp = g.op("Reshape", top_p, g.const([-1, 1, 1]))  # [B, 1, 1]
    kept = g.reduce("ReduceSum", g.cast(g.op("Less", before, tp), I64), [2], keepdims=1)  # [B, T, 1]
    kept = g.op("Max", kept, g.const(1))
    tau = g.op("GatherElements", ranked, g.op("Sub", kept, g.const(1)), axis=2)  # [B, T, 1]
    keep = g.op("Or", g.op("GreaterOrEqual", p, tau), g.op("GreaterOrEqual", tp, g.const(np.float32(1), np.float32)))
    p = g.op("Where", keep, p, g.const(np.float32(0), np.float32))
    return g.op("Div", p, g.reduce("ReduceSum", p, [2], keepdims=1))


def _draft_ratio(g: _Graph, p: str, tk: str, q: str, tree: dict[str, str]) -> str:
    """a [B, T] = p_parent(tok c) / q(c), 0 where an earlier sibling drafted the same token."""
    parent_bt = g.op("Expand", g.unsq(tree["parent"], 0), g.op("Shape", tk))  # [B, T]
    idx = g.op("Concat", g.unsq(parent_bt, 2), g.unsq(tk, 2), axis=2)  # [B, T, 2]
    w = g.op("GatherND", p, idx, batch_dims=1)  # [B, T]
    same_tok = g.op("Equal", g.unsq(tk, 2), g.unsq(tk, 1))  # [B, T(c'), T(c)]
    repeat = g.reduce("ReduceMax", g.cast(g.op("And", same_tok, g.unsq(tree["sib_lt"], 0)), I32), [1])  # [B, T]
    w = g.op("Where", g.op("Greater", repeat, g.const(0, np.int32)), g.const(np.float32(0), np.float32), w)
    return g.op("Div", w, q)


def _score_paths(g: _Graph, accepted: str, pa: str) -> tuple[str, str, str]:
    """From each node's verdict [B, T]: accepted draft nodes n_acc [B, 1], best path [B, 1], its row [B, W]."""
    kids = g.op("Slice", pa, g.const([1]), g.const([2**62]), g.const([1]))  # [P, D]
    flat = g.op("Reshape", g.op("Max", kids, g.const(0)), g.const([-1]))  # [P·D]
    hit = g.op("Gather", accepted, flat, axis=1)  # [B, P·D]
    shape = g.op("Concat", g.dim(accepted, 0), g.op("Shape", kids), axis=0)
    hit = g.op("Reshape", hit, shape, allowzero=1)  # [B, P, D] (D may be 0)
    hit = g.op("And", hit, g.unsq(g.op("GreaterOrEqual", kids, g.const(0)), 0))
    misses = g.op("CumSum", g.cast(g.op("Not", hit), I64), g.const(2))  # [B, P, D]
    alive = g.cast(g.op("Equal", misses, g.const(0)), I64)
    per_path = g.reduce("ReduceSum", alive, [2])  # [B, P]
    best = g.op("ArgMax", per_path, axis=1, keepdims=1, select_last_index=0)  # [B, 1] lowest index
    n_acc = g.op("GatherElements", per_path, best, axis=1)  # [B, 1]
    row = g.op("Gather", pa, g.op("Squeeze", best, g.const([1])), axis=0)  # [B, W]
    return n_acc, best, row


def _residual_sample(g: _Graph, p: str, a: str, tk: str, uniforms: str, tree: dict[str, str],
                     n_acc: str, last: str, fallback: str) -> str:  # fmt: skip
    """Rejection bonus [B, 1]: inverse CDF of the last node's residual at t = u − Σ a(children)."""
    kids_a = g.op("MatMul", a, g.op("Transpose", tree["adj"]))  # [B, T] Σ a over each node's children
    t = g.op("Sub", g.op("GatherElements", uniforms, n_acc, axis=1), g.op("GatherElements", kids_a, last, axis=1))
    p_last = g.op("GatherND", p, last, batch_dims=1)  # [B, V]
    kids_of_last = g.unsq(g.op("Gather", tree["adj"], g.op("Squeeze", last, g.const([1])), axis=0), 1)  # [B, 1, T]
    ar_v = g.op("Range", g.const(0), g.op("Squeeze", g.dim(p, 2)), g.const(1))  # [V]
    tok_hot = g.cast(g.op("Equal", g.unsq(tk, 2), g.unsq(ar_v, 0, 1)), F)  # [B, T, V]
    removed = g.op("Greater", g.op("Squeeze", g.op("MatMul", kids_of_last, tok_hot), g.const([1])),
                   g.const(np.float32(0), np.float32))  # [B, V]  # fmt: skip
    res = g.op("Where", removed, g.const(np.float32(0), np.float32), p_last)  # [B, V]
    hit = g.cast(g.op("Greater", g.op("CumSum", res, g.const(1)), t), I32)  # [B, V]
    pos = g.cast(g.op("Greater", res, g.const(np.float32(0), np.float32)), I32)
    first = g.op("ArgMax", hit, axis=1, keepdims=1, select_last_index=0)
    last_pos = g.op("ArgMax", pos, axis=1, keepdims=1, select_last_index=1)
    some = lambda v: g.op("Greater", g.reduce("ReduceMax", v, [1], keepdims=1), g.const(0, np.int32))  # noqa: E731
    return g.op("Where", some(hit), first, g.op("Where", some(pos), last_pos, fallback))


def _outputs(g: _Graph, names: Sequence[str], tk: str, row: str, n_acc: str, best: str, bonus: str) -> None:
    acc_len, best_path, out_tokens = names
    nxt = g.op("Slice", row, g.const([1]), g.const([2**62]), g.const([1]))  # [B, D] chain after the root
    pad = g.op("Expand", g.const([[-1]]), g.op("Concat", g.dim(row, 0), g.const([1]), axis=0))  # [B, 1]
    nxt = g.op("Concat", nxt, pad, axis=1)  # [B, W]
    toks = g.op("GatherElements", tk, g.op("Max", nxt, g.const(0)), axis=1)  # [B, W]
    slot = g.unsq(g.op("Range", g.const(0), g.op("Squeeze", g.dim(row, 1)), g.const(1)), 0)  # [1, W]
    tail = g.op("Where", g.op("Equal", slot, n_acc), bonus, g.const(-1))
    out = g.op("Where", g.op("Less", slot, n_acc), toks, tail)  # [B, W]
    g.nodes.append(helper.make_node("Cast", [out], [out_tokens], to=I32))
    emitted = g.op("Squeeze", g.op("Add", n_acc, g.const(1)), g.const([1]))  # [B] accepted + bonus
    g.nodes.append(helper.make_node("Cast", [emitted], [acc_len], to=I32))
    g.nodes.append(helper.make_node("Cast", [g.op("Squeeze", best, g.const([1]))], [best_path], to=I32))
