"""load: resolve the checkpoints (local, or already in the local hub cache), check them strictly, record them.

Output `source.json`: the target, tokenizer and draft directories with every file's size and sha256,
the architecture, and the stop token ids. Loading the target and the draft with the strict loaders
is the check (missing/extra keys, shapes, truncated files, pickles refused).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from builder.stages.context import StageContext
from builder.stages.manifest import sha256_file
from builder.stages.parts import Parts, stop_ids

SOURCE = "source.json"


def _files(folder: Path) -> list[dict]:
    return [{"path": str(p.relative_to(folder)), "bytes": p.stat().st_size, "sha256": sha256_file(p)}
            for p in sorted(folder.rglob("*")) if p.is_file()]  # fmt: skip


def run(ctx: StageContext, out: Path) -> None:
    parts = Parts(ctx.loaded, ctx.loaded.recipe.speculative.method)
    ctx.say("resolving checkpoints")
    base, tok = parts.base_dir(), parts.tokenizer_dir()
    ctx.say(f"checking {base}")
    model = parts.model()
    source = {"model": {"dir": str(base), "files": _files(base)}, "tokenizer": str(tok),
              "stop_ids": stop_ids(base), "architecture": dataclasses.asdict(model.cfg)}
    if parts.method in ("medusa", "eagle"):
        draft = parts.draft_dir()
        ctx.say(f"checking the {parts.method} draft {draft}")
        parts.medusa(model) if parts.method == "medusa" else parts.eagle(model, draft_vocab=False)
        source["draft"] = {"dir": str(draft), "files": _files(draft)}
    (out / SOURCE).write_text(json.dumps(source, indent=2) + "\n", encoding="utf-8")
    ctx.info.update(parameters=sum(p.numel() for p in model.parameters()), dtype=str(model.dtype))
