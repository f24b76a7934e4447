"""Llama decoder layers as ONNX nodes, weights read from a `builder.model.llama` module.

Per layer: norm → packed QKV MatMul → attention (the variant's) → o_proj MatMul → residual add + norm →
gate and up (one fused gate_up MatMul + Split, or two MatMuls: the variant's `fused_gate_up`) → SiLU · up
→ down MatMul; the next layer's (or the final) norm takes the residual add. Weights are numpy arrays in the
graph's activation dtype (`contract.Precision.act`: float32, bfloat16 or float16, converted from the module's
own dtype), laid out [in, out] for MatMul, or FP8
(`builder.export.qdq.Fp8Weight`: Q/DQ of the input, DequantizeLinear of the FP8 weight, scales in the
activation dtype) where the model's `Fp8Spec` quantizes the linear; with KV scales the layer's keys and
values are quantized before the cache write (`builder.export.attention`).

Shapes: B batch, T rows, C hidden, H / KV query / key-value heads, D head_dim, I intermediate, CAP
cache capacity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np
import torch
from torch import nn

from builder.errors import UserError
from builder.export import qdq
from builder.export.attn_base import AttnShape, LayerCache, Variant
from builder.export.contract import cache_names
from builder.export.graph import Graph
from builder.export.qdq import Fp8Spec, Fp8Weight
from builder.model.config import LlamaConfig
from builder.model.llama import Block

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # of the modules exported
TORCH = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def to_numpy(t: torch.Tensor, dtype: str | None = None) -> np.ndarray:
    """The tensor as a NumPy array, converted to `dtype` (a dtype name) first when given (bfloat16: an
    ml_dtypes array holding the same bits)."""
    t = t.detach().to("cpu")
    if dtype is not None:
        t = t.to(TORCH[dtype])
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


Linear = np.ndarray | Fp8Weight  # [in, out] float, or FP8 with its scales


@dataclass(frozen=True)
class LayerWeights:
    input_norm: np.ndarray | None  # [C]; None = identity (EAGLE layer 0)
    qkv: Linear  # [C, (H + 2KV)·D]
    o: Linear  # [H·D, C]
    post_norm: np.ndarray  # [C]
    gate_up: Linear  # [C, 2I]
    down: Linear  # [I, C]
    kv_scales: tuple[float, float] | None = None  # (k_scale, v_scale): FP8 KV cache


def layer_weights(
    block: Block, fp8: Fp8Spec | None = None, index: int | None = None, dtype: str = "float32"
) -> LayerWeights:
    """Layer `index`'s weights ("layers.{index}." in `fp8`'s names) in `dtype`; FP8 where `fp8` quantizes them."""
    a, m = block.self_attn, block.mlp
    norm = block.input_layernorm
    name = f"layers.{index}."

    def packed(*modules: tuple[str, nn.Linear]) -> Linear:  # [in, Σout]
        quant = [None if fp8 is None else fp8.linears.get(name + n) for n, _ in modules]
        if all(q is not None for q in quant):
            return qdq.pack(quant)  # type: ignore[arg-type]
        if any(q is not None for q in quant):
            raise ValueError(f"{name}: {', '.join(n for n, _ in modules)} must be quantized alike (one MatMul)")
        return np.concatenate([to_numpy(lin.weight.T, dtype) for _, lin in modules], axis=1)

    kv = None if fp8 is None or index is None else fp8.kv_scales.get(index)
    return LayerWeights(
        input_norm=None if isinstance(norm, nn.Identity) else to_numpy(norm.weight, dtype),  # type: ignore[arg-type]
        qkv=packed(("self_attn.q_proj", a.q_proj), ("self_attn.k_proj", a.k_proj), ("self_attn.v_proj", a.v_proj)),
        o=packed(("self_attn.o_proj", a.o_proj)),
        post_norm=to_numpy(block.post_attention_layernorm.weight, dtype),
        gate_up=packed(("mlp.gate_proj", m.gate_proj), ("mlp.up_proj", m.up_proj)),
        down=packed(("mlp.down_proj", m.down_proj)),
        kv_scales=None if kv is None else (float(kv[0]), float(kv[1])),
    )


def operands(g: Graph, x: str, w: Linear, base: str, dtype: str = "float32") -> tuple[str, str]:
    """(input, weight) values of x @ w: as is for a float weight; Q/DQ(x) and DQ(w8) for FP8 (scales in `dtype`)."""
    if isinstance(w, Fp8Weight):
        return qdq.fake_quant(g, x, w.input_scale, base, dtype), qdq.weight(g, base, w, dtype)
    return x, g.weight(base, w)


def check_dtype(dtype: torch.dtype, what: str) -> None:
    if dtype not in SUPPORTED_DTYPES:
        raise UserError(
            f"{what} has dtype {dtype}; the ONNX export takes float32, bfloat16 or float16 modules",
            field="dtype",
            allowed="float32, bfloat16, float16",
        )


def rope_tables(inv_freq: torch.Tensor, capacity: int, dtype: str = "float32") -> tuple[np.ndarray, np.ndarray]:
    """cos/sin [CAP, D/2] of position · inv_freq for positions 0..CAP-1, in fp32 exactly as `rope_cos_sin`
    does, then cast to `dtype` (as `rope_cos_sin` casts to the model dtype)."""
    freqs = torch.arange(capacity, dtype=torch.int64).float()[:, None] * inv_freq.float()  # (CAP, D/2)
    return to_numpy(freqs.cos(), dtype), to_numpy(freqs.sin(), dtype)


def attn_shape(cfg: LlamaConfig) -> AttnShape:
    return AttnShape(cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim)


def layer_caches(layers: int) -> list[LayerCache]:
    """Each layer's cache values (graph inputs `past_*`, outputs `present_*`: `builder.export.contract`)."""
    return [LayerCache(*cache_names(i)) for i in range(layers)]


def decoder(
    g: Graph,
    variant: Variant,
    x: str,  # [B, T, C] input of layer 0
    layers: Iterable[LayerWeights],  # consumed once, layer by layer (a generator frees each after use)
    cfg: LlamaConfig,
    caches: list[LayerCache],
    final_norm: np.ndarray | None,  # [C]; None: no final norm (EAGLE), the output is the residual stream
    out: str,  # name of the output value [B, T, C] ([B, R, C] with `rows`)
    rows: str | None = None,  # [B, R] int64: the only rows the last layer carries past its attention
    attn_in: str | None = None,  # [B, T, Ca] layer 0's attention input when it is not x (EAGLE-3: 2C wide)
    residuals: list[str] | None = None,  # filled: the residual stream [B, T, C] after each layer, in order
) -> str:
    """All decoder layers, then the final norm (or the last residual add); returns `out`.

    With `rows`, the last layer's attention still runs (and writes the KV cache) over all T rows, then its
    attention output and residual stream are gathered to the R rows given per batch row (GatherND, batch_dims
    1), so o_proj, the MLP and whatever the caller puts after the decoder run over R rows only.

    `attn_in`: layer 0 (no input norm of its own) attends over this value while x stays its residual stream — the
    EAGLE-3 draft layer's [input_norm(embed); hidden_norm(h)] with residual h (`builder.export.eagle3`); its
    packed QKV weight is then Ca rows tall. `residuals` (an empty list, all rows, no `rows`): appended with the
    value holding the residual stream after layer i, for each i — the sums the fused add + norm computes anyway,
    so reading them costs no node (EAGLE-3's target features, `builder.export.target`)."""
    eps, shape, dtype = cfg.rms_norm_eps, attn_shape(cfg), variant.precision.act
    if residuals is not None and (rows is not None or residuals):
        raise ValueError("residuals: an empty list, and all rows (no `rows`)")
    pending: str | None = None  # the last MLP output, not yet added to the residual stream x
    last = cfg.num_hidden_layers - 1
    for i, w in enumerate(layers):
        with g.scope(f"layer{i}"):
            if attn_in is not None and i == 0:
                if w.input_norm is not None:
                    raise ValueError("attn_in replaces layer 0's input norm: its weights must have none")
                h = attn_in
            elif w.input_norm is None:  # identity norm: the residual add (if any) is the layer input
                x = x if pending is None else g.op("Add", x, pending)
                h = x
            elif pending is None:
                h = variant.norm(g, x, g.weight("input_norm", w.input_norm), eps)
            else:
                h, x = variant.add_norm(g, x, pending, g.weight("input_norm", w.input_norm), eps)
            if residuals is not None and pending is not None:
                residuals.append(x)  # after layer i - 1
            h, qkv = operands(g, h, w.qkv, "qkv", dtype)
            attn = variant.attention(g, h, qkv, shape, caches[i], w.kv_scales)  # [B, T, H·D]
            if rows is not None and i == last:
                index = g.op("Unsqueeze", rows, g.const([2]))  # [B, R, 1]
                attn = g.op("GatherND", attn, index, batch_dims=1)  # [B, R, H·D]
                x = g.op("GatherND", x, index, batch_dims=1)  # [B, R, C]
            attn = g.op("MatMul", *operands(g, attn, w.o, "o_proj", dtype))  # [B, T, C]
            h, x = variant.add_norm(g, x, attn, g.weight("post_norm", w.post_norm), eps)
            pending = _mlp(g, variant, h, w, dtype)
    with g.scope("final"):
        if pending is None:
            raise ValueError("no layers")
        if final_norm is None:
            x = g.op("Add", x, pending, out=out)
            y = x
        else:
            y, x = variant.add_norm(g, x, pending, g.weight("norm", final_norm), eps, out=out)
        if residuals is not None:
            residuals.append(x)  # after the last layer
        return y


def _mlp(g: Graph, variant: Variant, h: str, w: LayerWeights, dtype: str) -> str:  # [B, T, C] -> [B, T, C]
    inter = (w.down.data if isinstance(w.down, Fp8Weight) else w.down).shape[0]
    if variant.fused_gate_up:
        gu = g.op("MatMul", *operands(g, h, w.gate_up, "gate_up", dtype))  # [B, T, 2I]
        gate, up = g.op_n("Split", gu, g.const([inter, inter]), outs=2, axis=-1)  # [B, T, I] each
    else:  # one input (FP8: one Q/DQ of it, site "gate_up": modelopt gives gate and up one input scale)
        fp8 = isinstance(w.gate_up, Fp8Weight)
        x = qdq.fake_quant(g, h, w.gate_up.input_scale, "gate_up", dtype) if fp8 else h  # type: ignore[union-attr]
        gate, up = (
            g.op("MatMul", x, _weight(g, columns(w.gate_up, lo, lo + inter), base, dtype))
            for base, lo in (("gate", 0), ("up", inter))
        )  # [B, T, I] each
    act = g.op("Mul", variant.silu(g, gate), up)  # [B, T, I]
    return g.op("MatMul", *operands(g, act, w.down, "down_proj", dtype))  # [B, T, C]


def _weight(g: Graph, w: Linear, base: str, dtype: str) -> str:
    return qdq.weight(g, base, w, dtype) if isinstance(w, Fp8Weight) else g.weight(base, w)


def columns(w: Linear, start: int, stop: int) -> Linear:
    """Output columns [start, stop) of an [in, out] weight (an FP8 one keeps its scales: per column, or the one)."""
    if not isinstance(w, Fp8Weight):
        return np.ascontiguousarray(w[:, start:stop])
    scale = w.scale[start:stop] if w.scale.ndim else w.scale
    return Fp8Weight(np.ascontiguousarray(w.data[:, start:stop]), np.ascontiguousarray(scale), w.input_scale)
