"""The two attention variants of the exported graphs (`builder.export.attn_base`: what they share).

* `standard` — ONNX opset-24 standard ops: `RotaryEmbedding` (23), `TensorScatter` (24) writing the new
  rows at a per-row offset, `Attention` (24) with a boolean mask over the live prefix of the cache
  (S = max(write_at + num_new) over the batch), `RMSNormalization` (23), `Swish` (24). This is the graph
  a TensorRT rewrite starts from (here).
* `ort` — the lean graph for ONNX Runtime's CPU provider (`builder.export.ort_variant`): the residual add
  fused into the norm (SkipSimplifiedLayerNormalization), GroupQueryAttention with the rotary inside and the
  tree as an attention bias, `QuickGelu`; float32 only.

Per-graph values (`StepValues`): position_ids [B, T]; past_len [B]; write_at [B] (slot of new row 0:
past_len for the target, past_len + write_offset for the EAGLE draft); num_new [B] (valid rows);
tree_mask [B, T, U] over the tentative region (column u = slot past_len + u).

Mask (both variants): row i of batch b may attend slot s iff s < past_len[b], or
0 ≤ s − past_len[b] < U and tree_mask[b, i, s − past_len[b]].

Precision (`builder.export.contract.Precision`): the `standard` variant computes in the activation dtype
(float32, bfloat16 or float16; softmax in float32 — `softmax_precision` = FLOAT — as the reference's
`_at_least_fp32`), and with an FP8 KV cache stored as such (Precision.kv = float8e4m3fn) writes the
quantized keys / values (QuantizeLinear with the layer's k / v scale) into FLOAT8E4M3FN caches and
attends DequantizeLinear of the live cache. The `ort` variant is float32 only (the CPU form).
"""

from __future__ import annotations

import numpy as np

from builder.errors import UserError
from builder.export.attn_base import AttnShape, LayerCache, StepValues, Variant
from builder.export.contract import CPU, Precision
from builder.export.graph import F32, Graph
from builder.export.ort_variant import OrtVariant
from builder.export.qdq import fake_quant, quantize

VARIANTS = ("standard", "ort")
__all__ = [
    "AttnShape",
    "LayerCache",
    "StepValues",
    "Variant",
    "VARIANTS",
    "make_variant",
    "StandardVariant",
    "OrtVariant",
    "attend_mask",
]


def make_variant(name: str, head_dim: int, precision: Precision = CPU, *, chain_branch: bool = True) -> Variant:
    """The variant called `name`; `ort` needs head_dim % 16 == 0 (GroupQueryAttention's CPU kernel
    refuses other head sizes at run time: refused here at export instead) and the float32 precision.
    `chain_branch=False`: `ort`'s attention bias is the tree bias always (no If; `OrtVariant._bias`)."""
    if name == "standard":
        return StandardVariant(precision)
    if name == "ort":
        if head_dim % 16:
            raise UserError(
                f"the `ort` attention variant (GroupQueryAttention) needs head_dim % 16 == 0, got "
                f"{head_dim}; use the `standard` variant",
                field="variant",
                allowed="standard",
            )
        if precision != CPU:
            raise UserError(
                f"the `ort` attention variant is the float32 CPU form; {precision.act} graphs (the GPU "
                "form) are `standard`",
                field="variant",
                allowed="standard",
            )
        return OrtVariant(chain_branch)
    raise UserError(f"unknown attention variant {name!r}", field="variant", allowed=", ".join(VARIANTS))


def attend_mask(g: Graph, step: StepValues, live: str) -> str:  # -> [B, 1, T, S] bool
    """The boolean attention mask over slots [0, S) (S = the scalar `live`); see the module docstring."""
    ar = g.op("Range", g.const(0), live, g.const(1))  # [S]
    rel = g.op("Sub", g.op("Unsqueeze", ar, g.const([0])), g.op("Unsqueeze", step.past_len, g.const([1])))  # [B, S]
    u = g.op("Gather", g.op("Shape", step.tree_mask), g.const(2))  # [] U
    past = g.op("Less", rel, g.const(0))  # [B, S]
    inside = g.op("And", g.op("Not", past), g.op("Less", rel, u))  # [B, S]
    idx = g.op("Where", inside, rel, g.const(0))  # [B, S] column of tree_mask to read
    bts = g.op("Concat", g.op("Shape", step.tree_mask, end=2), g.op("Shape", ar), axis=0)  # [3] = (B, T, S)
    idx = g.op("Expand", g.op("Unsqueeze", idx, g.const([1])), bts)  # [B, T, S]
    hit = g.op("GatherElements", step.tree_mask, idx, axis=2)  # [B, T, S]
    new = g.op("And", hit, g.op("Unsqueeze", inside, g.const([1])))  # [B, T, S]
    mask = g.op("Or", g.op("Unsqueeze", past, g.const([1])), new)  # [B, T, S]
    return g.op("Unsqueeze", mask, g.const([1]))  # [B, 1, T, S]


def _live_len(g: Graph, step: StepValues) -> str:  # -> [] int64: max over rows of write_at + num_new
    return g.op("ReduceMax", g.op("Add", step.write_at, step.num_new), keepdims=0)


class StandardVariant:
    """Standard ONNX ops (opset 24); see the module docstring."""

    name = "standard"
    opsets = {"": 24}
    fused_gate_up = True

    def __init__(self, precision: Precision = CPU) -> None:
        self.precision = precision

    def prepare(self, g: Graph, step: StepValues, cos: np.ndarray, sin: np.ndarray, shape: AttnShape) -> None:
        with g.scope("attn_prep"):
            self.step = step
            self.cos, self.sin = g.weight("rope_cos", cos), g.weight("rope_sin", sin)  # [CAP, D/2]
            live = _live_len(g, step)  # []
            self.live = g.op("Unsqueeze", live, g.const([0]))  # [1]
            self.mask = attend_mask(g, step, live)  # [B, 1, T, S]

    def norm(self, g: Graph, x: str, weight: str, eps: float, out: str | None = None) -> str:
        return g.op("RMSNormalization", x, weight, out=out, epsilon=eps, axis=-1, stash_type=1)

    def add_norm(
        self, g: Graph, x: str, delta: str, weight: str, eps: float, out: str | None = None
    ) -> tuple[str, str]:
        s = g.op("Add", x, delta)
        return self.norm(g, s, weight, eps, out), s

    def attention(
        self,
        g: Graph,
        h: str,
        qkv_weight: str,
        shape: AttnShape,
        cache: LayerCache,
        kv_scales: tuple[float, float] | None = None,
    ) -> str:
        H, KV, D = shape.heads, shape.kv_heads, shape.head_dim
        qkv = g.op("MatMul", h, qkv_weight)  # [B, T, (H + 2KV)·D]
        qkv = g.op("Reshape", qkv, g.const([0, 0, H + 2 * KV, D]))  # [B, T, H + 2KV, D]
        qkv = g.op("Transpose", qkv, perm=[0, 2, 1, 3])  # [B, H + 2KV, T, D]
        qk, v = g.op_n("Split", qkv, g.const([H + KV, KV]), outs=2, axis=1)  # [B, H+KV, T, D], [B, KV, T, D]
        qk = g.op("RotaryEmbedding", qk, self.cos, self.sin, self.step.position_ids)  # [B, H + KV, T, D]
        q, k = g.op_n("Split", qk, g.const([H, KV]), outs=2, axis=1)  # [B, H, T, D], [B, KV, T, D]
        k_live, v_live = self._cache(g, k, v, cache, kv_scales)  # [B, KV, S, D] each, activation dtype
        soft = {} if self.precision.act == "float32" else {"softmax_precision": F32}
        y = g.op("Attention", q, k_live, v_live, self.mask, **soft)  # [B, H, T, D]
        y = g.op("Transpose", y, perm=[0, 2, 1, 3])  # [B, T, H, D]
        return g.op("Reshape", y, g.const([0, 0, H * D]))  # [B, T, H·D]

    def _cache(
        self, g: Graph, k: str, v: str, cache: LayerCache, kv_scales: tuple[float, float] | None
    ) -> tuple[str, str]:
        """Write the new keys / values [B, KV, T, D] at write_at; the live caches [B, KV, S, D] to attend."""
        act, stored = self.precision.act, self.precision.fp8_kv
        if stored and kv_scales is None:
            raise UserError(
                "an FP8 KV cache stored as such needs every layer's k / v scales; the quantized checkpoint "
                "has none for this layer (quantize with kv_cache: fp8)",
                field="quantization.kv_cache",
                allowed="model_dtype, or fp8 with calibrated k / v scales",
            )
        scales: list[str | None] = [None, None]
        if kv_scales is not None and stored:  # FP8 codes are written; attention reads their dequantization
            (k, scales[0]), (v, scales[1]) = quantize(g, k, kv_scales[0], act), quantize(g, v, kv_scales[1], act)
            g.tags[f"fp8/{g.scope_name}k_cache"], g.tags[f"fp8/{g.scope_name}v_cache"] = k, v
        elif kv_scales is not None:  # CPU form: the dequantized FP8 values are written (float32 caches)
            k, v = fake_quant(g, k, kv_scales[0], "k_cache", act), fake_quant(g, v, kv_scales[1], "v_cache", act)
        kc = g.op("TensorScatter", cache.past_key, k, self.step.write_at, out=cache.present_key, axis=2)
        vc = g.op("TensorScatter", cache.past_value, v, self.step.write_at, out=cache.present_value, axis=2)
        # FP8 caches: DequantizeLinear [B, KV, CAP, D] before the Slice (ONNX's Slice takes no FP8 types)
        kc, vc = (c if s is None else g.op("DequantizeLinear", c, s) for c, s in zip((kc, vc), scales))
        zero, two = g.const([0]), g.const([2])
        k_live = g.op("Slice", kc, zero, self.live, two)  # [B, KV, S, D]
        v_live = g.op("Slice", vc, zero, self.live, two)  # [B, KV, S, D]
        return k_live, v_live

    def silu(self, g: Graph, x: str) -> str:
        return g.op("Swish", x)
