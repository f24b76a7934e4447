"""repo: the inflight_batcher_llm repository around the engine stage's folder.

preprocessing → tensorrt_llm (TensorRT-LLM's C++ backend) → postprocessing, the ensemble named
`triton.model_name` and tensorrt_llm_bls, every config.pbtxt rendered from a ModelConfig protobuf
(`triton_repo.trtllm`), the parameters set from the recipe (`builder.trtllm.repo_settings`), gpt_model_path
= the engine folder on this host. For another host or a container, `trtspec deploy` renders the same
repository with the engine path as that server sees it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builder.handoffs import SourceJson, TrtllmRepoInfo
from builder.recipe.loader import LoadedRecipe
from builder.stages.inputs import tree_contents
from builder.stages.stage import Backend, Stage, StageContext

# the Python-backend model files the repository gets copies of (`triton_repo.trtllm.render.MODEL_FILES`)
MODEL_FILES = (
    "triton_repo.trtllm.models.preprocessing",
    "triton_repo.trtllm.models.postprocessing",
    "triton_repo.trtllm.models.tensorrt_llm_bls",
)


def run(ctx: StageContext, out: Path) -> None:
    from builder.trtllm.repo_settings import repo_settings
    from triton_repo.trtllm.render import render_repository

    source = SourceJson.read(ctx.upstream["load"], str(ctx.loaded.path))
    settings = repo_settings(ctx.loaded, engine_dir=str(ctx.upstream["engine"]))
    ctx.say("writing the inflight_batcher_llm repository")
    facts = render_repository(out, settings, Path(source.tokenizer))
    ctx.info = TrtllmRepoInfo(ensemble=facts["ensemble"], models=facts["models"], decoding_mode=facts["decoding_mode"])


def inputs(loaded: LoadedRecipe, _backend: Backend) -> dict[str, Any]:
    """The tree's contents (the repository's eagle_choices / medusa_choices)."""
    return tree_contents(loaded)


STAGE = Stage(
    name="repo",
    description="inflight_batcher_llm repository (TensorRT-LLM Triton backend)",
    reads=("triton", "trtllm", "speculative", "build", "parallelism", "target"),
    tools=("tritonclient",),
    needs=("load", "engine"),
    run=run,
    info=TrtllmRepoInfo,
    code=MODEL_FILES,
)
