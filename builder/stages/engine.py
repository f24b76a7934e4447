"""engine: a self-contained engine folder for the recipe's target.

cpu: the ONNX Runtime-ready graphs (hard links to the export stage's files where the filesystem allows,
else copies), the tokenizer, and engine.json (see `builder.engines.ort.load`); the sessions are opened
once as a check. GPU targets: TensorRT engines from the export stage's TensorRT-form graphs, with
engine.json of backend "tensorrt" (`builder.engines.tensorrt.folder`), built only where TensorRT ≥ 10.15
imports — elsewhere the stage stops with `NeedsGpu` (exit code 3, saying why) after everything before
it is cached.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from builder.files import link_or_copy
from builder.stages.context import NeedsGpu, StageContext
from builder.stages.manifest import tool_versions


def run(ctx: StageContext, out: Path) -> None:
    if ctx.loaded.recipe.target.engine_backend == "trtllm":
        from builder.stages.trtllm_engine import run as run_trtllm

        run_trtllm(ctx, out)
        return
    if ctx.loaded.recipe.target.device != "cpu":
        _gpu(ctx, out)
        return
    from builder.engines.ort.load import ENGINE_JSON, FORMAT, open_engine
    from builder.stages.export import EXPORT_INFO
    from builder.stages.load import SOURCE

    exp, src = ctx.upstream["export"], ctx.upstream["load"]
    info = json.loads((exp / EXPORT_INFO).read_text(encoding="utf-8"))
    source = json.loads((src / SOURCE).read_text(encoding="utf-8"))
    files = {}
    for name, stem in (("greedy", "target-greedy"), ("rejection", "target-rejection"), ("eagle", "eagle")):
        folder = exp / stem
        if not folder.is_dir():
            continue
        for f in folder.iterdir():
            if f.suffix in (".data",) or f.name.endswith(".ort.onnx"):
                link_or_copy(f, out / stem / f.name)
        files[name] = f"{stem}/{next(f.name for f in folder.iterdir() if f.name.endswith('.ort.onnx'))}"
    tok = Path(source["tokenizer"]) / "tokenizer.json"
    shutil.copy2(tok, out / "tokenizer.json")
    a = source["architecture"]
    meta = {
        "format": FORMAT, "backend": "onnxruntime", "variant": info["variant"], "recipe": str(ctx.loaded.path),
        "capacity": info["capacity"], "max_seq_len": info["max_seq_len"],
        "max_batch_size": ctx.loaded.recipe.build.max_batch_size,
        "model": {"layers": a["num_hidden_layers"], "kv_heads": a["num_key_value_heads"], "head_dim": a["head_dim"],
                  "hidden": a["hidden_size"], "vocab": a["vocab_size"]},
        "target": {"greedy": files["greedy"], "rejection": files.get("rejection")},
        "medusa": info["medusa"],
        "eagle": None if info["eagle"] is None else {"graph": files["eagle"], **info["eagle"]},
        "drafter": info["drafter"], "tokenizer": "tokenizer.json", "stop_ids": source["stop_ids"],
        "versions": tool_versions("onnxruntime", "onnx"),
    }  # fmt: skip
    (out / ENGINE_JSON).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    ctx.say("opening the sessions once (check)")
    opened = open_engine(out)
    ctx.info.update(variant=info["variant"], label=opened.label, kv_bytes=opened.engine.kv.nbytes)


def _gpu(ctx: StageContext, out: Path) -> None:
    """TensorRT engines from the export stage's TensorRT-form graphs (`builder.engines.tensorrt.folder`)."""
    from builder.engines.tensorrt.probe import missing

    target = ctx.loaded.recipe.target
    if target.engine_backend != "tensorrt":
        from builder.errors import UserError

        raise UserError(f"backend {target.engine_backend} is not built by trtspec yet", field="target.backend",
                        allowed="tensorrt")  # fmt: skip
    reason = missing()
    if reason is not None:
        raise NeedsGpu(f"target {target.device} builds TensorRT engines, which needs TensorRT >= 10.15 on a GPU host "
                       f"({reason})")  # fmt: skip
    from builder.engines.tensorrt.folder import Settings, build_folder
    from builder.recipe.gpus import GPUS
    from builder.stages.load import SOURCE

    build = ctx.loaded.recipe.build
    source = json.loads((ctx.upstream["load"] / SOURCE).read_text(encoding="utf-8"))
    settings = Settings(str(ctx.loaded.path), target.device, GPUS[target.device].compute_capability,
                        build.max_batch_size, build.max_input_len)  # fmt: skip
    meta = build_folder(ctx.upstream["export"], source, settings, out, say=ctx.say)
    ctx.info.update(variant=meta["variant"], tensorrt=meta["tensorrt"],
                    engine_bytes={k: e["engine_bytes"] for k, e in meta["engines"].items()})  # fmt: skip
