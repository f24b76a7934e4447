"""`trtspec train-draft RECIPE`: train the recipe's draft for its target (`builder.train.train_draft`).

    trtspec train-draft recipes/tiny-llama3-eagle3.yaml                 # → the recipe's speculative.checkpoint
    trtspec train-draft recipes/llama3-8b-1xh100-fp8-eagle3.yaml --out drafts/e3 --steps 20000
    trtspec train-draft RECIPE --no-resume                               # start over, ignoring a checkpoint

Up to date (same run key) → nothing to do; an interrupted run (even kill -9) of the same key resumes from its last
checkpoint; a second draft of the same target on the same data reads the first one's training rows (--cache-dir).
The device is the GPU when there is one (`--device`), never pretended.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from builder.commands.options import echo_warnings, load_checked, set_option
from builder.errors import UserError


@click.command("train-draft")
@click.argument("recipe", type=click.Path(dir_okay=False))
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default=None,
    help="Draft folder to write (replaced whole). Default: the recipe's speculative.checkpoint.",
)
@click.option("--steps", type=click.IntRange(1, 10_000_000), default=None, help="Override draft_training.steps.")
@click.option(
    "--resume/--no-resume",
    default=True,
    show_default=True,
    help="Continue an interrupted run of the same key from its last checkpoint.",
)
@click.option("--force", is_flag=True, help="Train even when the folder already holds this run's draft.")
@click.option(
    "--device",
    type=click.Choice(["auto", "cpu", "cuda"]),
    default="auto",
    show_default=True,
    help="auto: the GPU when one is present, else the CPU.",
)
@click.option(
    "--threads",
    type=click.IntRange(1, 4096),
    default=None,
    help="torch CPU threads (results are bit-for-bit reproducible for a fixed count). Default: torch's.",
)
@click.option(
    "--cache-dir",
    default=".trtspec-cache",
    show_default=True,
    envvar="TRTSPEC_CACHE_DIR",
    type=click.Path(file_okay=False),
    help="Training rows are kept in <cache>/train-rows/ (content-addressed): another draft of the same target "
    "trained on the same draft_training data reads them instead of making them again.",
)
@click.option("--quiet", is_flag=True, help="Print only when a draft is trained.")
@set_option
def train_draft(recipe, out, steps, resume, force, device, threads, cache_dir, quiet, overrides) -> None:
    """Train the recipe's speculative draft (EAGLE-3 or Medusa heads with NVIDIA modelopt; an EAGLE-1/2 draft on the
    same loop) on its draft_training data."""
    import torch

    from builder.stages.parts import local_dir
    from builder.train.train_draft import pick_device, plan_run
    from builder.train.train_draft import train_draft as run_training

    if steps is not None:
        overrides = (*overrides, f"draft_training.steps={steps}")
    loaded, findings = load_checked(recipe, overrides)
    if not quiet:
        echo_warnings([f for f in findings if f.field[:2] != ("speculative", "checkpoint")], loaded)
    if threads is not None:
        torch.set_num_threads(threads)
    target = local_dir(loaded, ("model", "checkpoint"), loaded.recipe.model.checkpoint)
    tok = loaded.recipe.model.tokenizer
    tok_dir = local_dir(loaded, ("model", "tokenizer"), tok) if tok else target
    tok_file = tok_dir / "tokenizer.json" if tok_dir.is_dir() else tok_dir
    if not tok_file.is_file():
        raise UserError(f"no tokenizer.json at {tok_file}", field="model.tokenizer")
    out_dir = Path(out) if out else _recipe_draft_dir(loaded)
    data_dir = loaded.dir_of(("draft_training", "source"))
    dr = plan_run(loaded.recipe, loaded.path, target, tok_file, data_dir, out_dir)
    log = (lambda msg: None) if quiet else (lambda msg: click.echo(f"train-draft: {msg}", err=True))
    record, trained = run_training(
        dr, device=pick_device(device), resume=resume, force=force, log=log, rows_cache=Path(cache_dir)
    )
    if trained or not quiet:
        state = "trained" if trained else "up to date"
        s = record["seconds"]
        acc = " ".join(f"{a:.3f}" for a in record["final_accuracy"])
        click.echo(
            f"{out_dir}: {state} ({record['steps']} steps, loss {record['final_loss']:.4f}, accuracy per "
            f"{record['accuracy_of']} {acc}; {s['total']} s: data {s['data']} s, training {s['train']} s)"
        )
    sys.stdout.flush()


def _recipe_draft_dir(loaded) -> Path:
    """The recipe's speculative.checkpoint as a local folder (a hub reference cannot be written: --out)."""
    from builder.recipe.resolve import parse_checkpoint

    spec = loaded.recipe.speculative
    text = getattr(spec, "checkpoint", None)
    if text is None:
        raise UserError(
            f"the recipe's method {spec.method!r} has no draft checkpoint to train",
            field="speculative.method",
            allowed="eagle3, medusa",
        )
    ref = parse_checkpoint(text, loaded.dir_of(("speculative", "checkpoint")))
    if ref.local is None:
        raise UserError(
            f"speculative.checkpoint {text} is a hub reference: name a local folder to write with --out",
            field="speculative.checkpoint",
        )
    return ref.local
