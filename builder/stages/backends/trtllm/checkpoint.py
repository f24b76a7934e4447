"""checkpoint: the TensorRT-LLM 1.2 checkpoint of the recipe, on the CPU.

config.json + rank{N}.safetensors for tp × pp ranks (`builder.trtllm.checkpoint`): the load stage's HF
Llama 3 (+ Medusa heads / EAGLE draft), or the quantize stage's FP8 checkpoint when the recipe quantizes
(calibrated, or made from a pre-quantized modelopt `model.checkpoint`: the same layout, one weight scale per
fused group, so the writer copies its FP8 bytes and scales), split and named as TensorRT-LLM's own conversion
does. `checkpoint.json` records the facts (mapping, per-rank files, quantization) the engine stage and
`trtspec deploy` read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from builder.handoffs import CheckpointInfo
from builder.recipe.loader import LoadedRecipe
from builder.recipe.resolve import max_draft_len, tree_field
from builder.stages.inputs import tree_contents
from builder.stages.parts import DTYPES, Parts
from builder.stages.stage import Backend, Stage, StageContext
from builder.trtllm.checkpoint.drafts import draft_of
from builder.trtllm.flow import engine_flow

CHECKPOINT_INFO = "checkpoint.json"


def request(ctx: StageContext):
    """The CheckpointRequest for the recipe (the upstream quantize stage's FP8 checkpoint when it ran); a method's
    draft adds its folder, max_draft_len and its own fields (`Draft.request` of the resolved section)."""
    from builder.stages.load import safetensors_dir  # the load stage's copy of a pickled checkpoint, if any
    from builder.trtllm.checkpoint import CheckpointRequest

    recipe = ctx.loaded.recipe
    spec, par = recipe.speculative, recipe.parallelism
    parts = Parts(ctx.loaded, spec.method)
    draft = draft_of(engine_flow(spec.method))  # validate refused an unserved method first; so does this
    extra: dict = {}
    if draft is not None:
        extra["draft_dir"] = safetensors_dir(ctx.upstream["load"], "draft") or parts.draft_dir()
        extra["max_draft_len"] = max_draft_len(recipe, ctx.loaded.dir_of(tree_field(recipe)))
        extra.update(draft.request(parts.drafter_config()))
    return CheckpointRequest(
        base_dir=safetensors_dir(ctx.upstream["load"], "model") or parts.base_dir(),
        tp=par.tp,
        pp=par.pp,
        dtype=DTYPES[recipe.model.dtype],
        method=spec.method,
        fp8_dir=ctx.upstream.get("quantize"),
        kv_cache_fp8=recipe.quantization.kv_cache == "fp8",
        use_parallel_embedding=recipe.trtllm.use_parallel_embedding,
        **extra,
    )


def run(ctx: StageContext, out: Path) -> None:
    from builder.trtllm.checkpoint import convert_checkpoint

    req = request(ctx)
    source = "the quantize stage's FP8 checkpoint" if req.fp8_dir else str(req.base_dir)
    ctx.say(f"converting {source} for tp={req.tp} pp={req.pp} ({req.dtype})")
    facts = convert_checkpoint(req, out, say=ctx.say)
    (out / CHECKPOINT_INFO).write_text(json.dumps(facts, indent=2, default=str) + "\n", encoding="utf-8")
    ctx.info = CheckpointInfo(
        mapping=facts.get("mapping"),
        quantization=facts.get("quantization"),
        total_bytes=facts.get("total_bytes"),
        max_draft_len=facts.get("max_draft_len"),
    )


def inputs(loaded: LoadedRecipe, _backend: Backend) -> dict[str, Any]:
    """The tree's contents (not only its name or file path)."""
    return tree_contents(loaded)


STAGE = Stage(
    name="checkpoint",
    description="TensorRT-LLM checkpoint: config.json + rank{N}.safetensors (TP/PP, FP8)",
    reads=(
        "model",
        "speculative",
        "parallelism",
        "build.max_draft_len",
        "trtllm.version",
        "trtllm.use_parallel_embedding",
    ),
    tools=("torch", "safetensors"),
    needs=("load",),
    optional=("quantize",),
    run=run,
    info=CheckpointInfo,
    inputs=inputs,
)
