"""Which pickled weight files trtspec reads — only these names, only with an opt-in, only tensors.

No torch here: `trtspec validate` runs these rules on local checkpoints before anything heavy is imported.

A checkpoint layout names its safetensors files and the pickled files upstream publishes instead. When a
directory holds any of the safetensors names they win and no pickle is read. Otherwise the first pickled
name present is what loading reads, and only when the recipe opts in (`model.allow_pickle`,
`speculative.allow_pickle`); the reader is `torch.load(map_location="cpu", weights_only=True)`, whose
restricted unpickler builds tensors, dicts and plain values but no other object. A pickle under any other
name (`model.pt`, `training_args.bin`, …) is never read.

Upstream layouts (the key names inside each file are the ones our safetensors loaders already check):
- target: transformers' `pytorch_model.bin` or `pytorch_model.bin.index.json` with shards named
  `pytorch_model-00001-of-00002.bin` (transformers `utils/__init__.py` WEIGHTS_NAME / WEIGHTS_INDEX_NAME,
  `modeling_utils.py` shard naming); keys `model.layers.{i}.…`, as in model.safetensors.
- medusa: `medusa_lm_head.pt` = `torch.save(medusa_head.state_dict())` (FasterDecoding/Medusa
  `medusa/train/train_legacy.py`@46f911eb; read back by `medusa/model/medusa_model.py`@e2a5d20c with
  `torch.load` + `load_state_dict(strict=False)`); keys `{head}.{layer}.linear.weight|bias`,
  `{head}.{num_layers}.weight`, as in medusa_lm_head.safetensors.
- eagle: `pytorch_model.bin` = the state dict of EAGLE-1's draft `Model` (SafeAILab/EAGLE
  `eagle/model/ea_model.py`@2320d52e loads it with `load_state_dict(strict=True)` into `cnets.Model`, so its
  keys are exactly that module's: `embed_tokens.weight`, `fc.weight` (+ `fc.bias` when config.json's `bias`
  is true; the Llama 3 drafts' configs say false, `eagle/train/EAGLE-LLaMA3-Instruct-8B`@8937b4e6),
  `layers.{i}.self_attn.{q,k,v,o}_proj.weight`, `layers.{i}.mlp.{gate,up,down}_proj.weight`,
  `layers.{i}.post_attention_layernorm.weight` and `input_layernorm` for i > 0), as in model.safetensors.
- eagle3: `pytorch_model.bin` = `torch.save` of SafeAILab's EAGLE-3 draft state dict (`eagle/traineagle3/cnets.py`
  Model: `fc`, `midlayer.*`, `norm`, `lm_head`, `d2t` int64, `t2d` bool; `embed_tokens.weight` only in drafts of
  another width than their target), as yuhuili/EAGLE3-LLaMA3.1-Instruct-8B ships it; the same file name as
  EAGLE-1's and a single-file target's, told apart after conversion by the strict checks
  (`builder.speculative.eagle3.checkpoint`, `docs/eagle3-checkpoints.md`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from builder.errors import UserError

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")  # names that hint at a pickle
SHARD = re.compile(r"pytorch_model-\d{5}-of-\d{5}\.bin")  # transformers' shard names for pytorch_model.bin


@dataclass(frozen=True)
class Layout:
    """The weight files of one kind of checkpoint directory, in the order they are looked for."""

    what: str  # for messages: "target", "Medusa", "EAGLE"
    safetensors: tuple[str, ...]  # any of these present: read it, never a pickle
    pickles: tuple[str, ...]  # upstream's pickled names, read only with the opt-in
    index: str | None = None  # the pickled index among `pickles`, whose shards must match SHARD

    @property
    def weights(self) -> str:
        """The single-file safetensors name (what a conversion writes)."""
        return next(n for n in self.safetensors if not n.endswith(".json"))


TARGET = Layout(
    "target",
    ("model.safetensors.index.json", "model.safetensors"),
    ("pytorch_model.bin.index.json", "pytorch_model.bin"),
    index="pytorch_model.bin.index.json",
)
MEDUSA = Layout("Medusa", ("medusa_lm_head.safetensors",), ("medusa_lm_head.pt",))
EAGLE = Layout("EAGLE", ("model.safetensors",), ("pytorch_model.bin",))
EAGLE3 = Layout("EAGLE-3", ("model.safetensors",), ("pytorch_model.bin",))


def pickle_to_read(directory: Path, layout: Layout) -> Path | None:
    """The pickled file loading `directory` would read; None when a safetensors file of the layout is there or
    no pickle of the layout is."""
    if any((directory / name).is_file() for name in layout.safetensors):
        return None
    return next((directory / name for name in layout.pickles if (directory / name).is_file()), None)


def opt_in_error(file: Path, field: str) -> UserError:
    """The refusal of a pickled file without the opt-in, naming the setting that allows it (a recipe field, or
    a command-line flag such as `--allow-pickle`) and the file."""
    flag = field.startswith("--")
    how = (f"with {field}" if flag else f"with {field}: true") + (
        " (torch.load(weights_only=True): tensors only, no code objects)"
    )
    convert = (
        ""
        if flag
        else (
            f", or convert it once to safetensors with `trtspec convert-draft {file.parent} "
            "--allow-pickle` and point the recipe at the result"
        )
    )
    return UserError(
        f"{file.name} is a pickle; it is read only {how}{convert}",
        location=str(file),
        field=field,
        allowed=None if flag else "true",
    )


def stray_pickles(directory: Path, layout: Layout) -> list[str]:
    """Pickle-like files the layout never reads (e.g. `model.pt`), to name when no weights are found."""
    if not directory.is_dir():
        return []
    return sorted(
        p.name
        for p in directory.iterdir()
        if p.is_file() and p.suffix in PICKLE_SUFFIXES and p.name not in layout.pickles
    )


def no_weights_error(directory: Path, layout: Layout, allow_pickle: bool) -> UserError:
    """No readable weights in `directory`: say which names were looked for and which files were not read."""
    looked = [*layout.safetensors, *(layout.pickles if allow_pickle else ())]
    stray = stray_pickles(directory, layout)
    tail = (
        f"; not read: {', '.join(stray)} (pickles are read only under the names {', '.join(layout.pickles)})"
        if stray
        else ""
    )
    return UserError(f"no {layout.what} weights found; looked for {', '.join(looked)}{tail}", location=str(directory))


def check_shard_name(shard: str, index: Path) -> None:
    """A pickled index may name only transformers' shard files (a plain name, `pytorch_model-NNNNN-of-NNNNN.bin`)."""
    if not SHARD.fullmatch(shard):
        raise UserError(
            f"shard {shard!r} is not a pytorch_model-NNNNN-of-NNNNN.bin file name; no other pickled file is read",
            location=str(index),
            field="weight_map",
        )
