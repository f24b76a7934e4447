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
from typing import TYPE_CHECKING

import click

from builder.commands.options import set_option
from builder.errors import UserError
from builder.speculative import registry
from builder.speculative.method import DraftCheckpoint

if TYPE_CHECKING:
    from builder.model.pickled import Layout

AUTO, MODEL = "auto", "model"  # --kind: from the file names / the target's checkpoint
# the target's embedding in HF LlamaForCausalLM's keys (`builder.model.loader.expected_shapes`): what tells a
# target's lone pytorch_model.bin from a draft's of the same name once converted
TARGET_EMBEDDING = "model.embed_tokens.weight"


def draft_checkpoints() -> dict[str, DraftCheckpoint]:
    """The draft checkpoint of every method that has one (`Method.draft`), by method name."""
    return {name: m.draft for name, m in registry.methods().items() if m.draft is not None}


def _kinds_in(folder: Path) -> tuple[str, ...]:
    """What `folder` holds, from the pickled file present: one method's draft or the target; or, for a file name a
    draft shares with the target's single-file pickle (EAGLE's pytorch_model.bin), those drafts and then the target:
    the same conversion, told apart afterwards by its keys (`_check`)."""
    from builder.model.pickled import TARGET, pickle_to_read

    drafts = {name: d.layout for name, d in draft_checkpoints().items()}
    for name, layout in drafts.items():
        hit = pickle_to_read(folder, layout)
        if hit is not None and hit.name not in TARGET.pickles:
            return (name,)
    hit = pickle_to_read(folder, TARGET)
    if hit is not None and hit.name == TARGET.index:
        return (MODEL,)
    shared = tuple(name for name, layout in drafts.items() if pickle_to_read(folder, layout) is not None)
    if shared:
        return (*shared, MODEL)
    names = list(dict.fromkeys([p for layout in drafts.values() for p in layout.pickles] + list(TARGET.pickles)))
    raise UserError(
        f"nothing to convert: no {', '.join(names[:-1])} or {names[-1]} without a safetensors file beside it",
        location=str(folder),
    )


def _layout(kinds: tuple[str, ...]) -> Layout:
    """The layout converted: the first candidate's (the draft's, when a file name is shared with the target)."""
    from builder.model.pickled import TARGET

    return TARGET if kinds[0] == MODEL else draft_checkpoints()[kinds[0]].layout


def _check(kinds: tuple[str, ...]):
    """The strict loader for what the folder holds, run without the opt-in on the converted folder (so it must read
    safetensors): a method's `DraftCheckpoint.check_folder`, or the target's loader."""

    def check(folder: Path) -> None:
        from builder.model.config import LlamaConfig
        from builder.model.loader import checked_sources

        which = kinds[0]
        if len(kinds) > 1:  # a draft's file name shared with the target's: the target holds its embedding key
            from safetensors import safe_open

            with safe_open(str(folder / _layout(kinds).weights), framework="pt") as f:
                which = MODEL if TARGET_EMBEDDING in set(f.keys()) else kinds[0]
        if which == MODEL:
            checked_sources(folder, LlamaConfig.from_json(folder))
            return
        # drafts sharing the file name (EAGLE's and EAGLE-3's pytorch_model.bin): the first whose check passes
        drafts = [k for k in kinds if k != MODEL] if len(kinds) > 1 else [which]
        first: UserError | None = None
        for name in drafts:
            try:
                draft_checkpoints()[name].check_folder(folder)
                return
            except UserError as exc:
                first = first or exc
        assert first is not None
        raise first

    return check


def _from_recipe(recipe: str, overrides: tuple[str, ...], model: bool) -> tuple[Path, str, bool, str, Path]:
    """(checkpoint folder, kind, the recipe's opt-in, its field, default output) for RECIPE's draft (or target)."""
    from builder.recipe.loader import load_recipe
    from builder.recipe.resolve import parse_checkpoint
    from builder.stages.parts import Parts

    loaded = load_recipe(recipe, overrides)
    r = loaded.recipe
    if model:
        section, text, kind, allowed = "model", r.model.checkpoint, MODEL, r.model.allow_pickle
    else:
        m = registry.of(r.speculative)
        if m.draft is None:
            raise UserError(
                f"speculative.method {m.name} has no draft checkpoint; pass --model to convert the target",
                field="speculative.method",
                allowed=", ".join(draft_checkpoints()),
            )
        s = r.speculative
        section, text, kind, allowed = "speculative", s.checkpoint, m.name, s.allow_pickle
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
    type=click.Choice((AUTO, MODEL, *draft_checkpoints())),
    default=AUTO,
    show_default=True,
    help="With a DIR: what it holds (auto: from the file names, and the keys for pytorch_model.bin).",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was written as one JSON object.")
@set_option
def convert_draft(recipe_or_dir, out, allow_pickle, convert_model, kind, as_json, overrides):
    """Write RECIPE_OR_DIR's pickled weights (a RECIPE's draft, or a checkpoint DIR) once as safetensors."""
    from builder.model.convert import to_safetensors

    src = Path(recipe_or_dir)
    if src.is_dir():
        if overrides or convert_model:
            raise UserError("--set and --model apply to a RECIPE, not to a checkpoint folder", field="--set")
        opt_in, allowed = "--allow-pickle", allow_pickle
        kinds = _kinds_in(src) if kind == AUTO else (kind,)
        default = src.resolve().parent / f"{src.resolve().name}-safetensors"
    else:
        if kind != AUTO:
            raise UserError(
                "--kind applies to a checkpoint folder; a RECIPE says what its checkpoints are",
                field="--kind",
                allowed="auto",
            )
        src, kind, allowed, field, default = _from_recipe(recipe_or_dir, overrides, convert_model)
        kinds = (kind,)
        opt_in, allowed = (field, allowed) if not allow_pickle else ("--allow-pickle", True)
    dst = Path(out) if out else default
    facts = to_safetensors(src, _layout(kinds), dst, allow_pickle=allowed, opt_in=opt_in, check=_check(kinds))
    if as_json:
        click.echo(json.dumps(facts, indent=2))
        return
    click.echo(f"read {facts['from']} (torch.load(weights_only=True), {facts['tensors']} tensors)")
    click.echo(
        f"wrote {dst}: {', '.join(facts['written'])}" + (f" + {', '.join(facts['copied'])}" if facts["copied"] else "")
    )
    click.echo("it loads without the pickle opt-in: point the recipe's checkpoint at it")
