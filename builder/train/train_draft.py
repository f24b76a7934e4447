"""`trtspec train-draft`: the recipe's draft trained for its target, written where the recipe names it.

`plan_run` checks what the recipe asks (a method we train, aux layers, the data source, the pickle opt-in) before
anything heavy runs; `train_draft` then:
1. returns at once when the output folder already holds this run's draft (`training.json` carries the run's key:
   the settings, the target's and the source's bytes, the tools' versions, the device, dtype and thread count, and
   the code of this package; `force` retrains);
2. makes the training rows (the target writes the responses where the recipe says so) or reads them from the work
   folder of an interrupted run of the same key (`builder.train.runner`), or from the rows cache, where another
   draft of this target was trained on the same data (`builder.train.rows_cache`);
3. picks EAGLE-3's draft vocabulary (the most frequent tokens of those rows, `draft_training.draft_vocab_size`);
4. converts the target with modelopt (EAGLE-3: `builder.train.eagle3`; Medusa: `builder.train.medusa_modelopt`) or
   attaches our EAGLE-1 draft (EAGLE-1/2: `builder.train.eagle1`; modelopt has no EAGLE-1), trains (the same loop,
   checkpoints, resume) and writes the draft — EAGLE-3: modelopt's own export read back by our strict reader and
   written in SafeAILab's layout; EAGLE-1: SafeAILab's layout read back; Medusa: FasterDecoding's — with a
   `training.json` record into a temp folder renamed over the output: nothing half-written, ever.

Deterministic: the same key on the same host and thread count gives the same tensors bit for bit, resumed or not.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import platform
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

import torch

from builder.errors import UserError
from builder.recipe.draft_training import DraftTraining
from builder.train import rows_cache as rows_cache_mod
from builder.train.draft_data import special_ids
from builder.train.trainers import TRAINERS, DraftRun

if TYPE_CHECKING:
    from builder.recipe.schema import Recipe

RECORD = "training.json"
CODE_PACKAGES = ("builder",)
# modelopt's HF speculative API as used here: `export_speculative_decoding` (0.43+, `../shared/EAGLE3.md` §4), the
# EAGLE-3 pre-hook that `eagle3.ReferenceFirstLayer` corrects (read at 0.47); the project's own cap is <0.48
MODELOPT_TRAIN_RANGE = (">=0.43", "<0.48")
STORAGE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}  # model.dtype: the draft's on disk


def plan_run(recipe: Recipe, recipe_path: Path, target_dir: Path, tokenizer_path: Path, data_dir: Path, out: Path):
    """The run, checked (UserError naming the field: a method we do not train, aux layers, a missing data file)."""
    from builder.model.config import LlamaConfig, read_json_object
    from builder.train.draft_data import resolve_source

    check_modelopt()
    spec = recipe.speculative
    trainer = TRAINERS.get(spec.method)
    if trainer is None:
        why = "it has no draft weights to train" if spec.method else "the recipe speculates with nothing"
        raise UserError(
            f"train-draft trains EAGLE-3 and EAGLE-1/2 drafts and Medusa heads; the recipe's method is "
            f"{spec.method!r}: {why}",
            field="speculative.method",
            allowed=", ".join(TRAINERS),
        )
    run = recipe.draft_training or DraftTraining()
    if not run.source.startswith("builtin:"):
        resolve_source(run.source, data_dir)
    cfg = LlamaConfig.from_hf_dict(read_json_object(target_dir / "config.json"), str(target_dir / "config.json"))
    aux = trainer.plan(spec, run, cfg.num_hidden_layers, str(recipe_path))
    if run.draft_vocab_size is not None and run.draft_vocab_size > cfg.vocab_size:
        raise UserError(
            f"draft_vocab_size {run.draft_vocab_size} exceeds the target's vocabulary of {cfg.vocab_size}",
            field="draft_training.draft_vocab_size",
            allowed=f"1..{cfg.vocab_size}",
        )
    if not any(target_dir.glob("*.safetensors")) and not recipe.model.allow_pickle:
        raise UserError(
            f"{target_dir} has no safetensors weights: a pickled target needs model.allow_pickle (or convert it once "
            "with `trtspec convert-draft`)",
            field="model.allow_pickle",
        )
    return DraftRun(recipe, recipe_path, run, spec.method, aux, target_dir, tokenizer_path, data_dir, out)


def check_modelopt() -> None:
    """UserError unless the installed nvidia-modelopt lies in MODELOPT_TRAIN_RANGE."""
    from importlib import metadata

    from packaging.specifiers import SpecifierSet

    want = SpecifierSet(",".join(MODELOPT_TRAIN_RANGE))
    try:
        have = metadata.version("nvidia-modelopt")
    except metadata.PackageNotFoundError:
        have = None
    if have is None or have not in want:
        raise UserError(
            f"train-draft needs nvidia-modelopt{want} (its HF speculative module), found {have or 'none'}: "
            f'pip install "nvidia-modelopt[torch]{want}"',
            allowed=str(want),
        )


def pick_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("no CUDA device here", field="--device", allowed="auto, cpu")
    return torch.device(device)


def train_dtype(recipe: Recipe, device: torch.device) -> torch.dtype:
    """float32 on the CPU; the recipe's model.dtype on a GPU."""
    if device.type == "cpu":
        return torch.float32
    return STORAGE[recipe.model.dtype]


def code_digest(module: str = "builder.train.train_draft") -> dict[str, str]:
    """{file: sha256} of `module`'s import closure (a changed trainer never reuses a stale draft)."""
    from builder.closure import import_closure, module_file

    root = Path(__file__).resolve().parents[2]
    found = import_closure((module,), root, CODE_PACKAGES)  # its lazy imports included
    return {
        module_file(m, root).relative_to(root).as_posix(): hashlib.sha256(module_file(m, root).read_bytes()).hexdigest()
        for m in sorted(found)
    }


def run_inputs(dr: DraftRun, device: torch.device, dtype: torch.dtype) -> dict:
    """Everything the run's key hashes (module docstring)."""
    from builder.files import sha256_file
    from builder.train.draft_data import source_identity
    from builder.versions import tool_versions

    files = sorted(p for p in dr.target_dir.iterdir() if p.is_file())
    settings = dr.run.model_dump(mode="json")
    settings.pop("checkpoint_every")  # when checkpoints are written changes nothing trained
    return {
        "method": dr.method,
        "draft": TRAINERS[dr.method].shape(dr),
        "settings": settings,
        "target": {p.name: sha256_file(p) for p in files},
        "tokenizer": sha256_file(dr.tokenizer_path),
        "source": source_identity(dr.run.source, dr.data_dir),
        "versions": tool_versions("torch", "transformers", "nvidia-modelopt", "tokenizers", "numpy"),
        "device": device.type,
        "dtype": str(dtype).removeprefix("torch."),
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "code": code_digest(),
    }


def rows_inputs(inputs: dict) -> dict:
    """What the rows cache's key hashes (`builder.train.rows_cache`) for a run of these inputs."""
    return rows_cache_mod.rows_inputs(inputs, code_digest("builder.train.draft_data"))


def key_of(inputs: dict) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def up_to_date(out: Path, key: str) -> bool:
    try:
        return json.loads((out / RECORD).read_text())["key"] == key
    except (OSError, ValueError, KeyError, TypeError):
        return False


def train_draft(
    dr: DraftRun,
    *,
    device: torch.device,
    resume: bool = True,
    force: bool = False,
    log: Callable[[str], None] = print,
    rows_cache: Path | None = None,
) -> tuple[dict, bool]:
    """Train (or find up to date) the run's draft; (its record, whether it was trained now). `rows_cache`: the
    folder whose train-rows/ shares training rows between drafts of one target (None: rows are not shared)."""
    dtype = train_dtype(dr.recipe, device)
    inputs = run_inputs(dr, device, dtype)
    key = key_of(inputs)
    if not force and up_to_date(dr.out, key):
        return json.loads((dr.out / RECORD).read_text()), False
    with output_lock(dr.out, lambda: log(f"waiting for another train-draft writing {dr.out}")):
        if not force and up_to_date(dr.out, key):  # that other run made it
            return json.loads((dr.out / RECORD).read_text()), False
        return _train_locked(dr, inputs, key, device, resume, log, rows_cache), True


@contextlib.contextmanager
def output_lock(out: Path, on_wait: Callable[[], None]) -> Iterator[None]:
    """Exclusive across processes for one output folder (`.<out>.lock` beside it): two runs never share a work
    folder; the second waits, then finds the draft up to date."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            on_wait()
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _train_locked(
    dr: DraftRun,
    inputs: dict,
    key: str,
    device: torch.device,
    resume: bool,
    log: Callable[[str], None],
    rows_cache: Path | None,
) -> dict:
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from builder.train.draft_data import build_training_set
    from builder.train.runner import WorkDir, train_loop, work_dir_of

    t0 = time.monotonic()
    dtype = train_dtype(dr.recipe, device)
    work = WorkDir(work_dir_of(dr.out), key)
    resumed = work.start(resume)
    log(f"{'resuming' if resumed else 'starting'} {dr.method} draft training → {dr.out} (work folder {work.path})")
    hf_logging.disable_progress_bar()
    model = AutoModelForCausalLM.from_pretrained(str(dr.target_dir), dtype=dtype).to(device).eval()
    bos, eos, pad, stops = special_ids(dr.target_dir)
    data, rows_from = work.data(), "work folder"
    t_data = time.monotonic()
    rkey = None if rows_cache is None else key_of(rows_inputs(inputs))
    if data is None and rkey is not None:
        data, why = rows_cache_mod.load(rows_cache, rkey)
        rows_from = str(rows_cache_mod.path_of(rows_cache, rkey))
        if why:
            log(why)
        elif data is not None:
            log(f"training rows from the rows cache: {rows_from}")
            work.save_data(data)
    if data is None:
        run, rows_from = dr.run, "made"
        what = f"{run.num_samples} prompts × {run.response_tokens} target tokens" if run.generate_responses else ""
        log(f"training rows from {run.source} {what}".rstrip())
        data = build_training_set(run, Tokenizer.from_file(str(dr.tokenizer_path)), dr.data_dir, (bos, eos, pad), model)
        work.save_data(data)
        if rkey is not None:
            rows_cache_mod.store(rows_cache, rkey, data)
    t_data = time.monotonic() - t_data
    trainer = TRAINERS[dr.method]
    vd = trainer.convert(model, dr, data, (bos, *stops))
    model.train()
    hist = train_loop(trainer.loss_fn(model, dr), trainer.trainable(model), data, dr.run, work, device, log, resume)
    record = {
        "key": key,
        "method": dr.method,
        "trainer": trainer.about,
        "recipe": str(dr.recipe_path),
        "made_by": f"trtspec train-draft {dr.recipe_path}",
        "inputs": {k: v for k, v in inputs.items() if k != "code"},
        "draft_vocab_size": vd,
        "training_rows": {
            "count": len(data.tokens),
            "tokens": int(data.mask.sum()),
            "sha256": data.digest(),
            "from": rows_from,
        },
        "steps": hist.step,
        "final_loss": round(hist.tail_loss(), 6),
        "accuracy_of": trainer.accuracy_of,
        "final_accuracy": [round(a, 4) for a in hist.tail_accs()],
        "loss_every_tenth": [round(x, 4) for x in hist.losses[:: max(1, len(hist.losses) // 10)]],
        "seconds": {
            "data": round(t_data, 1),
            "train": round(hist.seconds, 1),
            "total": round(time.monotonic() - t0, 1),
        },
        "resumed": resumed,
    }
    write_draft(model, dr, record, trainer.write)
    work.remove()
    return record


def write_draft(model, dr: DraftRun, record: dict, write: Callable) -> None:
    """The method's files + the record into a temp folder renamed over the output whole."""
    from builder.files import staged_dir

    with staged_dir(dr.out) as folder:
        write(model, dr, folder, STORAGE[dr.recipe.model.dtype])
        (folder / RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        for p in [folder, *folder.iterdir()]:  # a checkout's modes (mkdtemp makes 0700, safetensors 0600)
            p.chmod(0o755 if p.is_dir() else 0o644)
