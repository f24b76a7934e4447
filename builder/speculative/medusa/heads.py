"""Medusa heads in the FasterDecoding/Medusa layout, and their strict safetensors loader.

Upstream (`medusa/model/medusa_model.py`) keeps the heads as an `nn.ModuleList` of
`nn.Sequential(ResBlock × num_layers, nn.Linear(hidden, vocab, bias=False))`, where
`ResBlock(x) = x + SiLU(linear(x))` with a biased, zero-initialised `linear`. The heads read the
target's last hidden state after the final norm (`StepOutput.hidden`); head k drafts the token k + 2
positions ahead of the position whose hidden state it reads (the target's own LM head gives k + 1).

Checkpoint: `config.json` (`medusa_num_heads`, `medusa_num_layers`, `base_model_name_or_path`, and
optionally `hidden_size` / `vocab_size`) plus `medusa_lm_head.safetensors` holding the ModuleList's
state dict: `{head}.{layer}.linear.weight|bias` for each residual block and `{head}.{num_layers}.weight`
for the vocabulary projection. Heads trained with upstream's original script are saved as
`medusa_lm_head.pt` instead: `torch.save(medusa_head.state_dict())`, the same keys in a pickle
(`medusa/train/train_legacy.py`@46f911eb; upstream reads it with `torch.load` +
`load_state_dict(strict=False)`, `medusa/model/medusa_model.py`@e2a5d20c). It is read only with
`allow_pickle` (the recipe's `speculative.allow_pickle`), through `torch.load(weights_only=True)`, and
checked exactly as the safetensors file is (`builder.model.pickled`).

One difference: upstream builds `[ResBlock(hidden)] * num_layers`, i.e. one block *shared* by all
layers of a head. Here every layer has its own block; an upstream checkpoint (whose per-layer tensors
are equal) loads unchanged, and with `num_layers == 1` the two are identical.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from builder.errors import UserError
from builder.model.config import read_json_object
from builder.model.loader import check_keys, read_draft_weights
from builder.model.pickled import MEDUSA
from builder.speculative.medusa.config import MedusaConfig
from builder.speculative.method import LoadOptions

CONFIG = "config.json"
WEIGHTS = MEDUSA.weights  # medusa_lm_head.safetensors
PICKLED_WEIGHTS = MEDUSA.pickles[0]  # medusa_lm_head.pt: read only with allow_pickle


class ResBlock(nn.Module):
    """x + SiLU(linear(x)); the linear's weight starts at zero, so the block starts as the identity."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden_size, hidden_size)
        nn.init.zeros_(self.linear.weight)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., C] -> [..., C]
        return x + self.act(self.linear(x))


class MedusaHeads(nn.ModuleList):
    """`num_heads` Medusa heads; `state_dict()` keys are exactly upstream's (`0.0.linear.weight`, …)."""

    def __init__(self, num_heads: int, num_layers: int, hidden_size: int, vocab_size: int) -> None:
        super().__init__(
            nn.Sequential(
                *(ResBlock(hidden_size) for _ in range(num_layers)),
                nn.Linear(hidden_size, vocab_size, bias=False),
            )
            for _ in range(num_heads)
        )
        self.num_heads, self.num_layers = num_heads, num_layers
        self.hidden_size, self.vocab_size = hidden_size, vocab_size

    def forward(
        self,
        hidden: torch.Tensor,  # [..., C] target hidden state after the final norm
    ) -> torch.Tensor:  # -> [K, ..., V] logits; row k drafts the token k + 2 ahead
        return torch.stack([head(hidden) for head in self], dim=0)

    def init_from_lm_head(self, lm_head_weight: torch.Tensor) -> None:  # [V, C]
        """Start every head's projection from the target's LM head, as upstream does."""
        with torch.no_grad():
            for head in self:
                proj = head[-1]  # type: ignore[index]  # each head is a Sequential
                proj.weight.copy_(lm_head_weight)

    def config_dict(self, base_model_name_or_path: str) -> dict[str, Any]:
        """The `config.json` upstream writes (MedusaConfig), plus the head shapes."""
        return {
            "medusa_num_heads": self.num_heads,
            "medusa_num_layers": self.num_layers,
            "base_model_name_or_path": base_model_name_or_path,
            "hidden_size": self.hidden_size,
            "vocab_size": self.vocab_size,
        }


def expected_shapes(num_heads: int, num_layers: int, hidden_size: int, vocab_size: int) -> dict[str, tuple[int, ...]]:
    """Every key of an upstream Medusa state dict with its shape."""
    shapes: dict[str, tuple[int, ...]] = {}
    for h in range(num_heads):
        for layer in range(num_layers):
            shapes[f"{h}.{layer}.linear.weight"] = (hidden_size, hidden_size)
            shapes[f"{h}.{layer}.linear.bias"] = (hidden_size,)
        shapes[f"{h}.{num_layers}.weight"] = (vocab_size, hidden_size)
    return shapes


def _positive_int(raw: dict[str, Any], key: str, source: str) -> int:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UserError(f"expected a positive integer, got {value!r}", location=source, field=key)
    return value


def _optional_int(raw: dict[str, Any], key: str, source: str) -> int | None:
    return None if raw.get(key) is None else _positive_int(raw, key, source)


def read_config(path: Path) -> dict[str, Any]:
    """The decoded `config.json` of a Medusa checkpoint directory."""
    return read_json_object(path / CONFIG, missing="no config.json in the Medusa checkpoint directory")


def load_medusa(
    path: str | Path,
    *,
    hidden_size: int | None = None,
    vocab_size: int | None = None,
    dtype: torch.dtype = torch.float32,
    allow_pickle: bool = False,
    opt_in: str = "allow_pickle",
) -> MedusaHeads:
    """Medusa heads from a checkpoint directory, checked key by key and shape by shape.

    `hidden_size` / `vocab_size` are the target's (pass them to check the heads fit it). Absent from
    upstream configs, the shapes are then taken from the weights and checked for consistency.
    `allow_pickle` reads upstream's `medusa_lm_head.pt` when there is no safetensors file (`opt_in` names the
    setting in the refusal).
    """
    path = Path(path)
    raw = read_config(path)
    source = str(path / CONFIG)
    num_heads = _positive_int(raw, "medusa_num_heads", source)
    num_layers = _positive_int(raw, "medusa_num_layers", source)
    tensors, weights_file = read_draft_weights(path, MEDUSA, allow_pickle, opt_in)
    head_key = f"0.{num_layers}.weight"
    if head_key not in tensors or tensors[head_key].dim() != 2:
        raise UserError(
            f"missing key {head_key!r} (or it is not a matrix); medusa_num_layers={num_layers}",
            location=weights_file,
            field=head_key,
        )
    found_v, found_c = tensors[head_key].shape
    for key, want, found in (("hidden_size", hidden_size, found_c), ("vocab_size", vocab_size, found_v)):
        cfg_value = _optional_int(raw, key, source)
        for what, value in ((source, cfg_value), ("the target model", want)):
            if value is not None and value != found:
                raise UserError(
                    f"{key} {value} from {what} disagrees with the weights ({found})", location=weights_file, field=key
                )
    expected = expected_shapes(num_heads, num_layers, found_c, found_v)
    check_keys(tensors, expected, weights_file, "Medusa head")
    heads = MedusaHeads(num_heads, num_layers, found_c, found_v)
    heads.load_state_dict({k: t.to(dtype) for k, t in tensors.items()}, strict=True)
    return heads.to(dtype).eval()


# -- the method's DraftCheckpoint reader (`method.METHOD.draft`: loader, checker) --


def load_for_recipe(c: MedusaConfig, folder: Path, model, opts: LoadOptions):
    """The heads over `model` (its width and vocabulary checked), at least `num_heads` of them."""
    heads = load_medusa(
        folder,
        hidden_size=model.cfg.hidden_size,
        vocab_size=model.cfg.vocab_size,
        dtype=model.dtype,
        allow_pickle=opts.allow_pickle,
        opt_in=opts.opt_in,
    )
    if heads.num_heads < c.num_heads:
        raise UserError(
            f"the checkpoint has {heads.num_heads} heads, the recipe asks for {c.num_heads}",
            field="speculative.num_heads",
        )
    return heads


def check_folder(folder: Path) -> None:
    load_medusa(folder)
