"""quantize: FP8 for the target (`builder.quantize`), planned when the recipe quantizes.

Two sources, one output:
* calibrated (an unquantized `model.checkpoint`): modelopt PTQ (`builder.quantize.ptq`) — on this host's CUDA
  devices in `model.dtype` when it has any (the model spread over up to `target.gpus` of them), else on the CPU
  in float32 (`builder.quantize.placement`; refused with exit 2 before loading when it cannot fit) — then one
  weight scale per fused group (q/k/v, gate/up) and modelopt's own export: each weight quantized once;
* pre-quantized (`model.checkpoint` is a modelopt FP8 checkpoint, `builder.quantize.prequantized`): no
  calibration; its bytes and scales, requantized only where a fused group's scales differ.
Output: modelopt's unified HF checkpoint (config.json with `quantization_config`, hf_quant_config.json,
model*.safetensors: FP8 weights with weight_scale / input_scale, k/v scales for an FP8 KV cache) and
`quantize.json` (source: calibrated | pre-quantized, calibration source and shape, where PTQ ran, the modelopt
version and the supported range, quantizer counts, scale ranges). The export stage and the TensorRT-LLM
checkpoint stage read it (`builder.quantize.checkpoint`); this stage checks it from the headers and scales
(`scan_fp8_checkpoint`). Draft parts (Medusa heads, the EAGLE draft) stay in the model dtype: the recipe must
exclude them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from builder.errors import UserError
from builder.handoffs import QuantizeInfo
from builder.recipe.schema import Recipe
from builder.speculative import registry
from builder.stages.parts import DTYPES, Parts
from builder.stages.stage import Stage, StageContext

QUANTIZE_INFO = "quantize.json"


def check_drafts(method: str, exclude: list[str]) -> None:
    """Quantized draft parts are not built yet: the recipe must keep its draft (its `DraftCheckpoint.module`) in the
    model dtype."""
    draft = registry.get(method).draft
    pattern = None if draft is None else draft.module
    if pattern is not None and pattern not in exclude:
        raise UserError(
            f"FP8 {method} draft parts are not supported yet; keep {pattern!r} in exclude_modules",
            field="quantization.exclude_modules",
            allowed=f"a list containing {pattern!r}",
        )


def run(ctx: StageContext, out: Path) -> None:
    from builder.quantize import prequantized, ptq

    recipe = ctx.loaded.recipe
    q = recipe.quantization
    parts = Parts(ctx.loaded, recipe.speculative.method)
    check_drafts(parts.method, q.exclude_modules)
    base = parts.base_dir()
    pre = prequantized.detect(base)
    modelopt = {"version": ptq.modelopt_version(), "supported": ptq.MODELOPT_RANGE}
    warnings: list[str] = []
    if pre is not None:
        warnings += prequantized.check_recipe(recipe, pre)
        for note in warnings:
            ctx.say(f"warning: {note}")
        ctx.say(f"pre-quantized modelopt FP8 checkpoint {base}: no calibration")
        facts = prequantized.convert(pre, out, list(q.exclude_modules), q.kv_cache == "fp8", say=ctx.say)
        info: dict[str, Any] = {**facts, "calibration": None, "placement": None}
    else:
        modelopt["config_form"] = ptq.config_form(ptq.installed_defaults()[0])
        if not ptq.in_supported_range(modelopt["version"]):
            warnings.append(f"nvidia-modelopt {modelopt['version']} is outside the tested range {ptq.MODELOPT_RANGE}")
            ctx.say(f"warning: {warnings[-1]}")
        info = _calibrate(ctx, parts, out)
    info = {
        **_check(out),
        **info,
        "mode": q.mode,
        "kv_cache": q.kv_cache,
        "exclude_modules": list(q.exclude_modules),
        "modelopt": modelopt,
        "warnings": warnings,
    }  # modelopt's own counts win
    (out / QUANTIZE_INFO).write_text(json.dumps(info, indent=2, default=str) + "\n", encoding="utf-8")
    ctx.info = QuantizeInfo(**{k: info[k] for k in QuantizeInfo.model_fields})


def _calibrate(ctx: StageContext, parts: Parts, out: Path) -> dict[str, Any]:
    """modelopt PTQ where this host allows (module docstring); the quantize.json facts."""
    from builder.quantize import ptq
    from builder.quantize.calibration import calibration_ids
    from builder.quantize.placement import GIB, place
    from builder.stages.parts import load_tokenizer

    recipe = ctx.loaded.recipe
    q, cal = recipe.quantization, recipe.quantization.calibration
    tok = load_tokenizer(parts.tokenizer_dir())
    base = parts.base_dir()
    host = ptq.host_facts()
    want = recipe.target.gpus if recipe.target.device != "cpu" else len(host.gpu_bytes)
    where = place(
        shape_of(base),
        host,
        DTYPES[recipe.model.dtype],
        want,
        cal.seq_len,
        int(recipe.target.runtime_reserve_gib * GIB),
    )
    if not where.fits:
        raise UserError(
            f"PTQ does not fit on this host: {where.describe()}",
            field="quantization.mode",
            allowed="a host with more memory (GPUs: target.gpus), or model.checkpoint set to a modelopt "
            "FP8 checkpoint (no calibration)",
        )
    ctx.say(f"calibration text: {cal.num_samples} × {cal.seq_len} tokens from {cal.source}")
    samples = calibration_ids(
        tok, cal.source, ctx.loaded.dir_of(("quantization", "calibration", "source")), cal.num_samples, cal.seq_len
    )
    ctx.say(f"loading {base} for PTQ on {where.describe()}")
    model = ptq.load_hf(base, allow_pickle=recipe.model.allow_pickle, placement=where)
    cfg = ptq.quant_config(q.mode, q.kv_cache, q.exclude_modules)
    ptq.calibrate(model, cfg, samples, progress=lambda i, n: ctx.say(f"calibrating (modelopt): batch {i}/{n}"))
    counts = ptq.summary(model)
    ctx.say("writing modelopt's unified FP8 checkpoint")
    ptq.export(model, out)
    return {
        "source": "calibrated",
        "quantizers": counts,
        "placement": where.to_json(),
        "calibration": {"source": cal.source, "num_samples": cal.num_samples, "seq_len": cal.seq_len},
    }


def shape_of(base: Path):
    """`placement.LlamaShape` of the HF checkpoint in `base`."""
    from builder.model.config import LlamaConfig
    from builder.quantize.placement import LlamaShape

    c = LlamaConfig.from_json(base / "config.json")
    return LlamaShape(
        c.hidden_size,
        c.num_hidden_layers,
        c.num_attention_heads,
        c.num_key_value_heads,
        c.head_dim,
        c.intermediate_size,
        c.vocab_size,
        c.tie_word_embeddings,
    )


def _check(out: Path) -> dict[str, Any]:
    """The output read back strictly from its headers and scales (the check), as quantize.json facts."""
    from builder.quantize.checkpoint import scan_fp8_checkpoint

    scan = scan_fp8_checkpoint(out)
    w = [s[0] for s in scan.scales.values()]
    a = [s[1] for s in scan.scales.values()]
    kv = [s for pair in scan.kv_scales.values() for s in pair]
    info = {
        "quantized_linears": len(scan.scales),
        "kv_layers": len(scan.kv_scales),
        "scales": {"weight": _range(w), "input": _range(a), "kv": _range(kv)},
        "quant_config": scan.quant_config,
        "quantizers": {"weight": len(w), "input": len(a), "kv": 2 * len(scan.kv_scales)},
    }
    return info


def _range(xs: list[float]) -> list[float] | None:
    return [min(xs), max(xs)] if xs else None


def quantized(recipe: Recipe) -> bool:
    """Whether the recipe quantizes anything (else there is no quantize stage)."""
    return recipe.quantization.mode != "none" or recipe.quantization.kv_cache != "model_dtype"


STAGE = Stage(
    name="quantize",
    description="modelopt FP8 PTQ (weights, activations, KV)",
    reads=("quantization",),
    tools=("torch", "nvidia-modelopt", "transformers"),
    needs=("load",),
    run=run,
    info=QuantizeInfo,
    planned=quantized,
)
