"""The methods `trtspec train-draft` trains, one `Trainer` each: how a method plans, converts the target, names its
trainable tensors, computes a step's loss and writes its draft (`builder.train.train_draft` runs them; modelopt and the
method's modules are imported only when a function runs)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import torch

from builder.errors import UserError
from builder.recipe.draft_training import DraftTraining
from builder.train.draft_data import special_ids

if TYPE_CHECKING:
    from builder.recipe.schema import Recipe


@dataclass(frozen=True)
class DraftRun:
    """What one `train-draft` run trains (everything `plan_run` checked)."""

    recipe: Recipe
    recipe_path: Path
    run: DraftTraining
    method: str
    aux_layers: tuple[int, int, int] | None  # EAGLE-3's, ascending (output-of-layer ids)
    target_dir: Path
    tokenizer_path: Path
    data_dir: Path  # a jsonl source's relative path resolves here
    out: Path


@dataclass(frozen=True)
class Trainer:
    """One method's modelopt glue (functions below; modelopt is imported only when they run)."""

    about: str  # the record's "trainer"
    accuracy_of: str  # what the accuracies are per
    plan: Callable  # (speculative section, run, target layers, source) -> EAGLE-3's aux ids | None; UserError
    shape: Callable  # (DraftRun) -> what the recipe says of the draft's shape (the key's "draft")
    convert: Callable  # (model, DraftRun, rows, keep ids) -> the draft vocabulary's size; converts in place
    trainable: Callable  # (model) -> {name: parameter}
    loss_fn: Callable  # (model, DraftRun) -> the runner's step loss
    write: Callable  # (model, DraftRun, folder, storage dtype) -> the checkpoint's files in folder


def _plan_eagle3(spec, run: DraftTraining, layers: int, source: str) -> tuple[int, int, int]:
    from builder.speculative.eagle3.checkpoint import resolve_aux_layers

    return resolve_aux_layers(spec.aux_layers, None, layers, source)  # ascending, as modelopt concatenates them


def _plan_medusa(spec, run: DraftTraining, layers: int, source: str) -> None:
    if run.draft_vocab_size is not None:
        raise UserError(
            "a draft vocabulary is EAGLE-3's (its own LM head); Medusa heads draft over the whole vocabulary",
            field="draft_training.draft_vocab_size",
            allowed="null",
        )


def _plan_eagle(spec, run: DraftTraining, layers: int, source: str) -> None:
    if run.draft_vocab_size is not None:
        raise UserError(
            "a trained draft vocabulary is EAGLE-3's (its own LM head); an EAGLE-1/2 draft reads the target's LM head "
            "and drafts over part of it at run time with speculative.draft_vocab",
            field="draft_training.draft_vocab_size",
            allowed="null",
        )


def _shape_eagle3(dr: DraftRun) -> dict:
    assert dr.aux_layers is not None
    return {"aux_layers": list(dr.aux_layers)}


def _shape_medusa(dr: DraftRun) -> dict:
    spec = dr.recipe.speculative
    return {"num_heads": spec.num_heads, "num_layers": spec.num_layers}


def _shape_eagle(dr: DraftRun) -> dict:
    return {"layers": 1, "fc_bias": False}


def _trainable_eagle(model):
    from builder.train import eagle1

    return eagle1.trainable(model)


def _loss_eagle(model, dr: DraftRun):
    from builder.train import eagle1

    return eagle1.loss_fn(model, dr.run)


def _convert_eagle(model, dr: DraftRun, data, keep: tuple[int | None, ...]) -> int:
    from builder.model.config import LlamaConfig, read_json_object
    from builder.train import eagle1

    cfg_file = dr.target_dir / "config.json"
    eagle1.convert(model, dr.run, LlamaConfig.from_hf_dict(read_json_object(cfg_file), str(cfg_file)))
    return model.config.vocab_size


def _write_eagle(model, dr: DraftRun, folder: Path, store: torch.dtype) -> None:
    from builder.train import eagle1

    bos, eos, _, _ = special_ids(dr.target_dir)
    eagle1.write(model, folder, bos, eos, store)


def _trainable_eagle3(model):
    from builder.train import eagle3

    return eagle3.trainable(model)


def _loss_eagle3(model, dr: DraftRun):
    from builder.train import eagle3

    return eagle3.loss_fn(model)


def _trainable_medusa(model):
    from builder.train import medusa_modelopt

    return medusa_modelopt.trainable(model)


def _loss_medusa(model, dr: DraftRun):
    from builder.train import medusa_modelopt

    return medusa_modelopt.loss_fn(model)


def _convert_eagle3(model, dr: DraftRun, data, keep: tuple[int | None, ...]) -> int:
    from builder.train import eagle3
    from builder.train.draft_data import frequent_ids

    vocab = model.config.vocab_size
    vd = dr.run.draft_vocab_size or vocab
    kept = tuple(t for t in keep if t is not None)
    vocab_ids = None if vd == vocab else frequent_ids(data, vd, vocab, kept)
    eagle3.convert(model, dr.run, dr.aux_layers, vocab_ids)
    return vd


def _convert_medusa(model, dr: DraftRun, data, keep: tuple[int | None, ...]) -> int:
    from builder.train import medusa_modelopt

    spec = dr.recipe.speculative
    medusa_modelopt.convert(model, dr.run, spec.num_heads, spec.num_layers)
    return model.config.vocab_size


def _write_eagle3(model, dr: DraftRun, folder: Path, store: torch.dtype) -> None:
    """modelopt's own export → our strict EAGLE-3 reader → SafeAILab's layout."""
    from builder.speculative.eagle3.draft_model import load_eagle3
    from builder.train.eagle3 import export_modelopt

    embed = model.get_input_embeddings().weight.detach().float().cpu()
    with tempfile.TemporaryDirectory(prefix=f".{dr.out.name}.export-", dir=folder.parent) as tmp:
        export_modelopt(model, Path(tmp))
        draft = load_eagle3(Path(tmp), embed, model.config.num_hidden_layers, dr.aux_layers)
    draft.save(folder, "safeailab", store)


def _write_medusa(model, dr: DraftRun, folder: Path, store: torch.dtype) -> None:
    import os

    from builder.train.medusa_modelopt import write

    write(model, folder, os.path.relpath(dr.target_dir.resolve(), dr.out.resolve()), store)


TRAINERS = {  # the methods train-draft trains, by the recipe's speculative.method
    "eagle3": Trainer(
        "NVIDIA modelopt (modelopt.torch.speculative, HF EAGLE-3) with SafeAILab's draft-layer math "
        "(builder/train/eagle3.py)",
        "TTT step",
        _plan_eagle3,
        _shape_eagle3,
        _convert_eagle3,
        _trainable_eagle3,
        _loss_eagle3,
        _write_eagle3,
    ),
    "eagle": Trainer(
        "trtspec's EAGLE-1 draft (EAGLE-2 runs the same) on the runner's loop shared with EAGLE-3: EAGLE-1's loss "
        "(feature SmoothL1 + 0.1 token CE), unrolled ttt_steps levels (builder/train/eagle1.py)",
        "TTT step",
        _plan_eagle,
        _shape_eagle,
        _convert_eagle,
        _trainable_eagle,
        _loss_eagle,
        _write_eagle,
    ),
    "medusa": Trainer(
        "NVIDIA modelopt (modelopt.torch.speculative, HF Medusa), heads started from the target's LM head "
        "(builder/train/medusa_modelopt.py)",
        "head",
        _plan_medusa,
        _shape_medusa,
        _convert_medusa,
        _trainable_medusa,
        _loss_medusa,
        _write_medusa,
    ),
}
