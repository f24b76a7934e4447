"""engine: `trtllm-build` over the checkpoint stage's folder, on a GPU host.

The exact command (`builder.trtllm.build_cmd`) is written beside the engine as build.sh + build.json
(`builder.handoffs.TrtllmBuildJson`: every flag with the recipe field it comes from; build.sh here is the bare
command, a record — the bundle's build.sh also locks). It runs only where `tensorrt_llm` of the recipe's pinned
release imports and a GPU of the recipe's compute capability is present (`builder.trtllm.engine.probe`);
elsewhere the stage stops with `NeedsGpu` (exit 3) after load, quantize and checkpoint are cached, and
`trtspec deploy` writes the same command into a bundle for that host. engine.json records the TensorRT-LLM
and TensorRT versions, the GPU the engine was built on and every file's sha256 (the serve-time lock:
`builder.trtllm.compat`, the same code the bundle's build.sh runs as check_engine.py, so both write one format).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builder.handoffs import TrtllmBuildJson, TrtllmEngineInfo
from builder.recipe.loader import LoadedRecipe
from builder.recipe.resolve import tree_field
from builder.stages.inputs import gpu_engine_host, tree_contents
from builder.stages.stage import Backend, NeedsGpu, Stage, StageContext


def run(ctx: StageContext, out: Path) -> None:
    from builder.trtllm.build_cmd import build_command, write_build_script
    from builder.trtllm.engine import build_engine, engine_manifest, probe, write_engine_manifest

    recipe = ctx.loaded.recipe
    cmd = build_command(
        recipe, str(ctx.upstream["checkpoint"]), str(out), tree_dir=ctx.loaded.dir_of(tree_field(recipe))
    )
    reason = probe(recipe)
    if reason is not None:
        raise NeedsGpu(
            f"the trtllm engine stage runs trtllm-build, which needs TensorRT-LLM {recipe.trtllm.version} "
            f"on a {recipe.target.device} host ({reason}); `trtspec deploy` writes the checkpoint, "
            "build.sh and the repository for that host"
        )
    from builder.errors import UserError
    from builder.trtllm.compat import installed_here
    from builder.trtllm.engine import BuildFailed

    try:
        build_engine(cmd, out, ctx.say)
    except BuildFailed as exc:  # trtllm-build's own refusal or crash: its log's last lines, nothing kept
        raise UserError(f"trtllm-build failed: {exc}", field="engine") from None
    write_build_script(cmd, out, lock=False)  # the record; engine.json is written right here
    TrtllmBuildJson.read(out, str(ctx.loaded.path))
    manifest = engine_manifest(cmd, out, installed_here())
    write_engine_manifest(out, manifest)
    ctx.info = TrtllmEngineInfo(
        trtllm=manifest.get("tensorrt_llm"),
        tensorrt=manifest.get("tensorrt"),
        gpu=manifest.get("gpu"),
        world_size=cmd.target["world_size"],
    )


def inputs(loaded: LoadedRecipe, _backend: Backend) -> dict[str, Any]:
    """The tree's contents; the GPUs of the host it is built on (an engine is built for one)."""
    return {**tree_contents(loaded), **gpu_engine_host(loaded)}


STAGE = Stage(
    name="engine",
    description="trtllm-build (GPU host with TensorRT-LLM)",
    reads=("target", "parallelism", "build", "speculative", "trtllm"),
    tools=("tensorrt-llm", "tensorrt"),
    needs=("checkpoint",),
    run=run,
    info=TrtllmEngineInfo,
    output=TrtllmBuildJson,
    inputs=inputs,
)
