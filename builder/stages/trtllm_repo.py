"""repo (target.backend: trtllm): the inflight_batcher_llm repository around the engine stage's folder.

preprocessing → tensorrt_llm (TensorRT-LLM's C++ backend) → postprocessing, the ensemble named
`triton.model_name` and tensorrt_llm_bls, every config.pbtxt rendered from a ModelConfig protobuf
(`triton_repo.trtllm`), the parameters set from the recipe (`builder.trtllm.repo_settings`), gpt_model_path
= the engine folder on this host. For another host or a container, `trtspec deploy` renders the same
repository with the engine path as that server sees it.
"""

from __future__ import annotations

import json
from pathlib import Path

from builder.stages.context import StageContext


def run(ctx: StageContext, out: Path) -> None:
    from builder.stages.load import SOURCE
    from builder.trtllm.repo_settings import repo_settings
    from triton_repo.trtllm.render import render_repository

    source = json.loads((ctx.upstream["load"] / SOURCE).read_text(encoding="utf-8"))
    settings = repo_settings(ctx.loaded, engine_dir=str(ctx.upstream["engine"]))
    ctx.say("writing the inflight_batcher_llm repository")
    facts = render_repository(out, settings, Path(source["tokenizer"]))
    ctx.info.update(ensemble=facts["ensemble"], models=facts["models"], decoding_mode=facts["decoding_mode"])
