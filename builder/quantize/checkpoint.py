"""Read modelopt's unified FP8 checkpoint (the quantize stage's output) back, strictly.

Layout (modelopt 0.47 `export_hf_checkpoint`): config.json (+ `quantization_config`),
hf_quant_config.json, `*.safetensors` with, per quantized linear `<m>`: `<m>.weight` float8_e4m3fn
[out, in], `<m>.weight_scale` and `<m>.input_scale` float32 (per tensor); per layer with an FP8 KV
cache: `model.layers.<i>.self_attn.k_proj.k_scale` and `…v_proj.v_scale` (older modelopt releases wrote
`…self_attn.k_scale`: read too); every other tensor in the model dtype under its HF name.

`read_fp8_checkpoint` returns the `Fp8Spec` (what the exporter turns into Q/DQ) and the dequantized
model: a `builder.model.llama.Llama` whose quantized weights are fp8 · weight_scale in float32 (what the
graph's DequantizeLinear computes, bit for bit) and the rest as stored.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from builder.errors import UserError
from builder.export.qdq import Fp8Spec, LinearFp8
from builder.model.config import LlamaConfig
from builder.model.llama import Llama
from builder.model.loader import expected_shapes

QUANT_CONFIG = "hf_quant_config.json"
_KV = re.compile(r"^model\.layers\.(\d+)\.self_attn\.(?:[kv]_proj\.)?([kv])_scale$")


@dataclass
class Fp8Checkpoint:
    folder: Path
    cfg: LlamaConfig
    spec: Fp8Spec
    model: Llama  # dequantized, float32
    quant_config: dict[str, Any]  # hf_quant_config.json


def _numpy(t: torch.Tensor) -> np.ndarray:
    import ml_dtypes

    if t.dtype == torch.float8_e4m3fn:
        return t.contiguous().view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn)
    return t.detach().contiguous().numpy()


def _read_tensors(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise UserError("no safetensors file in the quantized checkpoint", location=str(folder))
    out: dict[str, torch.Tensor] = {}
    for f in files:
        out.update(load_file(str(f)))
    return out


def read_fp8_checkpoint(folder: str | Path) -> Fp8Checkpoint:
    """The quantized checkpoint in `folder` (see the module docstring); UserError naming a bad key."""
    folder = Path(folder)
    cfg = LlamaConfig.from_json(folder / "config.json")
    quant_config = json.loads((folder / QUANT_CONFIG).read_text(encoding="utf-8"))
    tensors = _read_tensors(folder)
    expected = expected_shapes(cfg)
    state: dict[str, torch.Tensor] = {}
    linears: dict[str, LinearFp8] = {}
    kv: dict[int, dict[str, float]] = {}
    for key, t in tensors.items():
        where = f"{folder}: {key}"
        if key in expected:
            if tuple(t.shape) != expected[key]:
                raise UserError(f"wrong shape {tuple(t.shape)}, config.json implies {expected[key]}", location=where)
            if t.dtype == torch.float8_e4m3fn:
                m = key.removesuffix(".weight")
                linears[m.removeprefix("model.")] = _linear(tensors, m, where)
                state[key.removeprefix("model.")] = torch.from_numpy(linears[m.removeprefix("model.")].dequantized())
            else:
                state[key.removeprefix("model.")] = t.float()
        elif (hit := _KV.match(key)) is not None:
            kv.setdefault(int(hit.group(1)), {})[hit.group(2)] = _positive(t, where)
        elif not key.endswith((".weight_scale", ".input_scale")) or key.rsplit(".", 1)[0] + ".weight" not in tensors:
            raise UserError("unexpected tensor in the quantized checkpoint", location=where)
    missing = sorted(k.removeprefix("model.") for k in expected.keys() - tensors.keys())
    if missing:
        raise UserError(f"missing tensor(s): {', '.join(missing[:4])}", location=str(folder))
    if any(set(s) != {"k", "v"} for s in kv.values()):
        raise UserError("a layer has a k_scale without its v_scale (or the reverse)", location=str(folder))
    spec = Fp8Spec(linears, {i: (s["k"], s["v"]) for i, s in sorted(kv.items())})
    return Fp8Checkpoint(folder, cfg, spec, _model(cfg, state), quant_config)


def _linear(tensors: dict[str, torch.Tensor], module: str, where: str) -> LinearFp8:
    scales = {}
    for name in ("weight_scale", "input_scale"):
        t = tensors.get(f"{module}.{name}")
        if t is None:
            raise UserError(f"FP8 weight without {module}.{name}", location=where)
        _positive(t, f"{where} ({name})")
        scales[name] = _numpy(t.float())
    return LinearFp8(_numpy(tensors[f"{module}.weight"]), scales["weight_scale"], scales["input_scale"])


def _positive(t: torch.Tensor, where: str) -> float:
    if not torch.isfinite(t).all() or not (t > 0).all():
        raise UserError(f"scales must be positive and finite, got {t.flatten()[:4].tolist()}", location=where)
    return float(t.flatten()[0]) if t.numel() == 1 else float("nan")


def _model(cfg: LlamaConfig, state: dict[str, torch.Tensor]) -> Llama:
    if cfg.tie_word_embeddings:
        state.pop("lm_head.weight", None)
        state["lm_head.weight"] = state["embed_tokens.weight"]
    with torch.device("meta"):
        model = Llama(cfg)
    model.load_state_dict(state, strict=True, assign=True)
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.embed_tokens.weight
    return model.eval()
