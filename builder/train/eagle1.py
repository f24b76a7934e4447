"""An EAGLE-1 draft (EAGLE-2 runs the same draft) trained by `trtspec train-draft`, written in SafeAILab's layout.

modelopt cannot train this draft: its HF EAGLE without aux hidden states never reads the token embedding (its
draft layer sees the target's final hidden state only, `modelopt/torch/speculative/plugins/modeling_eagle.py` L166 in
0.47), where EAGLE-1 is fc over [embedding; hidden]. So the draft is ours (`EagleDraft`: fc over
[embed(t[i+1]); h[i]] → one decoder layer with the target's layer shape and RoPE → predicted h[i+1], read through
the target's LM head), and everything else is the command's, shared with EAGLE-3 so that a comparison of the two
is a comparison of the drafts: the same rows (`draft_training`: source, the target's greedy responses), the same
loop (`builder.train.runner`: AdamW, warmup + cosine, grad-norm clip, checkpoints, resume), the same step budget,
the same training-time test depth (`ttt_steps`, the draft unrolled on its own outputs as `builder.train.eagle.unroll`
does) and the same per-depth weight (`loss_decay`**k).

The loss is EAGLE-1's own (upstream `eagle/train/main.py`): SmoothL1 between the predicted and the target's next
hidden state (after the target's final norm) plus p_w = 0.1 × the cross-entropy of the draft's logits against the
target's distribution, with upstream's uniform noise (0.2) on the target's features — drawn from torch's global
generator, which the runner's checkpoints carry, so a resumed run is bit-identical. Padding (the rows' mask) is left
out of the loss. The fc has no bias, as the published Llama 3 EAGLE drafts (`"bias": false`).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch
import torch.nn.functional as F

from builder.recipe.draft_training import DraftTraining

ATTR = "trtspec_eagle_draft"  # the draft's attribute on the target model while training
NOISE, P_W = 0.2, 0.1  # upstream EAGLE-1's feature noise and token-loss weight


def draft_config(target_cfg):
    """The draft's LlamaConfig: the target's (layer shape, RoPE) with one decoder layer."""
    return dataclasses.replace(target_cfg, num_hidden_layers=1)


def convert(model, run: DraftTraining, target_cfg) -> None:
    """Attach a fresh EAGLE-1 draft (weights from `run.seed`) to `model` (HF LlamaForCausalLM), target frozen."""
    from builder.speculative.eagle.draft_model import EagleDraft

    for p in model.parameters():
        p.requires_grad_(False)
    torch.manual_seed(run.seed)
    draft = EagleDraft(draft_config(target_cfg), fc_bias=False).to(model.lm_head.weight.device)
    with torch.no_grad():
        draft.embed_tokens.weight.copy_(model.get_input_embeddings().weight)
    draft.set_lm_head(model.lm_head.weight)
    setattr(model, ATTR, draft)


def draft_of(model):
    return getattr(model, ATTR)


def trainable(model) -> dict[str, torch.nn.Parameter]:
    return {k: p for k, p in draft_of(model).named_parameters() if p.requires_grad}


def loss_fn(model, run: DraftTraining, noise: float = NOISE, p_w: float = P_W):
    """The runner's step loss: EAGLE-1's loss over `run.ttt_steps` unrolled levels, and the top-1 agreement with
    the target per level."""
    from builder.train.eagle import unroll

    draft = draft_of(model)

    def step(tokens: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, list[float]]:  # [B, L] each
        with torch.no_grad():
            hidden = model.model(input_ids=tokens, attention_mask=mask.to(torch.int64)).last_hidden_state  # (B, L, C)
        outs = unroll(draft, tokens, hidden.to(draft.dtype), run.ttt_steps, noise)
        return level_losses(outs, hidden, mask, draft.lm_head_weight, p_w, run.loss_decay)

    return step


def level_losses(
    outs: list[torch.Tensor],  # ttt × [B, L-1, C]: level s's prediction at every anchor
    hidden: torch.Tensor,  # [B, L, C] the target's
    mask: torch.Tensor,  # [B, L] bool, False on padding
    lm_head: torch.Tensor,  # [V, C]
    p_w: float,
    decay: float,
) -> tuple[torch.Tensor, list[float]]:
    """Σ_s decay^(s-1) · masked mean of (SmoothL1 + p_w · soft CE) at level s; the top-1 agreement per level."""
    L = hidden.shape[1]
    total, accs = hidden.new_zeros(()), []
    for s, out in enumerate(outs, start=1):
        n = L - s  # anchors i with i + s ≤ L - 1
        pred, target = out[:, :n], hidden[:, s : s + n]  # (B, n, C)
        valid = (mask[:, :n] & mask[:, s : s + n]).to(pred.dtype)  # (B, n)
        weight = valid / valid.sum().clamp(min=1.0)
        vloss = F.smooth_l1_loss(pred, target, reduction="none").mean(-1)  # (B, n)
        with torch.no_grad():
            t_logits = target @ lm_head.T  # (B, n, V)
            p = F.softmax(t_logits, dim=-1)
        d_logits = pred @ lm_head.T
        ploss = -(p * F.log_softmax(d_logits, dim=-1)).sum(-1)  # (B, n)
        total = total + decay ** (s - 1) * ((vloss + p_w * ploss) * weight).sum()
        hit = (d_logits.detach().argmax(-1) == t_logits.argmax(-1)).to(pred.dtype)
        accs.append(float((hit * weight).sum()))
    return total, accs


def write(model, folder: Path, bos: int | None, eos: int | None, dtype: torch.dtype) -> None:
    """config.json + model.safetensors in SafeAILab's EAGLE-1 layout (embed_tokens included, as upstream saves it),
    read back through our strict loader before the folder is renamed into place."""
    from safetensors.torch import save_file

    from builder.speculative.eagle.draft_model import WEIGHTS, load_eagle

    draft = draft_of(model)
    state = {k: t.detach().to(dtype).cpu().contiguous() for k, t in draft.state_dict().items()}
    save_file(state, str(folder / WEIGHTS), metadata={"format": "pt"})
    eos_id = 0 if eos is None else eos
    cfg = draft.config_dict(eos_id if bos is None else bos, eos_id, str(dtype).removeprefix("torch."))
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")
    load_eagle(folder, model.get_input_embeddings().weight.detach().float().cpu())  # keys, shapes, embedding
