"""Block-quantized draft weights for the CPU form: a draft's weight MatMuls as `com.microsoft` MatMulNBits.

A draft only proposes tokens — the target verifies every one — so its weights may be coarser than the target's
without changing a single output token: the acceptance rate moves a little, and the bytes a draft call reads fall
to a quarter (int8) or an eighth (int4) of float32's. On a GPU the draft's GEMMs run FP8 (one byte per weight);
int8 is the CPU's one-byte form. Only the graph ONNX Runtime runs (`{stem}.ort.onnx`) is rewritten: the canonical
graph, which the TensorRT path reads, keeps its float weights (`speculative.draft_weights`, cpu targets only).

Format (onnxruntime's contrib op MatMulNBits, `docs/ContribOperators.md`): B [K, N] float32 becomes
`packed` uint8 [N, K/bs, bs·bits/8] (column n's block j; 4 bits: two values per byte, the even one in the low
nibble) and `scales` float32 [N·K/bs]; symmetric, each stored value q + 2^(bits−1) (the op's default zero
point when no zero points are given), q in [−(2^(bits−1) − 1), 2^(bits−1) − 1]; block size 32.
accuracy_level 4: the activations are quantized to int8 per block and the dot products run in int8 — one
4096×4096 weight at M = 1, one thread (this Zen 4): 0.75 ms int8 / 0.53 ms int4 against MatMul's 3.33 ms float32;
accuracy_level 0 (dequantize to float per call) took 92 ms at 8 bits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

BLOCK = 32
BITS = {"int8": 8, "int4": 4}
ACCURACY_LEVEL = 4  # int8 activations, int8 dot products (module docstring)


def quantize_blocks(w: np.ndarray, bits: int, block: int = BLOCK) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(packed, scales, dequantized) of a float32 weight w [K, N] (K a multiple of `block`): MatMulNBits' B and
    scales (module docstring), and the float32 [K, N] weight they stand for."""
    k, n = w.shape
    if k % block:
        raise ValueError(f"K={k} is not a multiple of the block size {block}")
    half = 1 << (bits - 1)
    cols = np.ascontiguousarray(w.T, dtype=np.float32).reshape(n, k // block, block)  # [N, K/bs, bs]
    scales = np.abs(cols).max(axis=2) / np.float32(half - 1)  # [N, K/bs]
    scales[scales == 0] = 1.0  # an all-zero block: q = 0 whatever the scale
    q = np.clip(np.rint(cols / scales[..., None]), 1 - half, half - 1).astype(np.int32)
    stored = (q + half).astype(np.uint8)
    packed = stored if bits == 8 else (stored[..., 0::2] | (stored[..., 1::2] << 4)).astype(np.uint8)
    deq = (q.astype(np.float32) * scales[..., None]).reshape(n, k).T
    return packed, scales.reshape(-1).astype(np.float32), np.ascontiguousarray(deq)


def quantize_matmuls(
    model: onnx.ModelProto, bits: int, base_dir: Path, select: Callable[[str], bool], block: int = BLOCK
) -> int:
    """Rewrite `model` in place: each node `select` accepts by name that multiplies by a float32 weight initializer
    whose K is a multiple of `block` becomes MatMulNBits over the block-quantized weight (new initializers, stored
    in the graph; the old weight is dropped once nothing reads it):

        MatMul  A [..., K] @ W [K, N]                     -> MatMulNBits
        Gemm    A [M, K] @ W [K, N] + bias [N] (plain)    -> MatMulNBits, Add bias
        MatMul  A [H, M, K] @ W [H, K, N] (per head)      -> Split A on axis 0, H MatMulNBits, Concat

    (the per-head form takes A's first axis for W's: a selected node must not broadcast A's batch axes otherwise, as
    the Medusa heads' projection does not). `base_dir`: where external initializer data lives. Returns how many
    nodes were rewritten."""
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    made: dict[tuple[str, int], tuple[str, str, int, int]] = {}  # (weight, head) -> (packed, scales, K, N)
    arrays: dict[str, np.ndarray] = {}
    dropped: set[str] = set()

    def nbits(a: str, w: onnx.TensorProto, head: int | None, out: str, name: str) -> onnx.NodeProto:
        key = (w.name, -1 if head is None else head)
        if key not in made:
            if w.name not in arrays:
                arrays[w.name] = numpy_helper.to_array(w, str(base_dir))
            packed, scales, _ = quantize_blocks(arrays[w.name] if head is None else arrays[w.name][head], bits, block)
            tag = f"{w.name}{'' if head is None else f'.{head}'}.q{bits}"
            graph.initializer.extend(
                [numpy_helper.from_array(packed, tag), numpy_helper.from_array(scales, tag + "_s")]
            )
            made[key] = (tag, tag + "_s", int(w.dims[-2]), int(w.dims[-1]))
        p, s, k, n = made[key]
        dropped.add(w.name)
        return helper.make_node(
            "MatMulNBits",
            [a, p, s],
            [out],
            name=name,
            domain="com.microsoft",
            K=k,
            N=n,
            bits=bits,
            block_size=block,
            accuracy_level=ACCURACY_LEVEL,
        )

    nodes: list[onnx.NodeProto] = []
    rewritten = 0
    for node in graph.node:
        kind = _kind(node, inits, block) if select(node.name) else None
        if kind is None:
            nodes.append(node)
            continue
        a, w, out = node.input[0], inits[node.input[1]], node.output[0]
        if kind == "matmul":
            nodes.append(nbits(a, w, None, out, f"{node.name}/nbits"))
        elif kind == "gemm":
            y = f"{node.name}/nbits_out"
            nodes += [
                nbits(a, w, None, y, f"{node.name}/nbits"),
                helper.make_node("Add", [y, node.input[2]], [out], name=f"{node.name}/bias"),
            ]
        else:  # per head
            h = int(w.dims[0])
            split = f"{node.name}/split_sizes"
            graph.initializer.append(numpy_helper.from_array(np.ones(h, np.int64), split))
            parts = [f"{node.name}/a{i}" for i in range(h)]
            nodes.append(helper.make_node("Split", [a, split], parts, name=f"{node.name}/split", axis=0))
            ys = [f"{node.name}/y{i}" for i in range(h)]
            nodes += [nbits(parts[i], w, i, ys[i], f"{node.name}/nbits{i}") for i in range(h)]
            nodes.append(helper.make_node("Concat", ys, [out], name=f"{node.name}/concat", axis=0))
        rewritten += 1
    if not rewritten:
        return 0
    del graph.node[:]
    graph.node.extend(nodes)
    used = _inputs(graph)
    kept = [t for t in graph.initializer if t.name in used or t.name not in dropped]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return rewritten


def _kind(node: onnx.NodeProto, inits: dict[str, onnx.TensorProto], block: int) -> str | None:
    """How `quantize_matmuls` rewrites `node` (matmul | gemm | heads), or None where it does not."""
    w = inits.get(node.input[1]) if node.op_type in ("MatMul", "Gemm") and len(node.input) > 1 else None
    if (
        node.domain not in ("", "ai.onnx")
        or w is None
        or w.data_type != TensorProto.FLOAT
        or len(w.dims) < 2
        or w.dims[-2] % block
    ):
        return None
    if node.op_type == "MatMul":
        return {2: "matmul", 3: "heads"}.get(len(w.dims))
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    plain = attrs.get("alpha", 1.0) == 1.0 and attrs.get("beta", 1.0) == 1.0 and not attrs.get("transA", 0)
    if (
        node.op_type == "Gemm"
        and plain
        and not attrs.get("transB", 0)
        and len(w.dims) == 2
        and len(node.input) == 3
        and node.input[2] in inits
        and len(inits[node.input[2]].dims) == 1
    ):
        return "gemm"
    return None


def _inputs(graph: onnx.GraphProto) -> set[str]:
    """Every name a node of `graph` or of its subgraphs (If branches) reads."""
    names: set[str] = set()
    for node in graph.node:
        names.update(node.input)
        for attr in node.attribute:
            for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                names |= _inputs(sub)
    return names
