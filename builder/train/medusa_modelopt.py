"""Medusa heads trained with NVIDIA modelopt's speculative module, written in FasterDecoding's layout.

`mtsp.convert(model, [("medusa", {...})])` (modelopt 0.47 `torch/speculative/plugins/hf_medusa.py`) adds
`medusa_heads`: per head `Sequential(ResBlock × num_layers, Linear(C, V, bias=False))` over the target's last hidden
state after the final norm, ResBlock = x + SiLU(linear(x)) with a zero-initialised weight — exactly
`builder.speculative.medusa.heads.MedusaHeads`, whose state-dict keys are modelopt's without `medusa_heads.`.
Its loss takes `labels` already shifted by one (labels[t] = token t+1; its head i then reads labels[t + 1 + i], the
token t + i + 2 — Medusa's convention, ours too), cross-entropy Σ_i 0.8^i · 0.2 with the target frozen.

One choice of ours: each head's projection starts from the target's LM head, as FasterDecoding's Medusa does
(`medusa/model/medusa_model.py`), where modelopt leaves it random — a short run on the CPU starts from the
target's own next-token guess instead of noise.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import torch

from builder.recipe.draft_training import DraftTraining

PREFIX = "medusa_heads."


def convert(model, run: DraftTraining, num_heads: int, num_layers: int):
    """Make `model` (HF LlamaForCausalLM) modelopt's Medusa model in place, heads seeded by `run.seed`."""
    import modelopt.torch.speculative as mtsp

    torch.manual_seed(run.seed)
    with contextlib.redirect_stdout(io.StringIO()):
        mtsp.convert(model, [("medusa", {"medusa_num_heads": num_heads, "medusa_num_layers": num_layers})])
    with torch.no_grad():
        for head in model.medusa_heads:
            head[-1].weight.copy_(model.lm_head.weight)
    return model


def trainable(model) -> dict[str, torch.nn.Parameter]:
    return {k: p for k, p in model.medusa_heads.named_parameters()}


def loss_fn(model):
    """The runner's step loss: modelopt's Medusa loss, and each head's top-1 accuracy on the batch."""

    def step(tokens: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, list[float]]:  # [B, L] each
        labels = torch.full_like(tokens, -100)
        labels[:, :-1] = torch.where(mask[:, 1:], tokens[:, 1:], -100)  # labels[t] = token t+1 (modelopt's input)
        out = model(input_ids=tokens, attention_mask=mask.to(torch.int64), labels=labels)
        accs = []
        for i, logits in enumerate(out.medusa_logits):  # head i at t: token t + i + 2 = labels[t + i + 1]
            lab = labels[:, i + 1 :]
            pred = logits[:, : lab.shape[1]].detach().argmax(-1)
            ok = lab >= 0
            accs.append(float(((pred == lab) & ok).sum()) / max(1, int(ok.sum())))
        return out.loss, accs

    return step


def write(model, folder: Path, base_model: str, dtype: torch.dtype) -> None:
    """config.json + medusa_lm_head.safetensors (FasterDecoding's layout, `builder.speculative.medusa.heads`);
    `base_model`: the config's base_model_name_or_path (the target, relative to the heads' folder)."""
    from safetensors.torch import save_file

    from builder.speculative.medusa.heads import WEIGHTS, MedusaHeads

    state = {k.removeprefix(PREFIX): v for k, v in model.state_dict().items() if k.startswith(PREFIX)}
    C, V = model.lm_head.weight.shape[1], model.lm_head.weight.shape[0]
    heads = MedusaHeads(len(model.medusa_heads), len(model.medusa_heads[0]) - 1, C, V)
    heads.load_state_dict(state, strict=True)  # the same keys and shapes, or an error here
    tensors = {k: t.detach().to(dtype).cpu().contiguous() for k, t in heads.state_dict().items()}
    save_file(tensors, str(folder / WEIGHTS), metadata={"format": "pt"})
    cfg = heads.config_dict(base_model)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")
