"""Random-weight tiny Llama 3 targets with random Medusa heads / EAGLE drafts, saved in HF layout."""

from __future__ import annotations

from pathlib import Path

import torch

from builder.model.llama import Llama


def make_hf_llama(
    path: Path,
    *,
    vocab: int = 512,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    seed: int = 0,
    std: float = 0.2,
    max_pos: int = 1024,
) -> Path:
    """A random LlamaForCausalLM saved with save_pretrained (safetensors)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        rope_theta=500000.0,
        max_position_embeddings=max_pos,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
    )
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, std)
    model.save_pretrained(path, safe_serialization=True)
    return path


def random_medusa(model: Llama, num_heads: int = 4, seed: int = 1, std: float = 0.2):
    from builder.speculative.medusa.heads import MedusaHeads

    torch.manual_seed(seed)
    heads = MedusaHeads(num_heads, 1, model.cfg.hidden_size, model.cfg.vocab_size)
    with torch.no_grad():
        for p in heads.parameters():
            p.normal_(0, std)
    return heads


def random_eagle(model: Llama, seed: int = 2, std: float = 0.2):
    import dataclasses

    from builder.speculative.eagle.draft_model import EagleDraft

    torch.manual_seed(seed)
    cfg = dataclasses.replace(model.cfg, num_hidden_layers=1)
    draft = EagleDraft(cfg)
    with torch.no_grad():
        for p in draft.parameters():
            p.normal_(0, std)
        draft.embed_tokens.weight.copy_(model.embed_tokens.weight)
    draft.set_lm_head(model.lm_head.weight)
    return draft
