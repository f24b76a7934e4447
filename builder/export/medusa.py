"""Medusa heads fused into the target step graph: top-K token ids of every head at one hidden state.

Head k = ResBlock × num_layers then Linear(C → V) (`builder.speculative.medusa.heads.MedusaHeads`). All
heads read the same hidden state, so the first residual block of every head is ONE stacked GEMM
[C, Hm·C] + bias; later blocks are one batched MatMul [Hm, C, C]; the vocabulary projections are one
batched MatMul [Hm, C, V]. Hm = number of heads. Weights in the variant's activation dtype.
"""

from __future__ import annotations

import numpy as np

from builder.export.attention import Variant
from builder.export.graph import Graph
from builder.export.llama import to_numpy
from builder.speculative.medusa.heads import MedusaHeads

SCOPE = "medusa"  # the heads' node names start with "medusa/" (`builder.export.target` may block-quantize them)


def medusa_topk(g: Graph, variant: Variant, h: str, heads: MedusaHeads, k: int, out: str) -> str:
    """h [B, C] → `out` [B, Hm, K] int64: each head's top-K token ids (ties: lower id first)."""
    n, layers, C = heads.num_heads, heads.num_layers, heads.hidden_size
    if not 1 <= k <= heads.vocab_size:
        raise ValueError(f"medusa_topk must lie in 1..{heads.vocab_size}, got {k}")
    act = variant.precision.act
    sd = {
        key: to_numpy(t, act) for key, t in heads.state_dict().items()
    }  # upstream keys: "{head}.{layer}.linear.weight"
    w_t = lambda j: [sd[f"{i}.{j}.linear.weight"].T for i in range(n)]  # noqa: E731  # [C, C] per head
    bias = lambda j: [sd[f"{i}.{j}.linear.bias"] for i in range(n)]  # noqa: E731  # [C] per head
    with g.scope(SCOPE):
        w0, b0 = np.concatenate(w_t(0), axis=1), np.concatenate(bias(0))  # [C, Hm·C], [Hm·C]
        y = g.op("Gemm", h, g.weight("res0_w", w0), g.weight("res0_b", b0))  # [B, Hm·C]
        y = g.op("Reshape", variant.silu(g, y), g.const([0, n, C]))  # [B, Hm, C]
        x = g.op("Add", y, g.op("Unsqueeze", h, g.const([1])))  # [B, Hm, C]
        x = g.op("Transpose", x, perm=[1, 0, 2])  # [Hm, B, C]
        for j in range(1, layers):
            w, b = np.stack(w_t(j)), np.stack(bias(j))[:, None, :]  # [Hm, C, C], [Hm, 1, C]
            z = g.op("Add", g.op("MatMul", x, g.weight(f"res{j}_w", w)), g.weight(f"res{j}_b", b))
            x = g.op("Add", x, variant.silu(g, z))  # [Hm, B, C]
        proj = np.stack([sd[f"{i}.{layers}.weight"].T for i in range(n)])  # [Hm, C, V]
        logits = g.op("MatMul", x, g.weight("proj", proj))  # [Hm, B, V]
        _, idx = g.op_n("TopK", logits, g.const([k]), outs=2, axis=-1, largest=1, sorted=1)  # [Hm, B, K]
        return g.op("Transpose", idx, out=out, perm=[1, 0, 2])  # [B, Hm, K]
