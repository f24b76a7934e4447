"""A pre-quantized target: `model.checkpoint` is a modelopt FP8 checkpoint in the unified HF format (what NVIDIA
publishes, and what `export_hf_checkpoint` writes): used as it is, without calibration.

Detected (`detect`) by hf_quant_config.json (`quantization.quant_algo`) or config.json's `quantization_config`
with `quant_method: modelopt` (`quant_config_of`). Only quant_algo FP8 with
per-tensor scales is read (what TensorRT-LLM's FP8 linears and our Q/DQ graphs take); any other quantization
(NVFP4, INT4 AWQ, another tool's `quant_method`) is refused naming `model.checkpoint`.

What the recipe says (`check_recipe`): `quantization.mode` must be `fp8` (exit 2 naming it otherwise: the
checkpoint's weights are FP8 whatever the recipe wants); `quantization.calibration` is ignored (a warning);
`kv_cache: fp8` needs the checkpoint's k/v scales (exit 2 otherwise), and with `kv_cache: model_dtype` the
checkpoint's k/v scales are dropped (a warning); a module the checkpoint quantized but the recipe's
`exclude_modules` names (modelopt's `*pattern*` match on the HF module name) is dequantized and stored in
float32 (fp8 · scale, exact), so the recipe keeps deciding what stays in high precision.

`convert` writes the quantize stage's output from it — the same unified layout the calibrated path writes, so
every backend reads one format: every tensor copied byte for byte except where one scale must be shared, as
TensorRT-LLM fuses the GEMMs (`builder.quantize.ptq`): the q/k/v of each attention and the gate/up of each MLP
get the group's largest weight scale s, and a part with its own s_part < s is requantized from its own
dequantized values, `e4m3(float32(float32(w · s_part) / s))` (round to nearest even) — at most half an E4M3 step
of the new grid from those values, one rounding; their input scales become the group's max (modelopt's
`preprocess_linear_fusion` rule). Per-tensor scales are written as [] float32 (modelopt 0.47's form), the KV
scales under `self_attn.{k_proj.k_scale, v_proj.v_scale}`.

`dequantized_model` is the load stage's reference for such a checkpoint: fp8 · weight_scale, as stored.
"""

from __future__ import annotations

import fnmatch
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from builder.errors import UserError
from builder.quantize.hf_quant import QUANT_CONFIG, quant_config_of

if TYPE_CHECKING:
    import torch

    from builder.quantize.checkpoint import Fp8Scan

FUSED = (("self_attn", ("q_proj", "k_proj", "v_proj")), ("mlp", ("gate_proj", "up_proj")))
SHARD_BYTES = 2 * 2**30  # output shards: peak memory of the conversion is about one shard
FIELD = "model.checkpoint"


@dataclass(frozen=True)
class PreQuantized:
    """What the checkpoint says about its quantization."""

    folder: Path
    quant_algo: str
    kv_cache_quant_algo: str | None
    exclude_modules: tuple[str, ...]
    producer: dict[str, Any]


def detect(folder: Path) -> PreQuantized | None:
    """The checkpoint's quantization, None for an unquantized one; UserError for one trtspec cannot read."""
    folder = Path(folder)
    cfg_path = folder / "config.json"
    has_hf_quant = (folder / QUANT_CONFIG).is_file()
    raw: dict[str, Any] = {}
    if cfg_path.is_file():
        try:
            raw = json.loads(cfg_path.read_text(encoding="utf-8")).get("quantization_config") or {}
        except (ValueError, AttributeError):
            raw = {}  # the loader reports a broken config.json
    if not has_hf_quant and not raw:
        return None
    if not has_hf_quant and raw.get("quant_method") != "modelopt":
        raise UserError(
            f"the checkpoint is quantized with quant_method {raw.get('quant_method')!r}; trtspec reads "
            "unquantized checkpoints and modelopt FP8 ones (unified HF format)",
            location=str(cfg_path),
            field=FIELD,
            allowed="quant_method: modelopt, quant_algo: FP8",
        )
    q = quant_config_of(folder)
    quant = q["quantization"]
    if quant.get("quant_algo") != "FP8":
        raise UserError(
            f"modelopt quant_algo {quant.get('quant_algo')!r} is not supported",
            location=str(folder),
            field=FIELD,
            allowed="FP8 (per-tensor FP8 weights and activations)",
        )
    kv = quant.get("kv_cache_quant_algo")
    if kv not in (None, "FP8"):
        raise UserError(
            f"kv_cache_quant_algo {kv!r} is not supported", location=str(folder), field=FIELD, allowed="FP8 or none"
        )
    return PreQuantized(folder, "FP8", kv, tuple(quant.get("exclude_modules") or ()), dict(q.get("producer") or {}))


def check_recipe(recipe: Any, pre: PreQuantized) -> list[str]:
    """UserError where the recipe contradicts the checkpoint; the warnings to print otherwise."""
    q = recipe.quantization
    if q.mode != "fp8":
        raise UserError(
            f"model.checkpoint is a modelopt FP8 checkpoint ({pre.folder}); its weights are FP8",
            field="quantization.mode",
            allowed="fp8",
        )
    notes = ["quantization.calibration is ignored: the checkpoint is already quantized (its scales are used)"]
    if q.kv_cache == "fp8" and pre.kv_cache_quant_algo != "FP8":
        raise UserError(
            "kv_cache: fp8 needs k/v scales, and the pre-quantized checkpoint has none",
            field="quantization.kv_cache",
            allowed="model_dtype",
        )
    if q.kv_cache != "fp8" and pre.kv_cache_quant_algo == "FP8":
        notes.append("the checkpoint's FP8 KV cache scales are dropped: quantization.kv_cache is model_dtype")
    return notes


def excluded(module: str, patterns: list[str] | tuple[str, ...]) -> bool:
    """modelopt's rule for a recipe pattern p: the wildcard `*p*` on the module name."""
    return any(fnmatch.fnmatch(module, f"*{p}*") for p in patterns)


def dequantized_model(folder: Path, dtype: torch.dtype):
    """The load stage's reference: the checkpoint's weights dequantized (fp8 · weight_scale), in `dtype`."""
    from builder.quantize.checkpoint import read_fp8_checkpoint

    return read_fp8_checkpoint(folder, dtype).model


def convert(
    pre: PreQuantized, out: Path, exclude: list[str], kv_fp8: bool, say: Callable[[str], None] = lambda _m: None
) -> dict[str, Any]:
    """Write the quantize stage's output for `pre` into `out` (see the module docstring); returns facts."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    from builder.quantize.checkpoint import scan_fp8_checkpoint

    scan = scan_fp8_checkpoint(pre.folder)
    if kv_fp8 and set(scan.kv_scales) != set(range(scan.cfg.num_hidden_layers)):
        raise UserError(
            "kv_cache: fp8 needs k/v scales for every layer; the checkpoint has them for "
            f"{len(scan.kv_scales)} of {scan.cfg.num_hidden_layers}",
            location=str(pre.folder),
            field="quantization.kv_cache",
            allowed="model_dtype",
        )
    dequant = sorted(m for m in scan.scales if excluded(m, exclude))
    keep = {m: s for m, s in scan.scales.items() if m not in dequant}
    plan = _shared_scales(keep)  # module -> (weight scale, input scale) to write
    requantized = sorted(m for m, (w, _) in plan.items() if w != keep[m][0])
    kv_names = {
        key: f"model.layers.{i}.self_attn.{p}_proj.{p}_scale"
        for i, pair in scan.kv_keys.items()
        for p, key in zip("kv", pair)
    }

    def tensors() -> Any:
        for key, file in sorted(scan.files.items()):
            with safe_open(str(file), framework="pt", device="cpu") as f:
                t = f.get_tensor(key)
            module, _, leaf = key.rpartition(".")
            if key in kv_names:
                if kv_fp8:
                    yield kv_names[key], t.float().reshape(())
            elif module in scan.scales and leaf in ("weight_scale", "input_scale"):
                if module in plan:
                    yield key, torch.tensor(plan[module][0 if leaf == "weight_scale" else 1], dtype=torch.float32)
            elif module in dequant and leaf == "weight":
                yield key, t.float() * torch.tensor(scan.scales[module][0], dtype=torch.float32)
            elif module in requantized and leaf == "weight":
                yield key, requantize(t, scan.scales[module][0], plan[module][0])
            else:
                yield key, t

    out.mkdir(parents=True, exist_ok=True)
    shards, shard, size = [], {}, 0
    for key, t in tensors():
        shard[key] = t.contiguous()
        size += t.numel() * t.element_size()
        if size >= SHARD_BYTES:
            shards.append(shard)
            shard, size = {}, 0
    if shard or not shards:
        shards.append(shard)
    names = (
        ["model.safetensors"]
        if len(shards) == 1
        else [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    )
    for name, part in zip(names, shards):
        say(f"writing {name} ({len(part)} tensors)")
        save_file(part, str(out / name), metadata={"format": "pt"})
    if len(shards) > 1:
        index = {"metadata": {}, "weight_map": {k: n for n, part in zip(names, shards) for k in part}}
        (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    _write_configs(pre, scan, out, dequant, kv_fp8)
    return {
        "source": "pre-quantized",
        "checkpoint": str(pre.folder),
        "producer": pre.producer,
        "requantized": requantized,
        "dequantized": dequant,
        "kv_scales": "kept" if kv_fp8 else "dropped" if scan.kv_scales else "none",
    }


def requantize(w: torch.Tensor, s_part: float, s: float) -> torch.Tensor:  # [out, in] float8 -> same, grid s
    """e4m3(float32(float32(w · s_part) / s)), torch's round-to-nearest-even cast; s >= s_part keeps |·| <= 448."""
    import torch

    deq = w.to(torch.float32) * torch.tensor(s_part, dtype=torch.float32)
    return (deq / torch.tensor(s, dtype=torch.float32)).to(torch.float8_e4m3fn)


def _shared_scales(scales: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    """Each FP8 module's (weight, input) scale to write: the max over its fused group's FP8 members."""
    out = dict(scales)
    for module in scales:
        parent, _, leaf = module.rpartition(".")
        group = next((g for p, g in FUSED if parent.endswith(p) and leaf in g), None)
        if group is None:
            continue
        members = [f"{parent}.{g}" for g in group if f"{parent}.{g}" in scales]
        out[module] = (max(scales[m][0] for m in members), max(scales[m][1] for m in members))
    return out


def _write_configs(pre: PreQuantized, scan: Fp8Scan, out: Path, dequant: list[str], kv_fp8: bool) -> None:
    """config.json and hf_quant_config.json as modelopt writes them, updated for what changed; the rest copied."""
    quant = dict(scan.quant_config["quantization"])
    quant["kv_cache_quant_algo"] = "FP8" if kv_fp8 else None
    quant["exclude_modules"] = sorted({*quant.get("exclude_modules", []), *dequant})
    hf_quant = {"producer": scan.quant_config.get("producer", {}), "quantization": quant}
    (out / QUANT_CONFIG).write_text(json.dumps(hf_quant, indent=4) + "\n", encoding="utf-8")
    config = json.loads((pre.folder / "config.json").read_text(encoding="utf-8"))
    qc = config.get("quantization_config")
    if isinstance(qc, dict):
        qc = dict(qc)
        for key in ("exclude_modules", "ignore"):
            if key in qc:
                qc[key] = quant["exclude_modules"]
        if not kv_fp8:
            qc.pop("kv_cache_scheme", None)
            if "kv_cache_quant_algo" in qc:
                qc["kv_cache_quant_algo"] = None
        config["quantization_config"] = qc
    else:
        config["quantization_config"] = {"quant_method": "modelopt", **quant}
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    for name in ("generation_config.json",):
        if (pre.folder / name).is_file():
            shutil.copyfile(pre.folder / name, out / name)
