"""`trtspec convert-draft`: upstream's pickled draft (or target) weights → safetensors, once.

Published EAGLE-1 drafts ship `pytorch_model.bin` and Medusa heads trained with FasterDecoding's original
script `medusa_lm_head.pt`; trtspec reads those only under the pickle opt-in. This command reads them once
(`torch.load(weights_only=True)`, upstream's file names only: `builder.model.pickled`) and writes a folder
that loads without it: the same tensors, keys and dtypes as safetensors, plus config.json and the other
non-weight files, checked with the strict loader before it is renamed into place.

    trtspec convert-draft path/to/EAGLE-LLaMA3-Instruct-8B --allow-pickle      # → …-safetensors beside it
    trtspec convert-draft recipes/llama3-8b-1xh100-fp8-eagle.yaml --out drafts/eagle-8b
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from builder.commands.options import set_option
from builder.errors import UserError

KINDS = ("auto", "model", "medusa", "eagle")


def _kind_of(folder: Path) -> str:
    """medusa / eagle / model from the pickled file present (a lone pytorch_model.bin is an EAGLE draft or a
    target: the same conversion, told apart afterwards by its keys)."""
    from builder.model.pickled import EAGLE, MEDUSA, TARGET, pickle_to_read

    if pickle_to_read(folder, MEDUSA) is not None:
        return "medusa"
    hit = pickle_to_read(folder, TARGET)
    if hit is not None and hit.name == TARGET.index:
        return "model"
    if pickle_to_read(folder, EAGLE) is not None:
        return "eagle-or-model"
    raise UserError(
        "nothing to convert: no medusa_lm_head.pt, pytorch_model.bin or pytorch_model.bin.index.json "
        "without a safetensors file beside it",
        location=str(folder),
    )


def _check(kind: str):
    """The strict loader for `kind`, run without the opt-in on the converted folder (so it must read safetensors)."""

    def check(folder: Path) -> None:
        from builder.model.config import LlamaConfig
        from builder.model.loader import checked_sources
        from builder.speculative.eagle.draft_model import read_eagle
        from builder.speculative.medusa.heads import load_medusa

        which = kind
        if which == "eagle-or-model":
            from safetensors import safe_open

            with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
                which = "eagle" if "fc.weight" in set(f.keys()) else "model"
        if which == "medusa":
            load_medusa(folder)
        elif which == "eagle":
            read_eagle(folder)
        else:
            checked_sources(folder, LlamaConfig.from_json(folder))

    return check


def _from_recipe(recipe: str, overrides: tuple[str, ...], model: bool) -> tuple[Path, str, bool, str, Path]:
    """(checkpoint folder, kind, the recipe's opt-in, its field, default output) for RECIPE's draft (or target)."""
    from builder.recipe.loader import load_recipe
    from builder.recipe.resolve import parse_checkpoint
    from builder.stages.parts import Parts

    loaded = load_recipe(recipe, overrides)
    r = loaded.recipe
    if model:
        section, text, kind, allowed = "model", r.model.checkpoint, "model", r.model.allow_pickle
    else:
        if r.speculative.method not in ("medusa", "eagle"):
            raise UserError(
                f"speculative.method {r.speculative.method} has no draft checkpoint; pass --model to "
                "convert the target",
                field="speculative.method",
                allowed="medusa, eagle",
            )
        s = r.speculative
        section, text, kind, allowed = "speculative", s.checkpoint, s.method, s.allow_pickle
    parts = Parts(loaded, "none")
    folder = parts.base_dir() if model else parts.draft_dir()
    ref = parse_checkpoint(text, loaded.dir_of((section, "checkpoint")))
    name = folder.name if ref.local is not None else ref.repo.split("/")[-1]
    default = (folder.parent if ref.local is not None else Path.cwd()) / f"{name}-safetensors"
    return folder, kind, allowed, f"{section}.allow_pickle", default


@click.command("convert-draft")
@click.argument("recipe_or_dir", type=click.Path(exists=True))
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    help="The new folder (must not exist). Default: "
    "<checkpoint>-safetensors beside a local checkpoint, in the current folder for a hub one.",
)
@click.option(
    "--allow-pickle",
    is_flag=True,
    help="Read the pickle (torch.load(weights_only=True)); a RECIPE's own "
    "model.allow_pickle / speculative.allow_pickle does the same.",
)
@click.option(
    "--model",
    "convert_model",
    is_flag=True,
    help="With a RECIPE: convert its model.checkpoint instead of its speculative.checkpoint.",
)
@click.option(
    "--kind",
    type=click.Choice(KINDS),
    default="auto",
    show_default=True,
    help="With a DIR: what it holds (auto: from the file names, and the keys for pytorch_model.bin).",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was written as one JSON object.")
@set_option
def convert_draft(recipe_or_dir, out, allow_pickle, convert_model, kind, as_json, overrides):
    """Write RECIPE_OR_DIR's pickled weights (a RECIPE's draft, or a checkpoint DIR) once as safetensors."""
    from builder.model.convert import to_safetensors
    from builder.model.pickled import LAYOUTS

    src = Path(recipe_or_dir)
    if src.is_dir():
        if overrides or convert_model:
            raise UserError("--set and --model apply to a RECIPE, not to a checkpoint folder", field="--set")
        opt_in, allowed = "--allow-pickle", allow_pickle
        kind = _kind_of(src) if kind == "auto" else kind
        default = src.resolve().parent / f"{src.resolve().name}-safetensors"
    else:
        if kind != "auto":
            raise UserError(
                "--kind applies to a checkpoint folder; a RECIPE says what its checkpoints are",
                field="--kind",
                allowed="auto",
            )
        src, kind, allowed, field, default = _from_recipe(recipe_or_dir, overrides, convert_model)
        opt_in, allowed = (field, allowed) if not allow_pickle else ("--allow-pickle", True)
    layout = LAYOUTS["eagle" if kind == "eagle-or-model" else kind]
    dst = Path(out) if out else default
    facts = to_safetensors(src, layout, dst, allow_pickle=allowed, opt_in=opt_in, check=_check(kind))
    if as_json:
        click.echo(json.dumps(facts, indent=2))
        return
    click.echo(f"read {facts['from']} (torch.load(weights_only=True), {facts['tensors']} tensors)")
    click.echo(
        f"wrote {dst}: {', '.join(facts['written'])}" + (f" + {', '.join(facts['copied'])}" if facts["copied"] else "")
    )
    click.echo("it loads without the pickle opt-in: point the recipe's checkpoint at it")
