"""engine: a self-contained engine folder for the recipe's target.

cpu: the ONNX Runtime-ready graphs (hard links to the export stage's files where the filesystem allows,
else copies), the tokenizer, and engine.json (see `builder.engines.ort.load`); the sessions are opened
once as a check. GPU targets: TensorRT engines, built only where TensorRT is installed — elsewhere
the stage stops with `NeedsGpu` (exit code 3) after everything before it is cached.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from builder.stages.context import NeedsGpu, StageContext
from builder.stages.manifest import tool_versions


def _place(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def run(ctx: StageContext, out: Path) -> None:
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
                _place(f, out / stem / f.name)
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
        "target": {"greedy": files["greedy"], "rejection": files["rejection"]},
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
    try:
        import tensorrt  # noqa: F401

        ready = hasattr(tensorrt, "Builder")  # tensorrt-stubs alone installs an empty namespace package
    except ImportError:
        ready = False
    if not ready:
        raise NeedsGpu(f"target {ctx.loaded.recipe.target.device} needs TensorRT (a GPU host) to build its engine")
    raise NeedsGpu("the TensorRT engine adapter is not part of this build yet")
