"""FP8 in the TensorRT-LLM checkpoint: from modelopt's unified HF checkpoint (the quantize stage's output).

The quantize stage writes each FP8 weight once, from the original weight, with the scale TensorRT-LLM will
use: one weight scale shared by q, k and v (TensorRT-LLM's fused `attention.qkv` has one
`weights_scaling_factor`) and one shared by gate (up_proj) and fc (gate_proj), which `trtllm-build` fuses
(`fuse_gate_mlp`, `tensorrt_llm/models/modeling_utils.py` @ b35ac1b64368513d215c57d2ed01d62d910df8da:
dequantizes both, concatenates, divides by max(gate, fc) scale and casts to FP8 — the bytes come back
unchanged when the two scales are equal). See `builder.quantize.ptq` (`unify_fused_amax`). So this writer
copies bytes and scales:

* `tensorrt_llm/quantization/layers.py` `FP8Linear` / `FP8RowLinear`: weight ← `weight` (float8_e4m3fn),
  `weights_scaling_factor` ← `weight_scale`, `activation_scaling_factor` ← `input_scale`, both [1] float32
  (`tllm_to_externel_key_dict`). The fused qkv (`is_qkv` in `FP8Linear.postprocess`): the q, k, v rows
  concatenated; weights_scaling_factor = max of the q, k, v scales (all equal from the quantize stage);
  activation_scaling_factor = max of the q, k, v input scales.
* Only where the q, k, v weight scales differ (a checkpoint that did not come through the quantize stage,
  e.g. an older cache) are the parts requantized to the shared max scale, as `FP8Linear.postprocess` does for
  a pre-quantized HF checkpoint: `fp8(w.float() * s_part / s)` in float32 (multiply, divide, torch's
  round-to-nearest-even cast) — one more rounding, bounded by half an FP8 step of the new grid.
* `tensorrt_llm/layers/attention.py` `Attention.postprocess`: kv_cache_scaling_factor = max(k_scale,
  v_scale) (float32 [1]), kv_cache_rcp_scaling_factor = its reciprocal; ones where the checkpoint has no
  scales (`model_weights_loader.py` maps them from `k_proj.k_scale` / `v_proj.v_scale`).
* Nothing else is touched: o_proj, gate/up/down and (if quantized) lm_head keep the quantize stage's bytes.
  TensorRT-LLM's checkpoint keeps gate (up_proj) and fc (gate_proj) as two FP8 linears; their scales are equal.

Upstream's FP8 qkv path does not duplicate KV heads when num_kv_heads < tp (its loader disables the
split for qkv and `FP8Linear.postprocess` then concatenates whole q, k, v); here the KV heads are
duplicated and split as for the unquantized qkv, the only layout the per-rank FP8Linear can hold.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    import torch


def shared_scale(scales: Sequence[torch.Tensor]) -> torch.Tensor:  # -> [1] float32
    """max over per-tensor scales (q, k, v weight or input scales; k and v cache scales)."""
    import torch

    return torch.stack([s.reshape(()).float() for s in scales]).max().reshape(1)


def fuse(
    parts: Sequence[torch.Tensor],  # [rows_i, C] float8_e4m3fn each (q, k, v of one rank)
    scales: Sequence[torch.Tensor],  # [] or [1] float32: each part's weight scale
) -> torch.Tensor:  # -> [Σ rows_i, C] float8_e4m3fn on the grid of max(scales)
    """The fused weight: the parts' bytes concatenated when they share one scale, else `requantize`d."""
    import torch

    if len({float(s.reshape(())) for s in scales}) == 1:
        return torch.cat([p.view(torch.uint8) for p in parts]).view(torch.float8_e4m3fn)
    return requantize(parts, scales)


def requantize(
    parts: Sequence[torch.Tensor],  # [rows_i, C] float8_e4m3fn each (q, k, v of one rank)
    scales: Sequence[torch.Tensor],  # [] or [1] float32: each part's weight scale
) -> torch.Tensor:  # -> [Σ rows_i, C] float8_e4m3fn on the grid of max(scales)
    """Requantize FP8 parts to their shared (max) scale, in TensorRT-LLM's operation order."""
    import torch

    new = shared_scale(scales)
    out = []
    for w, s in zip(parts, scales):
        x = w.to(torch.float32) * s.reshape(1).float()  # [rows, C] the dequantized part
        x = x / new  # on the new grid; |x| <= 448 since s <= new
        out.append(x.to(torch.float8_e4m3fn))
    return torch.cat(out, dim=0)


def dequantize(
    w: torch.Tensor,  # [rows, C] float8_e4m3fn
    scale: torch.Tensor,  # [1] float32
) -> torch.Tensor:  # -> [rows, C] float32: fp8 · scale, one float32 rounding
    import torch

    return w.to(torch.float32) * scale.reshape(1).float()
