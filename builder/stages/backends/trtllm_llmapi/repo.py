"""repo (trtllm-llmapi): the LLM-API options file and the Triton `llmapi` repository around the checkpoint stage's
folders, with their paths on this host (`trtspec deploy` renders the same with the container's paths).

llm_api_options.yaml: trtllm-serve's `--extra_llm_api_options` (`builder.trtllm.llmapi.options`);
triton/tensorrt_llm/{config.pbtxt, 1/model.yaml}: upstream's llmapi model without its model.py, which the launch
copies from the container (`builder.trtllm.llmapi.repo`).
"""

# trtllm: the trtllm-llmapi backend's repo stage (builder/stages/backends/trtllm_llmapi)

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from builder.handoffs import StageInfo
from builder.recipe.loader import LoadedRecipe
from builder.recipe.resolve import tree_field
from builder.stages.inputs import tree_contents
from builder.stages.stage import Backend, Stage, StageContext

OPTIONS = "llm_api_options.yaml"


class LlmapiRepoInfo(StageInfo):
    model: str
    decoding_type: str | None
    options: list[str]


def run(ctx: StageContext, out: Path) -> None:
    from builder.trtllm.llmapi.options import llm_options
    from builder.trtllm.llmapi.repo import render_repository

    recipe = ctx.loaded.recipe
    ckpt = ctx.upstream["checkpoint"]
    facts = json.loads((ckpt / "checkpoint.json").read_text(encoding="utf-8"))
    aux = tuple(facts["aux_layers"]) if facts.get("aux_layers") else None
    draft = str(ckpt / "draft") if (ckpt / "draft").is_dir() else None
    options = llm_options(recipe, draft, aux, ctx.loaded.dir_of(tree_field(recipe)))
    out.mkdir(parents=True, exist_ok=True)
    (out / OPTIONS).write_text(yaml.safe_dump(options, sort_keys=False), encoding="utf-8")
    ctx.say("writing the Triton llmapi repository")
    render_repository(out / "triton", str(ckpt / "model"), options, recipe.triton.decoupled)
    spec = options.get("speculative_config") or {}
    ctx.info = LlmapiRepoInfo(
        model=str(ckpt / "model"), decoding_type=spec.get("decoding_type"), options=sorted(options)
    )


def inputs(loaded: LoadedRecipe, _backend: Backend) -> dict[str, Any]:
    return tree_contents(loaded)


STAGE = Stage(
    name="repo",
    description="LLM-API options file + Triton llmapi repository (TensorRT-LLM PyTorch flow)",
    reads=("triton", "trtllm", "speculative", "build", "parallelism", "quantization.kv_cache"),
    tools=("tritonclient",),
    needs=("checkpoint",),
    run=run,
    info=LlmapiRepoInfo,
    inputs=inputs,
)
