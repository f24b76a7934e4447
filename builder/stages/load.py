"""load: resolve the checkpoints (local, or already in the local hub cache), check them strictly, record them.

Output `source.json`: the target, tokenizer and draft directories with every file's size and sha256,
the architecture, and the stop token ids. Loading the target and the draft with the strict loaders
is the check (missing/extra keys, shapes, truncated files; upstream's pickled files only under
`model.allow_pickle` / `speculative.allow_pickle`, refused naming the field otherwise).

A pickle read under the opt-in is converted to safetensors here, once, when a later stage reads safetensors
only: the trtllm backend's checkpoint converter indexes safetensors headers and streams tensor by tensor.
The copy sits in this stage's output (`safetensors/model`, `safetensors/draft`, named in source.json) and
costs the checkpoint's size again on disk; `trtspec convert-draft` makes it once outside the cache instead.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from builder.stages.context import StageContext
from builder.stages.manifest import sha256_file
from builder.stages.parts import PICKLE_FIELD, Parts, stop_ids

SOURCE = "source.json"
CONVERTED = "safetensors"  # subfolder of the output holding safetensors copies of pickled checkpoints


def _files(folder: Path) -> list[dict]:
    return [
        {"path": str(p.relative_to(folder)), "bytes": p.stat().st_size, "sha256": sha256_file(p)}
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    ]


def safetensors_dir(load_out: Path, role: str) -> Path | None:
    """The load stage's safetensors copy of the "model" or "draft" checkpoint, where it made one (else None:
    read the checkpoint directory itself)."""
    source = json.loads((load_out / SOURCE).read_text(encoding="utf-8"))
    rel = source.get(role, {}).get("safetensors")
    return None if rel is None else load_out / rel


def _convert(ctx: StageContext, folder: Path, role: str, kind: str, out: Path, entry: dict) -> None:
    """Under the trtllm backend, write the safetensors copy of `folder` when its weights are a pickle."""
    from builder.model.pickled import LAYOUTS, pickle_to_read

    if ctx.loaded.recipe.target.engine_backend != "trtllm" or pickle_to_read(folder, LAYOUTS[kind]) is None:
        return
    from builder.model.convert import to_safetensors

    ctx.say(f"writing a safetensors copy of the pickled {role} (read by the trtllm checkpoint stage)")
    field = "model.allow_pickle" if role == "model" else PICKLE_FIELD
    to_safetensors(folder, LAYOUTS[kind], out / CONVERTED / role, allow_pickle=True, opt_in=field)  # loaded above
    entry["safetensors"] = f"{CONVERTED}/{role}"


def run(ctx: StageContext, out: Path) -> None:
    parts = Parts(ctx.loaded, ctx.loaded.recipe.speculative.method)
    ctx.say("resolving checkpoints")
    base, tok = parts.base_dir(), parts.tokenizer_dir()
    ctx.say(f"checking {base}")
    model = parts.model()
    source = {
        "model": {"dir": str(base), "files": _files(base)},
        "tokenizer": str(tok),
        "stop_ids": stop_ids(base),
        "architecture": dataclasses.asdict(model.cfg),
    }
    _convert(ctx, base, "model", "model", out, source["model"])
    if parts.method in ("medusa", "eagle"):
        draft = parts.draft_dir()
        ctx.say(f"checking the {parts.method} draft {draft}")
        parts.medusa(model) if parts.method == "medusa" else parts.eagle(model, draft_vocab=False)
        source["draft"] = {"dir": str(draft), "files": _files(draft)}
        _convert(ctx, draft, "draft", parts.method, out, source["draft"])
    (out / SOURCE).write_text(json.dumps(source, indent=2) + "\n", encoding="utf-8")
    ctx.info.update(parameters=sum(p.numel() for p in model.parameters()), dtype=str(model.dtype))
