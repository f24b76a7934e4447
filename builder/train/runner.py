"""The optimizer loop of `trtspec train-draft`, its checkpoints and its resume (any draft whose step gives a loss).

A run lives in a work folder beside its output (`.<out>.train/`): `run.json` (the run's key), `data.safetensors`
(the training rows, `builder.train.draft_data`) and `checkpoint.pt` (the trainable tensors, AdamW's state, torch's
RNG state, the losses so far, the step), each written whole to a temp file and renamed, so a kill -9 at any instant
leaves the previous checkpoint intact. A run restarted with the same key continues from its checkpoint and ends
bit-for-bit where the uninterrupted run ends (same host and thread count): the rows of a step are a function of
(seed, step) (`TrainingSet.rows_at`), the learning rate of the step alone, and nothing else carries state.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from builder.recipe.draft_training import DraftTraining
from builder.train.draft_data import TrainingSet
from builder.train.schedule import cosine_lr, set_lr

CHECKPOINT, DATA, RUN = "checkpoint.pt", "data.safetensors", "run.json"
# (tokens [B, L], mask [B, L]) -> (loss, per-step accuracies of this batch: one per TTT step / head)
LossFn = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, list[float]]]


def work_dir_of(out: Path) -> Path:
    return out.parent / f".{out.name}.train"


@dataclass
class History:
    """What the loop has done: the step reached, every step's loss and accuracies, seconds spent training."""

    step: int = 0
    losses: list[float] = field(default_factory=list)
    accs: list[list[float]] = field(default_factory=list)
    seconds: float = 0.0

    def tail_loss(self, frac: float = 0.1) -> float:
        """Mean loss over the last `frac` of the steps (the run's final loss)."""
        n = max(1, int(len(self.losses) * frac))
        return sum(self.losses[-n:]) / n if self.losses else float("nan")

    def tail_accs(self, frac: float = 0.1) -> list[float]:
        n = max(1, int(len(self.accs) * frac))
        rows = self.accs[-n:]
        return [sum(col) / len(rows) for col in zip(*rows)] if rows else []


class WorkDir:
    """The run's work folder (module docstring)."""

    def __init__(self, path: Path, key: str) -> None:
        self.path, self.key = path, key

    def matches(self) -> bool:
        try:
            return json.loads((self.path / RUN).read_text())["key"] == self.key
        except (OSError, ValueError, KeyError, TypeError):
            return False

    def start(self, resume: bool) -> bool:
        """Make the folder ready; True when it holds this key's earlier run (resumed), False when started fresh."""
        if resume and self.matches():
            return True
        if self.path.exists():
            shutil.rmtree(self.path)
        self.path.mkdir(parents=True)
        _write_atomic(self.path / RUN, json.dumps({"key": self.key}, indent=2).encode())
        return False

    def data(self) -> TrainingSet | None:
        return TrainingSet.load(self.path / DATA) if (self.path / DATA).is_file() else None

    def save_data(self, data: TrainingSet) -> None:
        data.save(self.path / DATA)

    def load(self) -> dict | None:
        f = self.path / CHECKPOINT
        return torch.load(f, map_location="cpu", weights_only=True) if f.is_file() else None

    def save(self, state: dict) -> None:
        tmp = self.path / (CHECKPOINT + ".tmp")
        torch.save(state, tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        tmp.replace(self.path / CHECKPOINT)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def _state(params: dict[str, torch.nn.Parameter], opt: torch.optim.Optimizer, h: History) -> dict:
    return {
        "step": h.step,
        "params": {k: p.detach().cpu().clone() for k, p in params.items()},
        "optim": opt.state_dict(),
        "rng": torch.get_rng_state(),
        "losses": torch.tensor(h.losses, dtype=torch.float64),
        "accs": torch.tensor(h.accs, dtype=torch.float64),
        "seconds": h.seconds,
    }


def _restore(state: dict, params: dict[str, torch.nn.Parameter], opt: torch.optim.Optimizer) -> History:
    if set(state["params"]) != set(params):
        raise RuntimeError("the checkpoint's tensors are not this draft's")  # the key covers the draft: not reached
    with torch.no_grad():
        for k, p in params.items():
            p.copy_(state["params"][k])
    opt.load_state_dict(state["optim"])
    torch.set_rng_state(state["rng"])
    return History(int(state["step"]), state["losses"].tolist(), state["accs"].tolist(), float(state["seconds"]))


def optimizer(params: dict[str, torch.nn.Parameter], run: DraftTraining) -> torch.optim.Optimizer:
    """AdamW as SafeAILab's EAGLE-3 training (β = (0.9, 0.95), no weight decay; `ds_config.json`)."""
    return torch.optim.AdamW(list(params.values()), lr=run.lr, betas=(0.9, 0.95), weight_decay=0.0)


def train_loop(
    loss_fn: LossFn,
    params: dict[str, torch.nn.Parameter],  # the trainable tensors by name (what a checkpoint holds)
    data: TrainingSet,
    run: DraftTraining,
    work: WorkDir,
    device: torch.device,
    log: Callable[[str], None],
    resume: bool = True,
) -> History:
    """Train `run.steps` steps (from the work folder's checkpoint when there is one and `resume`), checkpointing
    every `run.checkpoint_every` steps and at the end; a progress bar on a terminal, a line per checkpoint otherwise."""
    opt = optimizer(params, run)
    state = work.load() if resume else None
    h = _restore(state, params, opt) if state is not None else History()
    if state is not None:
        log(f"resumed at step {h.step}/{run.steps}")
    warmup = max(1, run.steps // 20)
    bar = _bar(run.steps, h.step)
    try:
        while h.step < run.steps:
            t0 = time.monotonic()
            rows = data.rows_at(h.step, run.batch, run.seed)
            tokens, mask = data.tokens[rows].to(device), data.mask[rows].to(device)  # (B, L) each
            set_lr(opt, cosine_lr(h.step, run.steps, run.lr, warmup))
            loss, accs = loss_fn(tokens, mask)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(list(params.values()), run.grad_clip)
            opt.step()
            h.losses.append(float(loss.item()))
            h.accs.append([float(a) for a in accs])
            h.step += 1
            h.seconds += time.monotonic() - t0
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{h.losses[-1]:.3f}", acc=f"{h.accs[-1][0]:.2f}" if accs else "-")
            if h.step % run.checkpoint_every == 0 or h.step == run.steps:
                work.save(_state(params, opt, h))
                if bar is None:
                    acc = " ".join(f"{a:.3f}" for a in h.tail_accs(0.02))
                    log(
                        f"step {h.step}/{run.steps} loss {h.tail_loss(0.02):.4f} accuracy {acc} "
                        f"({h.seconds / max(1, h.step):.3f} s/step); checkpoint written"
                    )
    finally:
        if bar is not None:
            bar.close()
    return h


def _bar(total: int, done: int):
    if not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=done, desc="train-draft", unit="step", file=sys.stderr, dynamic_ncols=True)
