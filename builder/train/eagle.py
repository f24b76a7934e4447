"""The EAGLE-1 draft trained on self-distillation data, and its held-out accuracy.

Loss as upstream EAGLE-1 (`eagle/train/main.py`): SmoothL1 between the predicted and the target's next
hidden state (weight 1) plus the cross-entropy of the draft's logits (through the frozen target LM
head) against the target's own next-token distribution (weight `p_w`, upstream 0.1), with
upstream's uniform noise on the input features.

One addition, in training only: the draft is unrolled `unroll` steps as it runs when drafting —
step s ≥ 2 reads the draft's own step-(s-1) output instead of the target's feature, attends to the
target-fed pairs up to its anchor plus its own chain (the masks below), and sits s - 1 positions
later. Step 1 is exactly EAGLE-1; steps ≥ 2 (weight 0.8^(s-1)) teach the draft to keep going on its
own features, which is what deeper tree levels need. The architecture and checkpoint are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from builder.model.config import LlamaConfig
from builder.speculative.eagle.draft_model import EagleDraft
from builder.train.distill import Sequences
from builder.train.medusa import rank_of
from builder.train.schedule import cosine_lr, set_lr


@dataclass(frozen=True)
class EagleTraining:
    """One EAGLE-1 training run: the schedule and upstream's loss and noise settings."""

    steps: int
    batch: int  # sequences per step (equal lengths)
    lr: float  # peak of the cosine schedule (warmup: steps // 20)
    unroll: int  # training-time draft depth (1 = plain EAGLE-1)
    noise: float  # upstream's uniform feature noise (std)
    p_w: float  # upstream's token-loss weight (v_w = 1)
    seed: int  # of the generator that samples each step's sequences and the noise


def chain_mask(T: int, step: int, batch: int) -> torch.Tensor:  # -> [B, T, step*T] bool
    """Step `step` (1-based) of an unrolled chain over T anchors.

    Slots [0, T) hold the target-fed pairs: anchor i sees pairs j ≤ i. Slots [(r-1)T, rT) for
    r = 2..step hold chain step r: anchor i sees only its own chain node (the diagonal).
    """
    blocks = [torch.ones(T, T, dtype=torch.bool).tril()] + [torch.eye(T, dtype=torch.bool)] * (step - 1)
    return torch.cat(blocks, dim=1).expand(batch, T, step * T)


def unroll(
    draft: EagleDraft,
    tokens: torch.Tensor,
    hidden: torch.Tensor,
    depth: int,
    noise: float = 0.0,
    gen: torch.Generator | None = None,
) -> list[torch.Tensor]:
    """Draft outputs of chain steps 1..depth at every anchor: depth × [B, T, C], T = L - 1.

    tokens [B, L], hidden [B, L, C] (the target's). Step s at anchor i reads token t[i+s] (clamped
    at the end; those anchors are invalid for step s) and predicts h[i+s].
    """
    B, L = tokens.shape
    T = L - 1
    feats = hidden[:, :T]  # (B, T, C) h[i] of pair i
    if noise > 0:
        # drawn on the CPU (the generator a checkpoint carries), whatever the device
        feats = feats + ((torch.rand(feats.shape, generator=gen) - 0.5) * noise).to(feats.device, feats.dtype)
    cache = draft.new_cache(depth * T, batch=B)
    outs, dev = [], tokens.device
    for s in range(1, depth + 1):
        idx = (torch.arange(T, device=dev) + s).clamp(max=L - 1)  # (T,) token t[i+s]
        pos = (torch.arange(T, device=dev) + s - 1).expand(B, T)  # (B, T)
        mask = chain_mask(T, s, B).to(dev)
        out = draft(tokens[:, idx], feats, pos, mask, cache, start=(s - 1) * T)  # (B, T, C)
        outs.append(out)
        feats = out
    return outs


def _loss(outs: list[torch.Tensor], hidden: torch.Tensor, lm_head: torch.Tensor, p_w: float) -> torch.Tensor:
    B, L, _ = hidden.shape
    T, total = L - 1, torch.zeros(())
    for s, out in enumerate(outs, start=1):
        n = T - s + 1  # anchors i with i + s ≤ L - 1
        pred, target = out[:, :n], hidden[:, s : s + n]  # (B, n, C) each
        vloss = F.smooth_l1_loss(pred, target)
        with torch.no_grad():
            p = F.softmax(target @ lm_head.T, dim=-1)  # (B, n, V) the target's distribution
        ploss = -(p * F.log_softmax(pred @ lm_head.T, dim=-1)).sum(-1).mean()
        total = total + 0.8 ** (s - 1) * (vloss + p_w * ploss)
    return total


def train_eagle(
    run: EagleTraining,
    cfg: LlamaConfig,
    data: Sequences,
    embed: torch.Tensor,  # [V, C] the target's, copied into the draft
    lm_head: torch.Tensor,  # [V, C] the target's, frozen
    log: Callable[[str], None],
) -> tuple[EagleDraft, float]:
    """Train a draft of config `cfg` (one decoder layer) on sequences of equal length; returns it and the final
    training loss (mean of the last tenth of the steps). `log` gets a line every 50 steps."""
    draft = EagleDraft(cfg, fc_bias=True)
    with torch.no_grad():
        draft.embed_tokens.weight.copy_(embed)
    draft.set_lm_head(lm_head)
    params = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=run.lr, betas=(0.9, 0.95), weight_decay=0.0)
    gen = torch.Generator().manual_seed(run.seed)
    tail, losses = max(1, run.steps // 10), []
    draft.train()
    for step in range(run.steps):
        rows = torch.randint(0, len(data.tokens), (run.batch,), generator=gen).tolist()
        tokens = torch.stack([data.tokens[n] for n in rows])  # (B, L)
        hidden = torch.stack([data.hidden[n] for n in rows])  # (B, L, C)
        outs = unroll(draft, tokens, hidden, run.unroll, run.noise, gen)
        loss = _loss(outs, hidden, lm_head, run.p_w)
        set_lr(opt, cosine_lr(step, run.steps, run.lr, warmup=max(1, run.steps // 20)))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_value_(params, 0.5)  # upstream's grad_clip
        opt.step()
        losses.append(loss.item())
        if step % 50 == 0 or step == run.steps - 1:
            log(f"eagle step {step + 1}/{run.steps} loss {loss.item():.4f}")
    draft.eval()
    return draft, sum(losses[-tail:]) / tail


@torch.no_grad()
def eagle_ranks(draft: EagleDraft, data: Sequences, depth: int) -> list[torch.Tensor]:
    """Per sequence, [A, depth] int64: the rank of token i + s + 1 in the step-s draft logits at anchor i.

    Anchors run from prompt_len - 1 to L - 3 (as for Medusa). Step s reads the true token t[i+s]:
    on a tree path whose earlier nodes were right that is the node's own token (each node attends
    to its ancestors only), so these ranks decide acceptance exactly, for chains and static trees.
    """
    out = []
    for tok, hid, P in zip(data.tokens, data.hidden, data.prompt_len):
        L = len(tok)
        steps = unroll(draft, tok[None], hid[None], depth)  # depth × (1, L-1, C)
        anchors = torch.arange(P - 1, L - 2)  # (A,)
        cols = []
        for s, o in enumerate(steps, start=1):
            lab_pos = anchors + s + 1  # (A,)
            labels = torch.where(lab_pos < L, tok[lab_pos.clamp(max=L - 1)], torch.full_like(lab_pos, -1))
            cols.append(rank_of(draft.logits(o[0, anchors]), labels))  # (A,)
        out.append(torch.stack(cols, dim=1))  # (A, depth)
    return out
