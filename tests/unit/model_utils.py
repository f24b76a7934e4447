"""Helpers for the builder/model tests: tiny random HF Llama checkpoints and random trees.

The HF `transformers.LlamaForCausalLM` built here is the oracle; nothing in this file computes an
expected value with trtspec code.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator

import torch
import transformers

LLAMA3_SCALING = {  # small original context so positions up to ~64 cross all three frequency bands
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32,
}

# Named tiny shapes. initializer_range 0.2 (not 0.02) spreads the logits: greedy output varies (no
# one-token loops) and near-ties are rare.
TINY = {
    "gqa_llama3_untied_headdim": dict(num_attention_heads=8, num_key_value_heads=2, head_dim=16,
                                      rope_scaling=LLAMA3_SCALING, tie_word_embeddings=False),
    "gqa_llama3_tied": dict(num_attention_heads=8, num_key_value_heads=2, rope_scaling=LLAMA3_SCALING,
                            tie_word_embeddings=True),
    "mha_default_rope_tied": dict(num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=True),
}


def hf_config(**overrides: Any) -> transformers.LlamaConfig:
    """A tiny HF LlamaConfig (2 layers, hidden 64, vocab 96); `overrides` replace any field."""
    kwargs: dict[str, Any] = dict(
        vocab_size=96, hidden_size=64, intermediate_size=112, num_hidden_layers=2,
        num_attention_heads=8, num_key_value_heads=2, rms_norm_eps=1e-5, rope_theta=500.0,
        max_position_embeddings=128, initializer_range=0.2, tie_word_embeddings=False,
        bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )
    kwargs.update(overrides)
    return transformers.LlamaConfig(**kwargs)


def hf_model(seed: int = 0, **overrides: Any) -> transformers.LlamaForCausalLM:
    """A tiny random HF Llama in eval mode, fp32, with the SDPA attention HF uses by default."""
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(hf_config(**overrides)).eval()


def save_checkpoint(model: transformers.LlamaForCausalLM, path: Path, max_shard_size: str | None = None) -> Path:
    """`save_pretrained` as safetensors; `max_shard_size` (e.g. "20KB") forces a sharded checkpoint."""
    kwargs = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
    model.save_pretrained(path, safe_serialization=True, **kwargs)
    return path


def random_tree(gen: torch.Generator, T: int) -> list[int]:
    """Parents of a random T-node tree; node 0 is the root (parent -1).

    Nodes are not numbered in topological order (a child may have a smaller index than its
    parent), so commits exercise compaction with overlapping source and destination slots.
    """
    parents = [-1] + [int(torch.randint(0, i, (1,), generator=gen)) for i in range(1, T)]
    perm = [0] + (torch.randperm(T - 1, generator=gen) + 1).tolist()  # old index -> new index
    new_parents = [0] * T
    for old, new in enumerate(perm):
        new_parents[new] = -1 if parents[old] < 0 else perm[parents[old]]
    return new_parents


def path_to(parents: list[int], node: int) -> list[int]:
    """Root-first chain of node indices from the root to `node`."""
    chain = [node]
    while parents[chain[-1]] >= 0:
        chain.append(parents[chain[-1]])
    return chain[::-1]


def tree_mask_depth(parents: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Ancestor matrix [T, T] bool (mask[i, j]: j is i or an ancestor of i) and depths [T] int64."""
    T = len(parents)
    mask = torch.zeros(T, T, dtype=torch.bool)
    depth = torch.zeros(T, dtype=torch.int64)
    for i in range(T):
        chain = path_to(parents, i)
        mask[i, chain] = True
        depth[i] = len(chain) - 1
    return mask, depth


def hf_logits(model: transformers.LlamaForCausalLM, ids: list[int]) -> torch.Tensor:
    """HF logits [len(ids), vocab] for a causal pass over `ids` from scratch."""
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run with n intra-op threads, then restore. The tiny models here gain nothing from threads, and
    on a shared 2-core machine two spinning torch threads made each forward ~40x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
