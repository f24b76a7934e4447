"""Calibration token ids from the recipe's `quantization.calibration` section.

Sources (`Calibration.source`):
* `builtin:stdlib` — the built-in corpus's training text (`builder.data.corpus`: this interpreter's
  standard library minus the held-out files), files taken spread over the sorted list;
* `builtin:humaneval` — HumanEval problems (prompt + canonical solution) from the SECOND half of the
  file only: the quality report evaluates on the first half's prompts (`HELDOUT`), never calibrated on;
* a `.jsonl` path (relative to the recipe file that sets it) with a `text` field per line.

Documents are tokenized one by one (at most `seq_len` tokens of each, so many documents contribute),
concatenated in order and cut into `num_samples` sequences of exactly `seq_len` tokens.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from builder.errors import UserError

FIELD = "quantization.calibration.source"
HELDOUT = 82  # HumanEval problems [0, HELDOUT) are the quality report's; calibration reads the rest
CHARS_PER_TOKEN = 8  # generous: a document is cut to seq_len * 8 characters before tokenizing


def documents(source: str, base_dir: Path, wanted: int) -> Iterator[str]:
    """The source's documents in calibration order (`wanted` = samples asked for, to spread stdlib files)."""
    if source == "builtin:stdlib":
        from builder.data.corpus import load_corpus

        train = load_corpus().train
        step = max(1, len(train) // max(wanted, 1))
        order = train[::step] + [f for i, f in enumerate(train) if i % step]  # spread first, then the rest
        yield from (f.text for f in order)
    elif source == "builtin:humaneval":
        from builder.data.humaneval import load_humaneval

        yield from (row["prompt"] + row["canonical_solution"] for row in load_humaneval()[HELDOUT:])
    else:
        yield from _jsonl(_resolve(source, base_dir))


def _resolve(source: str, base_dir: Path) -> Path:
    path = Path(source)
    path = path if path.is_absolute() else base_dir / path
    if not path.is_file():
        raise UserError(f"calibration file missing: {path}", field=FIELD)
    return path


def _jsonl(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise UserError(f"line {n} is not JSON: {exc}", location=f"{path}:{n}", field=FIELD) from None
            if not isinstance(row, dict) or not isinstance(row.get("text"), str):
                raise UserError("each line needs a string field 'text'", location=f"{path}:{n}", field=FIELD)
            yield row["text"]


def calibration_ids(tokenizer, source: str, base_dir: Path, num_samples: int, seq_len: int) -> list[list[int]]:
    """`num_samples` lists of `seq_len` token ids (see the module docstring); UserError if the source is short."""
    need = num_samples * seq_len
    stream: list[int] = []
    for text in documents(source, base_dir, num_samples):
        ids = tokenizer.encode(text[: seq_len * CHARS_PER_TOKEN]).ids[:seq_len]
        stream.extend(ids)
        if len(stream) >= need:
            break
    if len(stream) < need:
        raise UserError(
            f"{source} gives {len(stream)} tokens, calibration needs num_samples × seq_len = {need}", field=FIELD
        )
    return [stream[i * seq_len : (i + 1) * seq_len] for i in range(num_samples)]
