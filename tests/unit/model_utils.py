"""Helpers for the builder/model tests: tiny random HF Llama checkpoints and random trees.

The HF `transformers.LlamaForCausalLM` built here is the oracle; nothing in this file computes an
expected value with trtspec code.
"""

from __future__ import annotations

import contextlib
import copy
import types
from pathlib import Path
from typing import Any, Iterator

import torch
import transformers
from transformers.models.llama.modeling_llama import LlamaRMSNorm, LlamaRotaryEmbedding

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
    "gqa_llama3_untied_headdim": dict(
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=16,
        rope_scaling=LLAMA3_SCALING,
        tie_word_embeddings=False,
    ),
    "gqa_llama3_tied": dict(
        num_attention_heads=8, num_key_value_heads=2, rope_scaling=LLAMA3_SCALING, tie_word_embeddings=True
    ),
    "mha_default_rope_tied": dict(num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=True),
}


def hf_config(**overrides: Any) -> transformers.LlamaConfig:
    """A tiny HF LlamaConfig (2 layers, hidden 64, vocab 96); `overrides` replace any field."""
    kwargs: dict[str, Any] = dict(
        vocab_size=96,
        hidden_size=64,
        intermediate_size=112,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=2,
        rms_norm_eps=1e-5,
        rope_theta=500.0,
        max_position_embeddings=128,
        initializer_range=0.2,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    kwargs.update(overrides)
    if isinstance(kwargs.get("rope_scaling"), dict):  # transformers writes into it (rope_theta): never a shared dict
        kwargs["rope_scaling"] = dict(kwargs["rope_scaling"])
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


def hf_greedy_continuations(model: transformers.LlamaForCausalLM, prompts: list[list[int]], n: int) -> list[list[int]]:
    """HF `generate` greedy: the `n` tokens after each prompt (the oracle the engines are compared with)."""
    outs = []
    with torch.no_grad():
        for p in prompts:
            ids = torch.tensor([p])
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False)
            outs.append(out[0, len(p) :].tolist())
    return outs


def rope_table(
    inv_freq: torch.Tensor,  # [D/2]: HF's fp32 inverse frequencies, used as given
    position_ids: torch.Tensor,  # [B, T] int64
    dtype: torch.dtype,
    scaling: float = 1.0,  # HF's `attention_scaling` (1.0 for default and llama3 RoPE)
) -> tuple[torch.Tensor, torch.Tensor]:  # -> cos, sin: [B, T, D] computed in `dtype`
    """HF's RoPE table (angle = position * inv_freq, halves repeated), computed in `dtype` throughout.

    `LlamaRotaryEmbedding` always computes it in fp32; in fp32 this gives the same formula.
    """
    freqs = position_ids[..., None].to(dtype) * inv_freq.to(dtype)  # (B, T, D/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (B, T, D)
    return emb.cos() * scaling, emb.sin() * scaling


def _rms_norm_f64(self: LlamaRMSNorm, x: torch.Tensor) -> torch.Tensor:  # [..., C] -> [..., C]
    return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))


def _rotary_f64(
    self: LlamaRotaryEmbedding, x: torch.Tensor, position_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    return rope_table(self.inv_freq, position_ids, torch.float64, self.attention_scaling)


def hf_float64(model: transformers.LlamaForCausalLM) -> transformers.LlamaForCausalLM:
    """A copy of `model` that computes in float64 throughout: the reference for fp32 comparisons.

    `.double()` alone is not enough. HF keeps fp32 islands on purpose: `LlamaRMSNorm` normalises in
    fp32 (`hidden_states.to(torch.float32)`) and `LlamaRotaryEmbedding` builds cos/sin in fp32. Left
    in, they put errors of fp32 size into the "reference" (2-6e-6 on the tiny models, half the fp32
    error being judged). In the copy both compute in float64: same formulas, same weights, same fp32
    `inv_freq` values (taken as given parameters). Eager attention has a third island (an fp32
    softmax), so the copy must use SDPA, which computes in the input dtype.
    """
    attention = model.config._attn_implementation
    if attention != "sdpa":
        raise ValueError(f"hf_float64 needs SDPA attention (eager softmaxes in fp32), got {attention!r}")
    ref = copy.deepcopy(model).double().eval()
    for module in ref.modules():
        if isinstance(module, LlamaRMSNorm):
            module.forward = types.MethodType(_rms_norm_f64, module)  # type: ignore[method-assign]
        elif isinstance(module, LlamaRotaryEmbedding):
            if module.rope_type not in ("default", "llama3"):  # others rescale inv_freq with the length
                raise ValueError(f"hf_float64 supports default and llama3 RoPE, got {module.rope_type!r}")
            module.forward = types.MethodType(_rotary_f64, module)  # type: ignore[method-assign]
    return ref


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
