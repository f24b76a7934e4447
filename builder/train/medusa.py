"""Medusa heads trained on self-distillation data, and their held-out accuracy.

Head k at position t is trained to predict token t + k + 2 of the base model's own greedy
continuation (cross-entropy, summed over heads, as upstream's `train_legacy.py`). Only positions whose
labels are generated tokens count (t ≥ prompt_len - 1): those are the situations a greedy target meets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from builder.speculative.medusa.heads import MedusaHeads
from builder.train.distill import Sequences
from builder.train.schedule import cosine_lr, set_lr


@dataclass(frozen=True)
class MedusaTraining:
    """One Medusa training run: the heads' shape and the schedule."""

    heads: int  # Medusa heads (head k predicts token t + k + 2)
    layers: int  # residual blocks per head
    steps: int
    batch: int  # sequences per step (all their anchors)
    lr: float  # peak of the cosine schedule (warmup: steps // 20)
    seed: int  # of the generator that samples each step's sequences


def _batch(data: Sequences, rows: list[int], K: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Hidden states at anchor positions and the K labels of each: [N, C], [N, K] (-100 = none)."""
    hs, labels = [], []
    for n in rows:
        tok, hid, P = data.tokens[n], data.hidden[n], data.prompt_len[n]
        L = len(tok)
        t = torch.arange(P - 1, L - 2)  # anchors with at least one generated label
        idx = t[:, None] + 2 + torch.arange(K)[None]  # (n, K) label positions
        lab = torch.where(idx < L, tok[idx.clamp(max=L - 1)], torch.full_like(idx, -100))
        hs.append(hid[t])
        labels.append(lab)
    return torch.cat(hs), torch.cat(labels)


def train_medusa(
    run: MedusaTraining, data: Sequences, lm_head: torch.Tensor, log: Callable[[str], None]
) -> tuple[MedusaHeads, float]:  # lm_head: [V, C]
    """Train `run.heads` heads; returns them and the final training loss (mean over heads, last tenth of the
    steps). `log` gets a line every 50 steps."""
    K, C = run.heads, lm_head.shape[1]
    heads = MedusaHeads(K, run.layers, C, lm_head.shape[0])
    heads.init_from_lm_head(lm_head)
    opt = torch.optim.AdamW(heads.parameters(), lr=run.lr, betas=(0.9, 0.95), weight_decay=0.0)
    gen = torch.Generator().manual_seed(run.seed)
    tail, losses = max(1, run.steps // 10), []
    heads.train()
    for step in range(run.steps):
        rows = torch.randint(0, len(data.tokens), (run.batch,), generator=gen).tolist()
        h, lab = _batch(data, rows, K)  # (N, C), (N, K)
        logits = heads(h)  # (K, N, V)
        loss = torch.stack([F.cross_entropy(logits[k], lab[:, k], ignore_index=-100) for k in range(K)]).mean()
        set_lr(opt, cosine_lr(step, run.steps, run.lr, warmup=max(1, run.steps // 20)))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step % 50 == 0 or step == run.steps - 1:
            log(f"medusa step {step + 1}/{run.steps} loss {loss.item():.3f}")
    heads.eval()
    return heads, sum(losses[-tail:]) / tail


@torch.no_grad()
def medusa_ranks(heads: MedusaHeads, data: Sequences) -> list[torch.Tensor]:
    """Per sequence, [A, K] int64: the rank of token t + k + 2 in head k's logits at anchor t.

    Rank 0 = the head's top-1 is right. Anchors run from prompt_len - 1 to L - 3; a label past the
    end gets rank `vocab_size` (never accepted).
    """
    K, out = heads.num_heads, []
    for tok, hid, P in zip(data.tokens, data.hidden, data.prompt_len):
        h, lab = _batch(Sequences([tok], [hid], [P]), [0], K)  # (A, C), (A, K)
        logits = heads(h).transpose(0, 1)  # (A, K, V)
        out.append(rank_of(logits, lab))
    return out


def rank_of(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:  # [..., V], [...] -> [...]
    """How many logits beat the label's (ties count for the label); labels < 0 get rank V."""
    picked = logits.gather(-1, labels.clamp(min=0)[..., None])  # (..., 1)
    ranks = (logits > picked).sum(-1)  # (...)
    return torch.where(labels >= 0, ranks, torch.full_like(ranks, logits.shape[-1]))
