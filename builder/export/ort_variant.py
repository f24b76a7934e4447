"""The `ort` attention variant: the lean float32 graph for ONNX Runtime's CPU provider.

Per layer, as ONNX Runtime GenAI's model builder lays a Llama layer out (onnxruntime-genai 0.18,
`onnxruntime_genai/models/builders/base.py`): the residual add fused into the norm (`com.microsoft`
SkipSimplifiedLayerNormalization; the first norm, with no residual add, is the standard RMSNormalization),
one packed QKV MatMul, `GroupQueryAttention` with the rotary inside (`do_rotary`, cos/sin caches, explicit
`position_ids`), past and present sharing one buffer, o_proj, the MLP with SiLU as `QuickGelu(alpha=1)`.

The MLP's gate and up are two MatMuls, as GenAI's builder emits them, not one fused gate_up MatMul + Split: the
Split's copy costs more than the extra kernel (the regime fixture's 13 MLPs alone, one thread: 4.07 vs 4.25 ms
at T=1, 15.8 vs 17.1 ms at T=16; bitwise equal outputs).

Trees: GroupQueryAttention's causal rule stays on (row i of batch b sees slots < write_at[b] + i + 1, with
`seqlens_k` = write_at + num_new − 1 and `query_seqlens` = num_new, so padding rows are neither
attended nor written), and the tree goes in as an additive `attention_bias` [B, 1, T, S]: −inf at the new
slots that are not the row's ancestors. Since the causal rule already hides every slot after the row's
own, the bias is −inf exactly where 0 ≤ s − past_len[b] < U and not tree_mask[b, i, s − past_len[b]]:
one GatherElements on the tree mask padded with a true column on each side (column 0 for every slot
before past_len, column U + 1 for every slot after the tree), then Where(mask, 0, −inf).

Measured, and not used (one step of the regime fixture under ORT's profiler, scripts/profile_step.py): the
standard Attention-24 with the G query heads of each key/value group folded into the query rows is
2× faster than GroupQueryAttention alone (37 vs 73 µs at T=1, S=301, H 32, KV 8, D 32, one thread; bitwise
equal) but needs the live prefix of the caches as tensors of their own (Slice copies 2 × 308 KB per layer):
7.29 ms per step against 6.93 with GroupQueryAttention. GroupQueryAttention's CPU kernel runs either a
"flash" path (tiled online softmax) or, with ORT_GQA_DISABLE_FLASH_ATTENTION set when the session is made,
one GEMM per head (onnxruntime `contrib_ops/cpu/bert/gqa_attention_base.h`: `ApplyAttentionFlash` vs
`ApplyAttention`); on one thread the second is faster here at every size measured (51 vs 75 µs at T=1,
S=301; 147 vs 235 at S=1001; 130 vs 143 at T=8): `builder.engines.ort.session` makes our sessions so.
Float32 only (the CPU form); head_dim % 16 == 0 (GroupQueryAttention's CPU kernel's rule).
"""

from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from builder.export.attn_base import MS, AttnShape, LayerCache, StepValues
from builder.export.contract import CPU
from builder.export.graph import F32, I32, Graph
from builder.export.qdq import fake_quant


def tree_bias(g: Graph, step: StepValues, live: str) -> str:  # -> [B, 1, T, S] float32
    """0 where row i may attend slot s < S (the scalar `live`), −inf at the new slots outside its ancestors
    (the slots after its own are GroupQueryAttention's causal rule's); see the module docstring."""
    u1 = g.op("Add", g.op("Shape", step.tree_mask, start=2), g.const([1]))  # [1] U + 1
    first = g.op("Unsqueeze", g.op("Sub", step.past_len, g.const(1)), g.const([1]))  # [B, 1] past_len − 1
    col = g.op("Sub", g.op("Range", g.const(0), live, g.const(1)), first)  # [B, S] s − past_len + 1
    col = g.op("Min", g.op("Max", col, g.const(0)), u1)  # [B, S]: 0 before the tree, 1..U in it, U + 1 after
    ext = g.op("Pad", step.tree_mask, g.const([0, 0, 1, 0, 0, 1]), g.const(True, np.bool_))  # [B, T, U + 2]
    ext = g.op("Where", ext, g.const(0, np.float32), g.const(-np.inf, np.float32))  # [B, T, U + 2]
    t = g.op("Shape", step.tree_mask, start=1, end=2)  # [1] T
    rows = g.op("Concat", g.const([1]), t, g.const([1]), axis=0)  # (1, T, 1)
    col = g.op("Expand", g.op("Unsqueeze", col, g.const([1])), rows)  # [B, T, S]
    return g.op("Unsqueeze", g.op("GatherElements", ext, col, axis=2), g.const([1]))  # [B, 1, T, S]


class OrtVariant:
    """The lean ONNX Runtime graph; see the module docstring."""

    name = "ort"
    opsets = {"": 24, MS: 1}
    precision = CPU
    fused_gate_up = False  # two MatMuls beat one + Split (module docstring)

    def __init__(self, chain_branch: bool = True) -> None:
        self.chain_branch = chain_branch  # `_bias`: an If for chains (False: the tree bias always)

    def prepare(self, g: Graph, step: StepValues, cos: np.ndarray, sin: np.ndarray, shape: AttnShape) -> None:
        with g.scope("attn_prep"):
            self.step = step
            self.cos, self.sin = g.weight("rope_cos", cos), g.weight("rope_sin", sin)  # [CAP, D/2]
            end = g.op("Add", step.write_at, step.num_new)  # [B] each row's live length
            live = g.op("ReduceMax", end, keepdims=0)  # [] S
            self.total = g.op("Cast", live, to=I32)  # [] total_sequence_length
            self.seqlens_k = g.op("Cast", g.op("Sub", end, g.const(1)), to=I32)  # [B]
            self.query_seqlens = g.op("Cast", step.num_new, to=I32)  # [B] valid new rows
            self.bias = self._bias(g, step, live, cos.shape[0])  # [B | 1, 1, T, S]

    def _bias(self, g: Graph, step: StepValues, live: str, capacity: int) -> str:
        """Where every row's nodes form one chain (a plain step, a prefill, an n-gram draft: the last node attends
        all T nodes, which in a valid tree means depth T − 1, so the tree is a single path) GroupQueryAttention's
        causal rule is the whole attention: the bias is zeros [1, 1, T, S] (GroupQueryAttention wants T rows);
        `tree_bias` otherwise (a batch with a tree, or a padded row). An If picks. Measured on the tiny fixture (ORT
        profiler, past 300): the tree branch costs ~0.15 ms of a 2.1 ms T = 11 step; the test and the zeros cost
        2 more small kernels than the former test (U == 1) and its Slice of a constant, ~6 µs per plain step.

        Without `chain_branch` the bias is `tree_bias` always, no If: for a graph whose calls are mostly trees (the
        EAGLE draft: one extend, then a tree level per call). ORT's If runs its branch as a subgraph with its own
        frame, which after a session call of cold caches cost ~60-85 µs beyond the branch's kernels (regime
        fixture, ORT profiler: If 176 µs per draft call, its 12 kernels 89), more than the tree bias costs a
        chain."""
        if not self.chain_branch:
            return tree_bias(g, step, live)
        last = g.op("Gather", step.tree_mask, g.const(-1), axis=1)  # [B, U] what each row's last node attends
        one = g.op("ReduceMin", last, keepdims=0)  # [] every row's last node attends every node: all chains
        plain, tree = g.branch(), g.branch()
        dims = plain.op(
            "Concat",
            plain.const([1, 1]),
            plain.op("Shape", step.tree_mask, start=1, end=2),
            plain.op("Unsqueeze", live, plain.const([0])),
            axis=0,
        )  # [4] = (1, 1, T, S)
        a = plain.op("ConstantOfShape", dims, value=numpy_helper.from_array(np.zeros(1, np.float32)))
        b = tree_bias(tree, step, live)
        return g.op(
            "If",
            one,
            then_branch=plain.body([(a, F32, ["plain_b", 1, "plain_t", "plain_s"])]),
            else_branch=tree.body([(b, F32, ["tree_b", 1, "tree_t", "tree_s"])]),
        )

    def norm(self, g: Graph, x: str, weight: str, eps: float, out: str | None = None) -> str:
        # ORT's SimplifiedLayerNormalization sits in the default domain, unknown to onnx.checker; the
        # standard op is one node too.
        return g.op("RMSNormalization", x, weight, out=out, epsilon=eps, axis=-1, stash_type=1)

    def add_norm(
        self, g: Graph, x: str, delta: str, weight: str, eps: float, out: str | None = None
    ) -> tuple[str, str]:
        y, _, _, s = g.op_n(
            "SkipSimplifiedLayerNormalization", x, delta, weight, outs=[out or "", "-", "-", ""], domain=MS, epsilon=eps
        )
        return y, s

    def attention(
        self,
        g: Graph,
        h: str,
        qkv_weight: str,
        shape: AttnShape,
        cache: LayerCache,
        kv_scales: tuple[float, float] | None = None,
    ) -> str:
        qkv = g.op("MatMul", h, qkv_weight)  # [B, T, (H + 2KV)·D] packed
        if kv_scales is None:
            q, k, v, rope = qkv, "", "", [self.cos, self.sin, self.step.position_ids]
        else:  # FP8 KV cache: RoPE outside, so the post-RoPE keys can be fake-quantized before GQA writes them
            H, KV, D = shape.heads, shape.kv_heads, shape.head_dim
            q, k, v = g.op_n("Split", qkv, g.const([H * D, KV * D, KV * D]), outs=3, axis=-1)
            pos = self.step.position_ids
            q = g.op("RotaryEmbedding", q, self.cos, self.sin, pos, num_heads=H)  # [B, T, H·D]
            k = g.op("RotaryEmbedding", k, self.cos, self.sin, pos, num_heads=KV)  # [B, T, KV·D]
            k, v = fake_quant(g, k, kv_scales[0], "k_cache"), fake_quant(g, v, kv_scales[1], "v_cache")
            rope = ["", "", ""]
        inputs = [
            q,
            k,
            v,
            cache.past_key,
            cache.past_value,
            self.seqlens_k,
            self.total,
            *rope,
            self.bias,
            "",
            "",
            "",
            "",
            "",
            self.query_seqlens,
        ]
        y, _, _ = g.op_n(
            "GroupQueryAttention",
            *inputs,
            outs=["", cache.present_key, cache.present_value],
            domain=MS,
            num_heads=shape.heads,
            kv_num_heads=shape.kv_heads,
            do_rotary=int(kv_scales is None),
            causal=1,
        )
        return y  # [B, T, H·D]

    def silu(self, g: Graph, x: str) -> str:
        return g.op("QuickGelu", x, domain=MS, alpha=1.0)
