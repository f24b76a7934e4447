"""Training rows shared between drafts of one target: `<cache>/train-rows/<rows key>.safetensors` (the key:
`train_draft.key_of` of `rows_inputs`).

Making the rows is the target's work (with `generate_responses`, a greedy continuation per prompt: on the regime
fixture 546 s of a 2161 s run), and it does not depend on the draft. Two drafts of one target trained on one data
section — an EAGLE-3 draft and Medusa heads, or the retrained EAGLE-1 beside the EAGLE-3 for a fair comparison — read
the same rows: the second run takes them from here.

The rows key hashes what the rows are made of and nothing else: the data fields of `draft_training`
(`DATA_FIELDS`; the generation fields only where the target generates), the target's and tokenizer's bytes, the
source, the tool versions, device, dtype and thread count (the target's greedy continuations are float arithmetic),
and the code of `builder.train.draft_data`'s import closure. A file is written whole under a temporary name and
renamed; its own tensors' sha256 is in its metadata and checked on every read, so a damaged file is made again,
never trained on.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from builder.train.draft_data import TrainingSet

# `DraftTraining` fields the rows depend on; the rest (steps, lr, seed, ttt_steps, draft_vocab_size, ...) are training
GENERATION_FIELDS = ("response_tokens", "generation_batch")
DATA_FIELDS = ("source", "num_samples", "seq_len", "generate_responses", *GENERATION_FIELDS)
SUBDIR = "train-rows"


def rows_inputs(run_inputs: dict, code: dict[str, str]) -> dict:
    """What the rows key hashes, from a train-draft run's inputs (`train_draft.run_inputs`) and the digest of
    draft_data's import closure."""
    settings = run_inputs["settings"]
    fields = (
        DATA_FIELDS if settings["generate_responses"] else tuple(f for f in DATA_FIELDS if f not in GENERATION_FIELDS)
    )
    keep = ("target", "tokenizer", "source", "versions", "device", "dtype", "threads")
    return {"data": {f: settings[f] for f in fields}, **{k: run_inputs[k] for k in keep}, "code": code}


def path_of(cache: Path, key: str) -> Path:
    return cache / SUBDIR / f"{key}.safetensors"


def load(cache: Path, key: str) -> tuple[TrainingSet | None, str | None]:
    """(the cached rows, None); (None, why) when there are none or the file is damaged (then removed)."""
    from safetensors import safe_open

    path = path_of(cache, key)
    if not path.is_file():
        return None, None
    try:
        with safe_open(str(path), "pt") as fh:
            want = (fh.metadata() or {}).get("sha256")
        data = TrainingSet.load(path)
        if want is None or data.digest() != want or data.tokens.shape != data.mask.shape:
            raise ValueError("its tensors do not match the sha256 it was written with")
    except Exception as e:  # noqa: BLE001 (any unreadable file is made again)
        path.unlink(missing_ok=True)
        return None, f"{path} unreadable ({e}): making the rows again"
    return data, None


def store(cache: Path, key: str, data: TrainingSet) -> Path:
    """Write the rows whole (temp file in the same folder, then rename); another run's identical file may win."""
    import torch
    from safetensors.torch import save_file

    path = path_of(cache, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        tensors = {"tokens": data.tokens.contiguous(), "mask": data.mask.to(torch.uint8).contiguous()}
        save_file(tensors, tmp, metadata={"sha256": data.digest()})
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path
