"""FP8 in the TensorRT-LLM checkpoint: from modelopt's unified HF checkpoint (the quantize stage's output).

Which writer, and why: modelopt 0.47 has a TensorRT-LLM exporter (`modelopt.torch.export.
export_tensorrt_llm_checkpoint`), but it needs the calibrated modelopt model in memory — it quantizes the
original high-precision q, k, v weights against their shared scale (`model_config.py` `QKVConfig.
weights_scaling_factor`: the max of the q, k, v scales). The quantize stage keeps only modelopt's unified
HF checkpoint on disk (per-linear FP8 weights and scales), so the conversion here follows what
TensorRT-LLM itself does when it loads such a pre-quantized HF checkpoint (the unified
`ModelWeightsLoader` path of `LLaMAForCausalLM.from_hugging_face`):

* `tensorrt_llm/quantization/layers.py` `FP8Linear.postprocess` / `FP8RowLinear.postprocess`: weight ←
  `weight` viewed as float8_e4m3fn; `weights_scaling_factor` ← `weight_scale`, `activation_scaling_factor`
  ← `input_scale`, both reshaped to [1] float32 (`tllm_to_externel_key_dict`). For the fused qkv
  (`is_qkv`): activation_scaling_factor = max of the q, k, v input scales; the new weight scale s =
  max(s_q, s_k, s_v), and each part is requantized in float32 as `fp8(w.float() * s_part / s)` (multiply,
  then divide, then torch's round-to-nearest-even cast). Where s_part = s the part may still move by the
  float32 round trip; elsewhere by up to half an FP8 step of the new grid.
* `tensorrt_llm/layers/attention.py` `Attention.postprocess`: kv_cache_scaling_factor = max(k_scale,
  v_scale) (float32 [1]), kv_cache_rcp_scaling_factor = its reciprocal; ones where the checkpoint has no
  scales (`model_weights_loader.py` maps them from `k_proj.k_scale` / `v_proj.v_scale`).
* Nothing else is requantized: o_proj, gate/up/down and (if quantized) lm_head keep modelopt's bytes.
  TensorRT-LLM keeps gate (up_proj) and fc (gate_proj) as two FP8 linears with their own scales.

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
