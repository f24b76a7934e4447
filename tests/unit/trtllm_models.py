"""Helpers for the TensorRT-LLM checkpoint tests: random unseen targets and drafts saved in their upstream layouts.

The target is a transformers `LlamaForCausalLM` (the oracle) with GQA kv_heads < tp, a vocabulary that
no tp > 1 divides (so the LM head is padded), Llama 3.1 RoPE scaling and a sharded safetensors index;
the drafts are random `MedusaHeads` / `EagleDraft` saved as FasterDecoding's and SafeAILab's files.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from builder.speculative.eagle.draft_model import EagleDraft
from builder.speculative.medusa.heads import MedusaHeads
from tests.unit.model_utils import LLAMA3_SCALING, hf_model, save_checkpoint

# 4 query heads / 1 KV head: tp 2 and tp 4 duplicate the KV head; vocab 98 is padded to 100 at tp 4; 3 layers
# split 2 + 1 over pp 2 (the first pipeline rank takes the extra layer).
RANDOM_TARGET = dict(
    vocab_size=98,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=1,
    head_dim=16,
    rope_scaling=LLAMA3_SCALING,
    max_position_embeddings=256,
)


def save_random_target(path: Path, seed: int = 7, **overrides) -> Path:
    """A random HF Llama (RANDOM_TARGET + overrides) saved sharded (several files + index)."""
    model = hf_model(seed, **{**RANDOM_TARGET, **overrides})
    return save_checkpoint(model, path, max_shard_size="40KB")


def save_medusa(heads: MedusaHeads, path: Path) -> Path:
    """FasterDecoding layout: config.json + medusa_lm_head.safetensors (`{h}.{l}.linear.*`, `{h}.{L}.weight`)."""
    from safetensors.torch import save_file

    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(heads.config_dict("../base")), encoding="utf-8")
    save_file({k: v.contiguous() for k, v in heads.state_dict().items()}, str(path / "medusa_lm_head.safetensors"))
    return path


def save_eagle(draft: EagleDraft, path: Path, with_embedding: bool = True) -> Path:
    """SafeAILab layout: a one-layer Llama config.json (+ "bias") and model.safetensors (fc, layers, embed)."""
    from safetensors.torch import save_file

    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(draft.config_dict(1, 2, "float32")), encoding="utf-8")
    state = {k: v.contiguous() for k, v in draft.state_dict().items()}
    if not with_embedding:
        state.pop("embed_tokens.weight")
    save_file(state, str(path / "model.safetensors"))
    return path


def random_heads(C: int, V: int, num_heads: int = 5, seed: int = 11, std: float = 0.2) -> MedusaHeads:
    torch.manual_seed(seed)
    heads = MedusaHeads(num_heads, 1, C, V)
    with torch.no_grad():
        for p in heads.parameters():
            p.normal_(0, std)
    return heads
