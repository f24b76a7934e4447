"""Read modelopt's unified FP8 checkpoint (the quantize stage's output, or a published one) back, strictly.

Layout (modelopt 0.37–0.47 `export_hf_checkpoint`): config.json (+ `quantization_config`, quant_method
"modelopt"), hf_quant_config.json (absent in some published checkpoints: then `hf_quant.quant_config_of`
rebuilds its `quantization` from config.json), `*.safetensors` with, per quantized linear `<m>`: `<m>.weight`
float8_e4m3fn [out, in], `<m>.weight_scale` and `<m>.input_scale` float32 per tensor ([] or [1]: read as []);
per layer with an FP8 KV cache: `model.layers.<i>.self_attn.k_proj.k_scale` and `…v_proj.v_scale` (older modelopt
releases wrote `…self_attn.k_scale`: read too); every other tensor in the model dtype under its HF name.

`read_fp8_checkpoint` returns the `Fp8Spec` (what the exporter turns into Q/DQ) and the dequantized
model: a `builder.model.llama.Llama` whose quantized weights are fp8 · weight_scale in float32 (what the
graph's DequantizeLinear computes, bit for bit; cast to `dtype` when one is asked) and the rest as stored.
`scan_fp8_checkpoint` checks the same layout from the safetensors headers and reads only the scales (the
quantize stage's check of its own output: a 70B's weights are never materialised for it).
"""

from __future__ import annotations

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
from builder.quantize.hf_quant import quant_config_of

_KV = re.compile(r"^model\.layers\.(\d+)\.self_attn\.(?:[kv]_proj\.)?([kv])_scale$")
SCALES = ("weight_scale", "input_scale")


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


def read_fp8_checkpoint(folder: str | Path, dtype: torch.dtype = torch.float32) -> Fp8Checkpoint:
    """The quantized checkpoint in `folder` (see the module docstring); UserError naming a bad key."""
    folder = Path(folder)
    cfg = LlamaConfig.from_json(folder / "config.json")
    quant_config = quant_config_of(folder)
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
                deq = torch.from_numpy(linears[m.removeprefix("model.")].dequantized())
                state[key.removeprefix("model.")] = deq.to(dtype)
            else:
                state[key.removeprefix("model.")] = t.to(dtype)
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
        scales[name] = _numpy(t.float().reshape(()) if t.numel() == 1 else t.float())  # [1] -> [] (per tensor)
    return LinearFp8(_numpy(tensors[f"{module}.weight"]), scales["weight_scale"], scales["input_scale"])


def _positive(t: torch.Tensor, where: str) -> float:
    if not torch.isfinite(t).all() or not (t > 0).all():
        raise UserError(f"scales must be positive and finite, got {t.flatten()[:4].tolist()}", location=where)
    return float(t.flatten()[0]) if t.numel() == 1 else float("nan")


@dataclass
class Fp8Scan:
    """What `scan_fp8_checkpoint` found: the quantized linears' scales (module name with `model.`), KV scales."""

    folder: Path
    cfg: LlamaConfig
    scales: dict[str, tuple[float, float]]  # HF module -> (weight_scale, input_scale)
    kv_scales: dict[int, tuple[float, float]]  # layer -> (k_scale, v_scale)
    kv_keys: dict[int, tuple[str, str]]  # layer -> the (k, v) scale keys as stored
    quant_config: dict[str, Any]
    files: dict[str, Path]  # tensor key -> its file
    dtypes: dict[str, str]  # tensor key -> safetensors dtype (F8_E4M3, BF16, F32, …)


def scan_fp8_checkpoint(folder: str | Path) -> Fp8Scan:
    """The layout checks of `read_fp8_checkpoint` on the safetensors headers, reading only the scales."""
    from safetensors import SafetensorError, safe_open

    folder = Path(folder)
    cfg = LlamaConfig.from_json(folder / "config.json")
    quant_config = quant_config_of(folder)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise UserError("no safetensors file in the quantized checkpoint", location=str(folder))
    where: dict[str, Path] = {}
    header: dict[str, tuple[str, tuple[int, ...]]] = {}
    for f in files:
        try:
            with safe_open(str(f), framework="pt", device="cpu") as h:
                for key in h.keys():
                    sl = h.get_slice(key)
                    header[key], where[key] = (str(sl.get_dtype()), tuple(sl.get_shape())), f
        except (SafetensorError, OSError) as exc:
            raise UserError(f"corrupt or truncated safetensors file: {exc}", location=str(f)) from exc

    def scalar(key: str) -> float:
        with safe_open(str(where[key]), framework="pt", device="cpu") as h:
            t = h.get_tensor(key)
        if t.numel() != 1:
            raise UserError(
                f"{key} has shape {tuple(t.shape)}: per-tensor scales only",
                location=str(where[key]),
                field=key,
                allowed="[] or [1]",
            )
        return _positive(t, f"{where[key]}: {key}")

    expected = expected_shapes(cfg)
    scales: dict[str, tuple[float, float]] = {}
    kv: dict[int, dict[str, tuple[str, float]]] = {}
    for key, (dt, shape) in header.items():
        loc = f"{where[key]}: {key}"
        if key in expected:
            if shape != expected[key]:
                raise UserError(f"wrong shape {shape}, config.json implies {expected[key]}", location=loc)
            if dt == "F8_E4M3":
                m = key.removesuffix(".weight")
                missing = [n for n in SCALES if f"{m}.{n}" not in header]
                if missing:
                    raise UserError(f"FP8 weight without {m}.{missing[0]}", location=loc)
                scales[m] = (scalar(f"{m}.weight_scale"), scalar(f"{m}.input_scale"))
            elif dt not in ("F32", "F16", "BF16"):
                raise UserError(f"dtype {dt}, expected float8_e4m3fn or a float", location=loc)
        elif (hit := _KV.match(key)) is not None:
            kv.setdefault(int(hit.group(1)), {})[hit.group(2)] = (key, scalar(key))
        elif not key.endswith((".weight_scale", ".input_scale")) or key.rsplit(".", 1)[0] + ".weight" not in header:
            raise UserError("unexpected tensor in the quantized checkpoint", location=loc)
    missing_keys = sorted(k.removeprefix("model.") for k in expected.keys() - header.keys())
    if missing_keys:
        raise UserError(f"missing tensor(s): {', '.join(missing_keys[:4])}", location=str(folder))
    if any(set(s) != {"k", "v"} for s in kv.values()):
        raise UserError("a layer has a k_scale without its v_scale (or the reverse)", location=str(folder))
    return Fp8Scan(
        folder,
        cfg,
        scales,
        {i: (s["k"][1], s["v"][1]) for i, s in sorted(kv.items())},
        {i: (s["k"][0], s["v"][0]) for i, s in sorted(kv.items())},
        quant_config,
        where,
        {k: v[0] for k, v in header.items()},
    )


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
