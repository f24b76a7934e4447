"""Measure Medusa heads' per-(head, rank) accuracy against the target's own greedy continuations."""

from __future__ import annotations

from typing import Sequence

import torch

from builder.model.llama import Llama, causal_mask
from builder.speculative.medusa.heads import MedusaHeads


@torch.no_grad()
def greedy_continuation(model: Llama, prompt: Sequence[int], new_tokens: int) -> list[int]:
    """Plain greedy decoding with the reference model (no cache: short sequences only)."""
    seq = list(prompt)
    for _ in range(new_tokens):
        n = len(seq)
        logits, _ = model(torch.tensor([seq]), torch.arange(n)[None], causal_mask(n))
        seq.append(int(logits[0, -1].argmax()))
    return seq[len(prompt) :]


@torch.no_grad()
def rank_accuracy(
    model: Llama,
    heads: MedusaHeads,
    prompts: Sequence[Sequence[int]],
    new_tokens: int = 128,
    ranks: int = 10,
) -> list[list[float]]:  # [heads][ranks]: P(head k's rank-r candidate is the target's token k+2 ahead)
    """Greedy-continue each prompt with the target, then score every head on the continuation."""
    hits = torch.zeros(heads.num_heads, ranks, dtype=torch.float64)
    total = torch.zeros(heads.num_heads, dtype=torch.float64)
    for prompt in prompts:
        seq = list(prompt) + greedy_continuation(model, prompt, new_tokens)
        n = len(seq)
        _, hidden = model(torch.tensor([seq]), torch.arange(n)[None], causal_mask(n))  # (1, L, C)
        top = heads(hidden[0].to(heads[0][-1].weight.dtype)).topk(ranks, dim=-1).indices  # (H, L, ranks)
        target = torch.tensor(seq)
        for k in range(heads.num_heads):
            pos = torch.arange(len(prompt) - 1, len(seq) - k - 2)  # positions whose token k+2 ahead exists
            if len(pos) == 0:
                continue
            match = top[k, pos] == target[pos + k + 2, None]  # (n, ranks)
            hits[k] += match.double().sum(0)
            total[k] += len(pos)
    return (hits / total.clamp(min=1)[:, None]).tolist()
