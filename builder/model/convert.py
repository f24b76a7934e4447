"""Convert a checkpoint's pickled weights to safetensors once, so nothing needs the pickle opt-in again.

`to_safetensors(src, layout, dst)` reads the pickled file(s) loading `src` would read (`builder.model.pickled`:
upstream's names only, `torch.load(weights_only=True)`), writes them under the layout's safetensors names
with the same keys and dtypes, copies the directory's other files (config.json, generation_config.json,
tokenizer files; never another pickle-like file), runs the caller's strict check on the result, and only then
renames it into place: `dst` is complete or absent. A sharded `pytorch_model.bin.index.json` becomes
`model-NNNNN-of-NNNNN.safetensors` shards (one per pickled shard) and `model.safetensors.index.json`, as
transformers names them. Used by `trtspec convert-draft` and by the load stage where a later stage reads
safetensors only (the trtllm checkpoint converter).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Callable

import torch

from builder.errors import UserError
from builder.files import staged_dir
from builder.model.loader import read_pickled
from builder.model.pickled import PICKLE_SUFFIXES, Layout, pickle_to_read

FORMAT = {"format": "pt"}  # the metadata transformers writes into its safetensors files


def to_safetensors(
    src: Path,
    layout: Layout,
    dst: Path,
    *,
    allow_pickle: bool,
    opt_in: str,
    check: Callable[[Path], object] | None = None,
) -> dict:
    """Write `src`'s pickled weights as safetensors into the new folder `dst`; returns what was written.

    `check(folder)` runs on the finished folder before it is renamed to `dst` (e.g. the strict loader without
    the opt-in); a failure leaves nothing behind.
    """
    from safetensors.torch import save_file

    pickled = pickle_to_read(src, layout)
    if pickled is None or not allow_pickle:
        read_pickled(src, layout, allow_pickle, opt_in)  # raises: nothing pickled to read, or the opt-in refusal
    assert pickled is not None
    if dst.exists():  # checked before reading a large pickle
        raise UserError(
            "the output folder exists already; choose another or remove it", location=str(dst), field="--out"
        )
    sources = read_pickled(src, layout, allow_pickle, opt_in)
    by_file: dict[str, dict[str, torch.Tensor]] = {}
    for key, (tensor, file) in sources.items():
        # contiguous copies: safetensors refuses tensors that share storage (upstream's Medusa shares one
        # ResBlock across a head's layers, `[ResBlock(hidden)] * num_layers`)
        by_file.setdefault(Path(file).name, {})[key] = tensor.detach().contiguous().clone()
    written: list[str] = []
    with staged_dir(dst) as tmp:
        if pickled.name == layout.index:
            shards = sorted(by_file)
            names = {shard: f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i, shard in enumerate(shards)}
            weight_map = {}
            for shard in shards:
                save_file(by_file[shard], str(tmp / names[shard]), metadata=FORMAT)
                weight_map.update({key: names[shard] for key in by_file[shard]})
                written.append(names[shard])
            total = sum(t.numel() * t.element_size() for d in by_file.values() for t in d.values())
            index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
            (tmp / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
            written.append("model.safetensors.index.json")
        else:
            (tensors,) = by_file.values()
            save_file(tensors, str(tmp / layout.weights), metadata=FORMAT)
            written.append(layout.weights)
        copied = _copy_other_files(src, tmp, layout)
        if check is not None:
            check(tmp)
    return {"from": str(pickled), "to": str(dst), "written": written, "copied": copied, "tensors": len(sources)}


def _copy_other_files(src: Path, dst: Path, layout: Layout) -> list[str]:
    """Every other top-level file of `src` (config.json, tokenizer files, …): not the pickles, not their
    index, not any other pickle-like file (those are never carried forward)."""
    skip = {*layout.pickles, *layout.safetensors}
    copied = []
    for p in sorted(src.iterdir()):
        if not p.is_file() or p.name in skip or p.suffix in PICKLE_SUFFIXES or p.name.startswith("."):
            continue
        shutil.copyfile(p, dst / p.name)  # follows the hub cache's symlinks to the blob
        os.chmod(dst / p.name, 0o644)
        copied.append(p.name)
    return copied
