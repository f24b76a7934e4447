"""Measure Medusa heads' per-(head, rank) accuracy against the target's own greedy continuations."""

from __future__ import annotations

from typing import Sequence

import torch

from builder.speculative.loop import generate
from builder.speculative.medusa.heads import MedusaHeads


@torch.no_grad()
def rank_accuracy(
    engine,  # TorchEngine
    heads: MedusaHeads,
    prompts: Sequence[Sequence[int]],
    new_tokens: int = 128,
    ranks: int = 10,
) -> list[list[float]]:  # [heads][ranks]: P(head k's rank-r candidate is the target's token k+2 ahead)
    """Greedy-continue each prompt with the target, then score every head on the continuation."""
    hits = torch.zeros(heads.num_heads, ranks, dtype=torch.float64)
    total = torch.zeros(heads.num_heads, dtype=torch.float64)
    for prompt in prompts:
        cont = generate(engine, prompt, new_tokens).token_ids
        seq = list(prompt) + cont
        engine.reset()
        hidden = engine.prefill(seq).hidden  # (L, C)
        top = heads(hidden.to(heads[0][-1].weight.dtype)).topk(ranks, dim=-1).indices  # (H, L, ranks)
        target = torch.tensor(seq)
        for k in range(heads.num_heads):
            pos = torch.arange(len(prompt) - 1, len(seq) - k - 2)  # positions whose token k+2 ahead exists
            if len(pos) == 0:
                continue
            match = top[k, pos] == target[pos + k + 2, None]  # (n, ranks)
            hits[k] += match.double().sum(0)
            total[k] += len(pos)
    return (hits / total.clamp(min=1)[:, None]).tolist()
