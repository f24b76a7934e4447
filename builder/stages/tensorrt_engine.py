"""engine (target.backend: tensorrt): TensorRT engines from the export stage's TensorRT-form graphs.

engine.json of backend "tensorrt" (`builder.engines.tensorrt.folder`, `builder.handoffs.TensorrtEngineJson`), built
only where TensorRT ≥ 10.15 imports — elsewhere the stage stops with `NeedsGpu` (exit code 3, saying why) after
everything before it is cached. Last, the draft budget table is measured on that GPU with the engines just built
(`builder.stages.draft_budget`, as the ONNX Runtime stage does on the CPU): the rule the served loop applies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builder.handoffs import SourceJson, TensorrtEngineInfo, TensorrtEngineJson
from builder.recipe.loader import LoadedRecipe
from builder.stages.inputs import gpu_engine_host
from builder.stages.stage import Backend, NeedsGpu, Stage, StageContext


def run(ctx: StageContext, out: Path) -> None:
    from builder.engines.tensorrt.probe import missing

    target = ctx.loaded.recipe.target
    reason = missing()
    if reason is not None:
        raise NeedsGpu(
            f"target {target.device} builds TensorRT engines, which needs TensorRT >= 10.15 on a GPU host ({reason})"
        )
    from builder.engines.tensorrt.folder import TensorrtBuildSettings, build_folder
    from builder.recipe.gpus import GPUS

    build = ctx.loaded.recipe.build
    source = SourceJson.read(ctx.upstream["load"], str(ctx.loaded.path))
    settings = TensorrtBuildSettings(
        str(ctx.loaded.path),
        target.device,
        GPUS[target.device].compute_capability,
        build.max_batch_size,
        build.max_input_len,
    )
    meta = build_folder(ctx.upstream["export"], source.to_json(), settings, out, say=ctx.say)
    TensorrtEngineJson.read(out, str(ctx.loaded.path))  # what build_folder wrote is what serving reads
    ctx.info = TensorrtEngineInfo(
        variant=meta["variant"],
        tensorrt=meta["tensorrt"],
        engine_bytes={k: e["engine_bytes"] for k, e in meta["engines"].items()},
    )
    # the draft budget rule, measured on this GPU with the engines just built (as serving opens them)
    from builder.engines.folder import open_engine
    from builder.stages.draft_budget import measure_into

    ctx.info.draft_budget = measure_into(ctx, out, open_engine(out, max_batch_size=build.max_batch_size))
    TensorrtEngineJson.read(out, str(ctx.loaded.path))


def inputs(loaded: LoadedRecipe, _backend: Backend) -> dict[str, Any]:
    """The GPUs of the host it is built on: an engine is built for one."""
    return gpu_engine_host(loaded)


STAGE = Stage(
    name="engine",
    description="ORT sessions (cpu) | TensorRT + tree_verify (GPU)",
    reads=("target", "parallelism", "build"),
    tools=("onnxruntime", "onnx", "tensorrt"),
    needs=("load", "export"),
    run=run,
    info=TensorrtEngineInfo,
    output=TensorrtEngineJson,
    inputs=inputs,
)
