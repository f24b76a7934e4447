"""load: resolve the checkpoints (local, or already in the local hub cache), check them strictly, record them.

Output `source.json`: the target, tokenizer and draft directories with every file's size and sha256,
the architecture, and the stop token ids. Loading the target and the draft with the strict loaders
is the check (missing/extra keys, shapes, truncated files; upstream's pickled files only under
`model.allow_pickle` / `speculative.allow_pickle`, refused naming the field otherwise).

A pickle read under the opt-in is converted to safetensors here, once, when a later stage reads safetensors
only (the backend says so, `Backend.safetensors_only`: a checkpoint converter that indexes safetensors headers and
streams tensor by tensor). The copy sits in this stage's output (`safetensors/model`, `safetensors/draft`, named in
source.json) and costs the checkpoint's size again on disk; `trtspec convert-draft` makes it once outside the cache
instead. Whether a copy is made is in the key (`inputs`): an output with copies is another output.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from builder.handoffs import CheckpointFiles, LoadInfo, SourceJson
from builder.model.pickled import TARGET, Layout
from builder.recipe.loader import LoadedRecipe
from builder.stages.inputs import checkpoints
from builder.stages.manifest import sha256_file
from builder.stages.parts import PICKLE_FIELD, Parts, stop_ids
from builder.stages.stage import Backend, Stage, StageContext

SOURCE = SourceJson.FILE
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
    source = SourceJson.read(load_out)
    entry = source.model if role == "model" else source.draft
    return None if entry is None or entry.safetensors is None else load_out / entry.safetensors


def _convert(ctx: StageContext, folder: Path, role: str, layout: Layout, out: Path, entry: dict) -> None:
    """Where the backend's converter reads safetensors only, write the safetensors copy of a pickled `folder`."""
    from builder.model.pickled import pickle_to_read

    if not ctx.backend.safetensors_only or pickle_to_read(folder, layout) is None:
        return
    from builder.model.convert import to_safetensors

    ctx.say(f"writing a safetensors copy of the pickled {role} (read by the {ctx.backend.name} checkpoint stage)")
    field = "model.allow_pickle" if role == "model" else PICKLE_FIELD
    to_safetensors(folder, layout, out / CONVERTED / role, allow_pickle=True, opt_in=field)  # loaded above
    entry["safetensors"] = f"{CONVERTED}/{role}"


def run(ctx: StageContext, out: Path) -> None:
    parts = Parts(ctx.loaded, ctx.loaded.recipe.speculative.method)
    ctx.say("resolving checkpoints")
    base, tok = parts.base_dir(), parts.tokenizer_dir()
    ctx.say(f"checking {base}")
    model = parts.model()
    target = {"dir": str(base), "files": _files(base)}
    _convert(ctx, base, "model", TARGET, out, target)
    draft_entry = None
    own = parts.method_of.draft
    if own is not None:
        draft = parts.draft_dir()
        ctx.say(f"checking the {parts.method} draft {draft}")
        parts.draft(model, draft_vocab=False)
        draft_entry = {"dir": str(draft), "files": _files(draft)}
        _convert(ctx, draft, "draft", own.layout, out, draft_entry)
    source = SourceJson(
        format=SourceJson.FORMAT,
        model=CheckpointFiles.model_validate(target),
        tokenizer=str(tok),
        stop_ids=stop_ids(base),
        architecture=dataclasses.asdict(model.cfg),
    )
    if draft_entry is not None:
        source.draft = CheckpointFiles.model_validate(draft_entry)
    source.write(out)
    ctx.info = LoadInfo(parameters=sum(p.numel() for p in model.parameters()), dtype=str(model.dtype))


def inputs(loaded: LoadedRecipe, backend: Backend) -> dict[str, Any]:
    """The checkpoints' identities; whether pickled weights get a safetensors copy (another output)."""
    return {**checkpoints(loaded), **({"backend.safetensors_only": True} if backend.safetensors_only else {})}


STAGE = Stage(
    name="load",
    description="HF checkpoint + draft → torch reference",
    reads=("model", "speculative.method", "speculative.checkpoint", "speculative.allow_pickle"),
    tools=("torch", "safetensors", "transformers"),
    needs=(),
    run=run,
    info=LoadInfo,
    output=SourceJson,
    inputs=inputs,
)
