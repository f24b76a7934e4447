"""The FP8 model as readable torch: the reference the exported Q/DQ graph is tested against.

`fake_quant_model(model, spec)` takes the dequantized model (`builder.quantize.checkpoint`: weights
already fp8 · weight_scale) and adds what the graph's QuantizeLinear → DequantizeLinear pairs do: every
quantized linear's input is rounded to FP8 with its input scale (forward pre-hooks), and with KV scales
`Fp8KVCache` rounds the post-RoPE keys and the values as they are written. Run it in float64
(`.double()`) for the exact math of the FP8 model, in float32 for what fp32 arithmetic does.

Rounding (`fp8_round`) is exact in any float dtype: y = x / s in x's dtype, clamped to ±448, rounded to
the nearest E4M3 value (ties to even) by scaling with a power of two (exact), then times s. A test can
pass its own `quant(site, x, scale)` to follow another implementation's rounding decisions.

Sites are named as the graph's tags (`builder.export.qdq`): "layer{i}/qkv", "layer{i}/o_proj",
"layer{i}/gate_up", "layer{i}/down_proj", "layer{i}/k_cache", "layer{i}/v_cache", "verify/lm_head".
"""

from __future__ import annotations

import copy
from typing import Callable

import torch

from builder.export.qdq import FP8_MAX, Fp8Spec
from builder.model.kv_cache import KVCache
from builder.model.llama import Llama

Quant = Callable[[str, torch.Tensor, float], torch.Tensor]  # (site, x, scale) -> dequantized FP8 x
SITES = {
    "self_attn.q_proj": "qkv",
    "self_attn.k_proj": "qkv",
    "self_attn.v_proj": "qkv",
    "self_attn.o_proj": "o_proj",
    "mlp.gate_proj": "gate_up",
    "mlp.up_proj": "gate_up",
    "mlp.down_proj": "down_proj",
}


def e4m3_round(y: torch.Tensor) -> torch.Tensor:
    """The nearest FP8 E4M3FN value to each element of y (|y| ≤ 448), ties to even; exact in y's dtype."""
    _, exp = torch.frexp(y.abs().clamp(min=2.0**-6))  # |y| = m · 2**exp, m in [0.5, 1): floor(log2|y|) = exp - 1
    step = torch.ldexp(torch.ones_like(y), (exp - 4).to(y.dtype))  # 3 mantissa bits; subnormal spacing 2**-9
    return torch.round(y / step) * step  # torch.round: half to even; division by a power of two is exact


def fp8_round(x: torch.Tensor, scale: float) -> torch.Tensor:
    """Q → DQ: q = e4m3(clamp(x / s, ±448)), returns q · s in x's dtype."""
    s = torch.tensor(scale, dtype=x.dtype)
    return e4m3_round((x / s).clamp(-FP8_MAX, FP8_MAX)) * s


def default_quant(_site: str, x: torch.Tensor, scale: float) -> torch.Tensor:
    return fp8_round(x, scale)


def site_of(module: str) -> str:
    """Graph site of a quantized linear ("layers.3.mlp.up_proj" -> "layer3/gate_up"; lm_head -> "verify/lm_head")."""
    if module == "lm_head":
        return "verify/lm_head"
    _, i, rest = module.split(".", 2)
    return f"layer{i}/{SITES[rest]}"


def fake_quant_model(model: Llama, spec: Fp8Spec, quant: Quant = default_quant) -> Llama:
    """A copy of the dequantized `model` whose quantized linears fake-quantize their inputs (module doc).
    Use `Fp8KVCache` for its cache so the KV cache is quantized too."""
    ref = copy.deepcopy(model)
    for name, lin in spec.linears.items():
        site, scale = site_of(name), float(lin.input_scale)
        ref.get_submodule(name).register_forward_pre_hook(
            lambda _m, args, site=site, scale=scale: (quant(site, args[0], scale),)
        )
    return ref


class _QuantWrites:
    """A cache tensor whose slice assignments are rounded to FP8 first (what `Attention` writes)."""

    def __init__(self, t: torch.Tensor, site: str, scale: float, quant: Quant) -> None:
        self.t, self.site, self.scale, self.quant = t, site, scale, quant

    def __getitem__(self, idx):
        return self.t[idx]

    def __setitem__(self, idx, value: torch.Tensor) -> None:
        self.t[idx] = self.quant(self.site, value, self.scale)


class Fp8KVCache(KVCache):
    """A `KVCache` whose layers with KV scales store the FP8-rounded keys and values."""

    def __init__(self, spec: Fp8Spec, *args, quant: Quant = default_quant, **kw) -> None:
        super().__init__(*args, **kw)
        self.spec, self.quant = spec, quant

    def layer(self, i: int):  # -> [B, KV, CAP, D] each (writes rounded)
        k, v = super().layer(i)
        scales = self.spec.kv_scales.get(i)
        if scales is None:
            return k, v
        return (
            _QuantWrites(k, f"layer{i}/k_cache", scales[0], self.quant),
            _QuantWrites(v, f"layer{i}/v_cache", scales[1], self.quant),
        )
