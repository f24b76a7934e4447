"""engine (target.backend: onnxruntime): a self-contained ONNX Runtime engine folder for a cpu target.

The ONNX Runtime-ready graphs (hard links to the export stage's files where the filesystem allows, else copies),
the tokenizer, and engine.json (`builder.handoffs.OrtEngineJson`; opened by `builder.engines.ort.load`); the
sessions are opened once as a check. Then step(T) is timed on this host for every tree size the engine has room
for and every batch size up to build.max_batch_size (and the EAGLE draft graph's calls), as TensorRT times
tactics, and recorded as engine.json's "step_curve" (`builder.engines.step_curve`): the cost `trtspec tune` weighs
E[τ] by. Last, the decoding loop itself is timed per draft budget and batch size over the recipe's calibration
prompts: engine.json's "draft_budget" (`builder.engines.draft_budget`), the rule that picks each step's budget. GPU targets build TensorRT engines instead (`builder.stages.tensorrt_engine`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from builder.files import link_or_copy
from builder.handoffs import EngineGraph, ExportJson, ModelShape, OrtEngineInfo, OrtEngineJson, OrtTargets, SourceJson
from builder.stages.draft_budget import measure_into
from builder.stages.manifest import tool_versions
from builder.stages.stage import Stage, StageContext

GRAPHS = (
    ("greedy", "target-greedy", "target"),
    ("rejection", "target-rejection", "target"),
    ("eagle", "eagle", "eagle"),
)


def run(ctx: StageContext, out: Path) -> None:
    from builder.engines.ort.load import open_ort_engine

    recipe = str(ctx.loaded.path)
    exp, src = ctx.upstream["export"], ctx.upstream["load"]
    info, source = ExportJson.read(exp, recipe), SourceJson.read(src, recipe)
    files = {}
    for name, stem, graph in GRAPHS:
        folder = exp / stem
        if not folder.is_dir():
            continue
        for f in folder.iterdir():
            if f.suffix in (".data",) or f.name.endswith(".ort.onnx"):
                link_or_copy(f, out / stem / f.name)
        files[name] = f"{stem}/{graph}.ort.onnx"
        if (folder / f"{graph}.plain.ort.onnx").is_file():  # the plain-steps twin (builder.export.verify.plain_twin)
            files[f"{name}_plain"] = f"{stem}/{graph}.plain.ort.onnx"
    shutil.copy2(Path(source.tokenizer) / "tokenizer.json", out / "tokenizer.json")
    a = source.architecture
    meta = OrtEngineJson(
        format=OrtEngineJson.FORMAT,
        backend="onnxruntime",
        variant=info.variant,
        recipe=recipe,
        capacity=info.capacity,
        max_seq_len=info.max_seq_len,
        max_batch_size=ctx.loaded.recipe.build.max_batch_size,
        model=ModelShape(
            layers=a["num_hidden_layers"],
            kv_heads=a["num_key_value_heads"],
            head_dim=a["head_dim"],
            hidden=a["hidden_size"],
            vocab=a["vocab_size"],
        ),
        target=OrtTargets(
            greedy=files["greedy"], rejection=files.get("rejection"), greedy_plain=files.get("greedy_plain")
        ),
        medusa=info.medusa,
        eagle=None if info.eagle is None else EngineGraph(graph=files["eagle"], **info.eagle.model_dump()),
        drafter=info.drafter,
        tokenizer="tokenizer.json",
        stop_ids=source.stop_ids,
        versions=tool_versions("onnxruntime", "onnx"),
    )
    meta.write(out)
    ctx.say("opening the sessions once (check)")
    opened = open_ort_engine(out)
    ctx.info = facts = OrtEngineInfo(variant=info.variant, label=opened.label, kv_bytes=opened.engine.kv.nbytes)
    facts.step_curve = _step_curve(ctx, out, meta)
    facts.draft_budget = measure_into(ctx, out, open_ort_engine(out, max_batch_size=meta.max_batch_size, threads=1))


def _step_curve(ctx: StageContext, out: Path, meta: OrtEngineJson) -> dict:
    """Time step(T) on this host for every tree size the engine has room for and record the curve in engine.json
    ("step_curve"); its summary for the stage manifest."""
    from builder.engines.step_curve import CURVE_BUDGET_S, measure_folder

    ctx.say("timing step(T) on this host (the step-cost curve)")
    curve = measure_folder(out, meta.max_batch_size, threads=1, budget_s=CURVE_BUDGET_S)
    meta.step_curve = curve
    meta.write(out)
    return {
        "source": "measured",
        "threads": 1,
        "batches": [int(b) for b in curve["target"]],
        "batch1_ms": curve["target"]["1"],
    }


STAGE = Stage(
    name="engine",
    description="ORT sessions (cpu) | TensorRT + tree_verify (GPU)",
    reads=("target", "parallelism", "build"),
    tools=("onnxruntime", "onnx"),
    needs=("load", "export"),
    run=run,
    info=OrtEngineInfo,
    output=OrtEngineJson,
)
