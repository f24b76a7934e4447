"""The learning-rate schedule of the training loops (drafts here, the fixture's base model in devtools.fixture)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def cosine_lr(step: int, total: int, peak: float, warmup: int) -> float:
    """Linear warmup to `peak`, cosine decay to 10% of it."""
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, t))))


def set_lr(opt: torch.optim.Optimizer, lr: float) -> None:
    """Set every group's lr to `lr` times the group's optional "scale"."""
    for group in opt.param_groups:
        group["lr"] = lr * group.get("scale", 1.0)
