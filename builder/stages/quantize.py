"""quantize: modelopt FP8 PTQ of the target (`builder.quantize`), planned when the recipe quantizes.

Output: modelopt's unified HF checkpoint as `export_hf_checkpoint` writes it (config.json with
`quantization_config`, hf_quant_config.json, generation_config.json, model*.safetensors: FP8 weights with
weight_scale / input_scale, k/v scales for an FP8 KV cache) and `quantize.json` (calibration source and
shape, quantizer counts, scale ranges). The export stage reads it (`builder.quantize.checkpoint`).
Draft parts (Medusa heads, the EAGLE draft) stay in the model dtype: the recipe must exclude them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from builder.errors import UserError
from builder.stages.context import StageContext
from builder.stages.parts import Parts

QUANTIZE_INFO = "quantize.json"
DRAFT_PATTERNS = {"medusa": "medusa_heads", "eagle": "eagle_draft"}


def check_drafts(method: str, exclude: list[str]) -> None:
    """Quantized draft parts are not built yet: the recipe must keep its draft in the model dtype."""
    pattern = DRAFT_PATTERNS.get(method)
    if pattern is not None and pattern not in exclude:
        raise UserError(f"FP8 {method} draft parts are not supported yet; keep {pattern!r} in exclude_modules",
                        field="quantization.exclude_modules", allowed=f"a list containing {pattern!r}")  # fmt: skip


def run(ctx: StageContext, out: Path) -> None:
    from builder.quantize import ptq
    from builder.quantize.calibration import calibration_ids
    from builder.quantize.checkpoint import read_fp8_checkpoint
    from builder.stages.decoders import load_tokenizer

    recipe = ctx.loaded.recipe
    q, cal = recipe.quantization, recipe.quantization.calibration
    parts = Parts(ctx.loaded, recipe.speculative.method)
    check_drafts(parts.method, q.exclude_modules)
    tok = load_tokenizer(parts.tokenizer_dir())
    base = ctx.loaded.dir_of(("quantization", "calibration", "source"))
    ctx.say(f"calibration text: {cal.num_samples} × {cal.seq_len} tokens from {cal.source}")
    samples = calibration_ids(tok, cal.source, base, cal.num_samples, cal.seq_len)
    ctx.say(f"loading {parts.base_dir()} (HF, fp32)")
    model = ptq.load_hf(parts.base_dir())
    cfg = ptq.quant_config(q.mode, q.kv_cache, q.exclude_modules)
    ptq.calibrate(model, cfg, samples, progress=lambda i, n: ctx.say(f"calibrating (modelopt): batch {i}/{n}"))
    counts = ptq.summary(model)
    ctx.say("writing modelopt's unified FP8 checkpoint")
    ptq.export(model, out)
    ckpt = read_fp8_checkpoint(out)  # the strict read is the check
    w = [float(np.max(l.weight_scale)) for l in ckpt.spec.linears.values()]
    a = [float(l.input_scale) for l in ckpt.spec.linears.values()]
    kv = [s for pair in ckpt.spec.kv_scales.values() for s in pair]
    info = {"mode": q.mode, "kv_cache": q.kv_cache, "exclude_modules": list(q.exclude_modules),
            "calibration": {"source": cal.source, "num_samples": cal.num_samples, "seq_len": cal.seq_len},
            "quantizers": counts, "quantized_linears": len(ckpt.spec.linears), "kv_layers": len(ckpt.spec.kv_scales),
            "scales": {"weight": _range(w), "input": _range(a), "kv": _range(kv)},
            "quant_config": ckpt.quant_config}  # fmt: skip
    (out / QUANTIZE_INFO).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    ctx.info.update({k: info[k] for k in ("quantizers", "quantized_linears", "kv_layers", "scales")})


def _range(xs: list[float]) -> list[float] | None:
    return [min(xs), max(xs)] if xs else None
