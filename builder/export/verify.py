"""Greedy trtspec::TreeVerify for ONNX Runtime in few nodes: the `ort` variant's twin (`builder.export.artifacts`).

`plugins.tree_verify.onnx_op.decompose` is the general decomposition (greedy and rejection, ~37 nodes for
greedy). A greedy verification needs less. When every path is the root alone (W = 1: a prefill, a plain
step) the answer is the root's prediction, accepted_len 1, best_path 0: an If takes that branch (5 nodes;
ONNX Runtime's If costs ~1-2 µs). Otherwise (25 nodes), with g[n] = argmax of node n's logits (ties: lowest
id), the edge from the path node at depth k to the one at depth k + 1 is accepted iff tok(child) == g(parent)
(`plugins.tree_verify.contract`), so

    tok   = tokens with a −1 column appended: index −1 (a path's −1 padding) reads a token no prediction is,
            so an edge into padding is never accepted (an edge out of padding — pred[−1], some real
            prediction — only follows a rejected one, and only the first rejection counts);
    hit   = tok[paths shifted left by one, −1 filled] == g[paths]               [B, P, W] (last column 0)
    run   = ArgMin(hit, axis 2): the first rejected edge = accepted drafts of each path     [B, P]
    best  = ArgMax(run, axis 1) (the lowest index among the longest), n = max(run)
    output_tokens[k] = g[paths[best, k]] for k ≤ n, else −1   (for k < n it equals the accepted draft
            token at depth k + 1; at k = n it is the bonus token), accepted_len = n + 1.

Only greedy TreeVerify nodes are replaced; the ArgMax over Cast(logits, FLOAT) is the one `node_argmax` is
(the graph's dedupe keeps one). Tested against `plugins.tree_verify.reference` (tests/unit/test_export_lean.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from builder.export.contract import HOST_VERDICT, PLAIN_LOGITS
from plugins.tree_verify.contract import DOMAIN, OP_TYPE, Mode

F, I32 = TensorProto.FLOAT, TensorProto.INT32


class _Emit:
    """Nodes and constant initializers under a name prefix."""

    def __init__(self, prefix: str) -> None:
        self.prefix, self.n = prefix, 0
        self.nodes: list[onnx.NodeProto] = []
        self.inits: dict[tuple[str, bytes], onnx.TensorProto] = {}

    def op(self, op_type: str, *inputs: str, out: str | None = None, **attrs: Any) -> str:
        name = f"{self.prefix}/{op_type}_{self.n}"
        self.n += 1
        self.nodes.append(helper.make_node(op_type, list(inputs), [out or name], name=name, **attrs))
        return out or name

    def const(self, value: object, dtype: type = np.int64) -> str:
        arr: np.ndarray = np.asarray(value, dtype=dtype)
        key = (arr.dtype.str + str(arr.shape), arr.tobytes())
        if key not in self.inits:
            self.inits[key] = numpy_helper.from_array(arr, f"{self.prefix}/const_{len(self.inits)}")
        return self.inits[key].name

    def body(self, outputs: list[tuple[str, list[str]]]) -> onnx.GraphProto:
        """These nodes as an If branch whose int32 outputs are (name, dims)."""
        outs = [helper.make_tensor_value_info(n, I32, d) for n, d in outputs]
        return helper.make_graph(self.nodes, self.prefix, [], outs, list(self.inits.values()))


def greedy_nodes(e: _Emit, pred: str, tokens: str, paths: str, outputs: tuple[str, str, str]) -> None:
    """pred [B, Tv] int64 (argmax of each verify node's logits), tokens [B, Tv] int32, paths [B, P, W] int32 →
    accepted_len [B], best_path [B], output_tokens [B, W] (int32, the names in `outputs`); module docstring."""
    pred = e.op("Cast", pred, to=I32)  # [B, Tv]
    tok = e.op("Pad", tokens, e.const([0, 0, 0, 1]), e.const(-1, np.int32))  # [B, Tv + 1]: -1 at index -1
    shape = e.op("Shape", paths)  # [3] = (B, P, W)
    parent = e.op("Reshape", paths, e.const([0, -1]))  # [B, P·W]
    child = e.op("Pad", paths, e.const([0, 0, -1, 0, 0, 1]), e.const(-1, np.int32))  # [B, P, W] shifted left
    child = e.op("Reshape", child, e.const([0, -1]))  # [B, P·W]
    after = e.op("GatherElements", pred, parent, axis=1)  # [B, P·W] the target's token after each path node
    hit = e.op("Equal", e.op("GatherElements", tok, child, axis=1), after)  # [B, P·W] edge accepted
    run = e.op("ArgMin", e.op("Reshape", e.op("Cast", hit, to=I32), shape), axis=2, keepdims=0)  # [B, P]
    best = e.op("ArgMax", run, axis=1, keepdims=1, select_last_index=0)  # [B, 1] lowest index of the longest
    n = e.op("ReduceMax", run, e.const([1]), keepdims=1)  # [B, 1] accepted drafts
    row = e.op("GatherND", e.op("Reshape", after, shape), best, batch_dims=1)  # [B, W]
    depth = e.op("Range", e.const(0), e.op("Gather", shape, e.const(2)), e.const(1))  # [W]
    accepted_len, best_path, output_tokens = outputs
    e.op("Where", e.op("LessOrEqual", depth, n), row, e.const(-1, np.int32), out=output_tokens)  # [B, W]
    e.op("Cast", e.op("Reshape", e.op("Add", n, e.const(1)), e.const([-1])), to=I32, out=accepted_len)  # [B]
    e.op("Cast", e.op("Reshape", best, e.const([-1])), to=I32, out=best_path)  # [B]


def _root_only(e: _Emit, pred: str, paths: str, outputs: tuple[str, str, str]) -> None:
    """Paths of the root alone (W = 1: a prefill, a plain step): one token, the root's prediction."""
    accepted_len, best_path, output_tokens = outputs
    e.op("Cast", e.op("Slice", pred, e.const([0]), e.const([1]), e.const([1])), to=I32, out=output_tokens)  # [B, 1]
    root = e.op("Slice", paths, e.const([0, 0]), e.const([1, 1]), e.const([1, 2]))  # [B, 1, 1] paths[:, 0, 0] = 0
    e.op("Add", e.op("Reshape", root, e.const([-1]), out=best_path), e.const(1, np.int32), out=accepted_len)  # [B]


def _outs(e: _Emit) -> tuple[str, str, str]:
    return f"{e.prefix}/accepted_len", f"{e.prefix}/best_path", f"{e.prefix}/output_tokens"


def verify_if(prefix: str, logits: str, tokens: str, paths: str, outputs: tuple[str, str, str]) -> _Emit:
    """The nodes replacing one greedy TreeVerify: the argmax, then an If on W = 1 (`_root_only`, 5 nodes)
    else `greedy_nodes` (25)."""
    top, plain, tree = _Emit(prefix), _Emit(f"{prefix}/root"), _Emit(f"{prefix}/tree")
    pred = top.op("ArgMax", top.op("Cast", logits, to=F), axis=2, keepdims=0, select_last_index=0)  # [B, Tv] int64
    one = top.op("Equal", top.op("Shape", paths, start=2), top.const([1]))  # [1] W == 1
    _root_only(plain, pred, paths, _outs(plain))
    greedy_nodes(tree, pred, tokens, paths, _outs(tree))
    bodies = [
        e.body(
            [
                (_outs(e)[0], [f"{e.prefix}_b"]),
                (_outs(e)[1], [f"{e.prefix}_b"]),
                (_outs(e)[2], [f"{e.prefix}_b", f"{e.prefix}_w"]),
            ]
        )
        for e in (plain, tree)
    ]
    top.nodes.append(
        helper.make_node("If", [one], list(outputs), name=f"{prefix}/If", then_branch=bodies[0], else_branch=bodies[1])
    )
    return top


def lean_greedy(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` with every greedy TreeVerify node replaced by `verify_if`'s nodes (others kept)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes: list[onnx.NodeProto] = []
    for i, node in enumerate(model.graph.node):
        mode = next((a.i for a in node.attribute if a.name == "mode"), None)
        if node.op_type == OP_TYPE and node.domain == DOMAIN and mode == Mode.GREEDY:
            logits, tokens, paths = node.input[:3]
            e = verify_if(
                f"{node.name or 'tree_verify'}/lean{i}",
                logits,
                tokens,
                paths,
                (node.output[0], node.output[1], node.output[2]),
            )
            nodes += e.nodes
            out.graph.initializer.extend(e.inits.values())
        else:
            nodes.append(node)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    if not any(n.domain == DOMAIN for n in nodes):
        kept = [o for o in out.opset_import if o.domain != DOMAIN]
        del out.opset_import[:]
        out.opset_import.extend(kept)
    return out


def plain_twin(model: onnx.ModelProto) -> onnx.ModelProto:
    """The lean greedy target graph for steps whose drafts are chains (root-only included: method none, n-gram).

    Every If of the lean graphs picks the root-only / chain case in its then-branch (`verify_if` here, the attention
    bias in `builder.export.ort_variant.OrtVariant._bias`); this copy inlines those branches and drops
    GroupQueryAttention's bias input (its causal rule alone is the attention of a plain step, a prefill and a
    chain), so a step runs neither If nor the bias. It stops at the verify nodes' float32 logits (output
    `verify_logits` [B, Tv, V], PLAIN_LOGITS): the greedy tokens and the verdict are the host's
    (`builder.engines.ort.target.ArgmaxOnHost`: NumPy's argmax, then path 0 and one accepted node for a root-only
    step; a chain's leading drafts equal to the target's tokens, `OrtEngine._verify_on_host`), as ONNX Runtime
    GenAI takes its greedy token and verifies its n-gram drafts outside its graph. ONNX Runtime's ArgMax kernel is
    scalar (~4 µs per 4096-entry row against NumPy's ~0.3-0.5, `scripts/profile_step.py`), and the verdict's
    Slice / Reshape / Add / Cast nodes cost a kernel launch each at T = 1. The contract's `node_argmax`,
    `output_tokens`, `best_path` and `accepted_len` are therefore not outputs of this graph; its other I/O is the
    contract's. Only for steps whose drafts are chains (method none, n-gram with one candidate): the engine refuses
    any other tree then."""
    from builder.export.graph import prune

    nodes: list[onnx.NodeProto] = []  # copies: the caller's model is not touched
    for node in model.graph.node:
        rename: dict[str, str] = {}
        inner = [node]
        if node.op_type == "If":
            branch = next(a.g for a in node.attribute if a.name == "then_branch")
            rename = {o.name: target for o, target in zip(branch.output, node.output)}
            inner = list(branch.node)
        for n in inner:
            copy = onnx.NodeProto()
            copy.CopyFrom(n)
            for i, name in enumerate(copy.input):
                copy.input[i] = rename.get(name, name)
            for i, name in enumerate(copy.output):
                copy.output[i] = rename.get(name, name)
            if copy.op_type == "GroupQueryAttention" and len(copy.input) > GQA_BIAS:
                copy.input[GQA_BIAS] = ""  # attention_bias
            nodes.append(copy)
    argmax = [n for n in nodes if list(n.output) == ["node_argmax"]]
    if len(argmax) != 1 or argmax[0].op_type != "ArgMax":
        raise ValueError("plain_twin: the graph has no single ArgMax producing node_argmax")
    logits = argmax[0].input[0]
    nodes.remove(argmax[0])
    for n in nodes:  # the logits tensor takes the output's name
        for field in (n.input, n.output):
            for i, name in enumerate(field):
                if name == logits:
                    field[i] = PLAIN_LOGITS
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for node in model.graph.node:
        if node.op_type == "If":
            out.graph.initializer.extend(next(a.g for a in node.attribute if a.name == "then_branch").initializer)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    argmax_info = next(o for o in model.graph.output if o.name == "node_argmax")
    b, tv = (d.dim_param or d.dim_value for d in argmax_info.type.tensor_type.shape.dim)
    kept = [o for o in out.graph.output if o.name not in HOST_VERDICT]
    del out.graph.output[:]
    out.graph.output.extend(kept)
    out.graph.output.append(helper.make_tensor_value_info(PLAIN_LOGITS, F, [b, tv, "V"]))
    _last_layer_on_verify_rows(out.graph)
    return prune(out)


def _last_layer_on_verify_rows(graph: onnx.GraphProto) -> None:
    """In place: the last layer's o_proj, MLP and the final norm run over the verify nodes only.

    Only the verify nodes' logits leave a plain-steps graph, and a row's last-layer o_proj and MLP feed nothing but
    its own final hidden state (its keys and values are written before them), so the verify nodes' GatherND moves
    from the final norm's output up to the last GroupQueryAttention's output and the residual stream beside it:
    a prompt of T tokens (Tv = 1) then runs the last layer's o_proj and MLP for one row instead of T — on the tiny
    fixture (4 layers) a fifth of a prefill's FLOPs — and a step whose nodes are all verified (T = Tv) copies a few
    rows. The `hidden` output goes (the plain-steps engines run method none and n-gram, which read no hidden
    state). Left as it is when anything but that GatherND reads `hidden` (fused Medusa heads)."""
    nodes = list(graph.node)
    readers = [n for n in nodes if "hidden" in n.input]
    gqa = [n for n in nodes if n.op_type == "GroupQueryAttention"]
    if len(readers) != 1 or readers[0].op_type != "GatherND" or list(readers[0].input)[0] != "hidden" or not gqa:
        return
    gather, attn = readers[0], gqa[-1].output[0]
    o_proj = [n for n in nodes if attn in n.input]
    if len(o_proj) != 1 or o_proj[0].op_type != "MatMul":
        return
    post = [n for n in nodes if o_proj[0].output[0] in n.input]
    skip_norm = "SkipSimplifiedLayerNormalization"
    if len(post) != 1 or post[0].op_type != skip_norm or post[0].input[1] != o_proj[0].output[0]:
        return
    index = gather.input[1]  # [B, Tv, 1]: Unsqueeze(verify_index), made from graph inputs and constants only
    made = [n for n in nodes if index in n.output]
    if len(made) != 1 or made[0].op_type != "Unsqueeze" or made[0].input[0] != "verify_index":
        return
    residual = post[0].input[0]
    picks = [
        helper.make_node(
            "GatherND", [attn, index], [f"{attn}/verify_rows"], name=f"{gqa[-1].name}/verify_rows", batch_dims=1
        ),
        helper.make_node(
            "GatherND", [residual, index], [f"{residual}/verify_rows"], name=f"{post[0].name}/verify_rows", batch_dims=1
        ),
    ]
    o_proj[0].input[0], post[0].input[0] = picks[0].output[0], picks[1].output[0]
    for n in nodes:  # the verify GatherND's readers read the final norm's output (already the verify rows)
        for i, name in enumerate(n.input):
            if name == gather.output[0]:
                n.input[i] = "hidden"
    at = nodes.index(o_proj[0])
    nodes = [n for n in nodes[:at] if n is not made[0]] + [made[0], *picks] + [n for n in nodes[at:] if n is not gather]
    del graph.node[:]
    graph.node.extend(nodes)
    kept = [o for o in graph.output if o.name != "hidden"]
    del graph.output[:]
    graph.output.extend(kept)


GQA_BIAS = 10  # com.microsoft GroupQueryAttention's attention_bias input index
