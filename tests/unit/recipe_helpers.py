"""Helpers to write recipes into tmp dirs and run the CLI in-process."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from builder.cli import cli

ARCH_8B = {
    "num_layers": 32,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_kv_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "rope_theta": 500000,
    "max_position_embeddings": 8192,
}

GOOD: dict[str, Any] = {
    "model": {"checkpoint": "hf://meta-llama/Meta-Llama-3-8B-Instruct", "architecture": ARCH_8B},
    "quantization": {"mode": "fp8", "kv_cache": "model_dtype"},  # own TensorRT engines: no FP8 KV cache
    "speculative": {"method": "medusa", "checkpoint": "hf://org/heads", "num_heads": 4, "tree": [[0], [0, 0], [1]]},
    "target": {"device": "h100", "gpus": 1},
    "build": {"max_batch_size": 8, "max_input_len": 1024, "max_seq_len": 2048},
}


def good() -> dict[str, Any]:
    return copy.deepcopy(GOOD)


def write(path: Path, data: dict[str, Any] | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)
