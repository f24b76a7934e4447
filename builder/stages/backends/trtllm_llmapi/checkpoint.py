"""checkpoint (trtllm-llmapi): the folders TensorRT-LLM's PyTorch flow serves, on the CPU.

model/: the quantize stage's modelopt unified FP8 checkpoint when the recipe quantizes (calibrated, or a
pre-quantized `model.checkpoint`'s own FP8 bytes and scales), else the load stage's HF checkpoint; plus the
tokenizer's files. draft/: the EAGLE-3 draft with `draft_vocab_size` and its aux layers in config.json
(`builder.trtllm.llmapi.checkpoint`). Hard links into the cache; checkpoint.json records files and facts.
"""

# trtllm: the trtllm-llmapi backend's checkpoint stage (builder/stages/backends/trtllm_llmapi)

from __future__ import annotations

from pathlib import Path
from typing import Any

from builder.handoffs import SourceJson, StageInfo
from builder.recipe.loader import LoadedRecipe
from builder.stages.inputs import tree_contents
from builder.stages.stage import Backend, Stage, StageContext


class LlmapiCheckpointInfo(StageInfo):
    quantization: dict[str, Any] | None
    aux_layers: list[int] | None
    draft_vocab_size: int | None
    total_bytes: int


def run(ctx: StageContext, out: Path) -> None:
    from builder.stages.load import safetensors_dir
    from builder.trtllm.llmapi.checkpoint import assemble
    from builder.trtllm.llmapi.draft import draft_facts

    recipe = ctx.loaded.recipe
    source = SourceJson.read(ctx.upstream["load"], str(ctx.loaded.path))
    fp8 = ctx.upstream.get("quantize")
    model_src = fp8 or safetensors_dir(ctx.upstream["load"], "model") or Path(source.model.dir)
    draft_src = aux = vocab = None
    if source.draft is not None:
        draft_src = safetensors_dir(ctx.upstream["load"], "draft") or Path(source.draft.dir)
        layers = int(source.architecture["num_hidden_layers"])
        aux, vocab = draft_facts(getattr(recipe.speculative, "aux_layers", None), Path(source.draft.dir), layers)
    ctx.say(f"linking {'the FP8 checkpoint' if fp8 else model_src} for TensorRT-LLM {recipe.trtllm.version}")
    facts = assemble(out, Path(model_src), Path(source.tokenizer), draft_src, aux, vocab)
    total = sum(f["bytes"] for f in facts["model"] + facts.get("draft", []))
    ctx.info = LlmapiCheckpointInfo(
        quantization=facts["quantization"],
        aux_layers=facts.get("aux_layers"),
        draft_vocab_size=facts.get("draft_vocab_size"),
        total_bytes=total,
    )


def inputs(loaded: LoadedRecipe, _backend: Backend) -> dict[str, Any]:
    return tree_contents(loaded)


STAGE = Stage(
    name="checkpoint",
    description="HF checkpoint (modelopt unified FP8) + EAGLE-3 draft folders for TensorRT-LLM's PyTorch flow",
    reads=("model", "speculative", "trtllm.version"),
    tools=("safetensors",),
    needs=("load",),
    optional=("quantize",),
    run=run,
    info=LlmapiCheckpointInfo,
    inputs=inputs,
)
