"""The EAGLE-3 draft as TensorRT-LLM's PyTorch flow is told about it: its aux layers (output-of-layer ids) and
draft vocabulary size, from the draft's config.json and the recipe (`builder.speculative.eagle3.checkpoint`: the
recipe's ids, else the checkpoint's `eagle_config` ids, else upstream's default {1, N/2-1, N-4})."""

# trtllm: this module is the trtllm-llmapi backend's (builder/trtllm/llmapi)

from __future__ import annotations

import json
from pathlib import Path

from builder.speculative.eagle3.checkpoint import parse_config, resolve_aux_layers


def draft_facts(recipe_aux: list[int] | None, draft_dir: Path, num_layers: int) -> tuple[tuple[int, ...], int]:
    """(aux layers, draft vocabulary size) of the draft in `draft_dir` for an N-layer target; UserError naming
    speculative.aux_layers (or the config key) when they cannot be resolved."""
    source = str(draft_dir / "config.json")
    shape = parse_config(json.loads((draft_dir / "config.json").read_text(encoding="utf-8")), source)
    aux = resolve_aux_layers(recipe_aux, shape.aux_layers, num_layers, source)
    return tuple(aux), shape.draft_vocab
