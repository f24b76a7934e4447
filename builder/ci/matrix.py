"""The CI matrix file: which recipes `trtspec ci` builds, with which `--set` variants, and its gates.

    # recipes/ci/tiny.yaml
    name: tiny                         # the recipe set: a baseline from another set is refused
    recipes: ["../tiny-llama3*.yaml"]  # files or globs, relative to this file
    variants:                          # default: one variant, "default", with no overrides
      - {name: default}
      - {name: chain4, set: ["speculative.tree=chain_4"], only: ["*medusa*"]}   # skip: […] excludes
    gates: {tau_drop: 0.02, fp8_agreement_drop: 0.02, speed_ratio_drop: 0.25}
    checks: {prompts: 8, max_new_tokens: 48}

Read through the recipes' hardened YAML reader (`builder.recipe.yaml_safe`: no anchors, size and depth
caps, unique keys) and validated by pydantic with `extra="forbid"`; every problem is a `UserError` at
`file:line:col` naming the field (and the allowed keys or range). The same models give the defaults of
a run without a matrix file (`Matrix.adhoc`), so gates and checks have one source of defaults.
"""

from __future__ import annotations

import fnmatch
import glob
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from builder.errors import UserError
from builder.recipe.yaml_safe import Budget, clip, parse, read_file

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Gates(_Strict):
    """Regression gates against a baseline run (`trtspec ci --baseline FILE`)."""

    tau_drop: float = Field(
        0.02,
        ge=0,
        lt=1,
        allow_inf_nan=False,
        description="Fail when a method's τ (tokens per target step) falls by more than this "
        "fraction of the baseline's (0.02 = 2 %).",
    )
    fp8_agreement_drop: float = Field(
        0.02,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="Fail when the FP8 greedy agreement with the unquantized model "
        "(a fraction of positions) falls by more than this (0.02 = 2 points).",
    )
    speed_ratio_drop: float = Field(
        0.25,
        ge=0,
        lt=1,
        allow_inf_nan=False,
        description="Fail when tokens/s of the recipe's method divided by tokens/s of "
        "plain decoding on the same engine in the same run falls by more than this "
        "fraction of the baseline's ratio (absolute speeds are not compared: shared "
        "runners differ from run to run). Set it from the recipe set's measured spread.",
    )


class Checks(_Strict):
    """How much each built engine is decoded (lossless check, acceptance and speed)."""

    prompts: int = Field(8, ge=1, le=164, description="Held-out HumanEval prompts decoded per engine.")
    max_new_tokens: int = Field(48, ge=1, le=4096, description="Tokens generated per prompt.")


class Variant(_Strict):
    """One set of `--set` overrides applied to (some of) the recipes."""

    name: str = Field(
        pattern=NAME_PATTERN,
        description="Names the variant in entry ids: recipe@name, or just the "
        "recipe for the variant named default (its overrides do not change the id a baseline matches).",
    )
    set: list[str] = Field(
        default_factory=list, max_length=64, description="Recipe overrides as for --set, e.g. speculative.tree=chain_4."
    )
    only: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="Glob patterns of recipe file names this variant applies to (default: all).",
    )
    skip: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="Glob patterns of recipe file names this variant does not apply to.",
    )


class Matrix(_Strict):
    """A recipe set for `trtspec ci`."""

    name: str = Field(pattern=NAME_PATTERN, description="The recipe set's name, recorded in the JSON summary.")
    recipes: list[str] = Field(
        min_length=1, max_length=1000, description="Recipe files or glob patterns, relative to the matrix file."
    )
    variants: list[Variant] = Field(
        default_factory=lambda: [Variant(name="default")],
        min_length=1,
        max_length=64,
        description="Override sets; every recipe runs once per variant that applies.",
    )
    gates: Gates = Field(default_factory=Gates, description="Regression gates (with --baseline).")
    checks: Checks = Field(default_factory=Checks, description="Decoding per engine.")


SECTIONS: dict[tuple[str, ...], type[BaseModel]] = {
    (): Matrix,
    ("variants",): Variant,
    ("gates",): Gates,
    ("checks",): Checks,
}


@dataclass(frozen=True)
class Entry:
    """One recipe × variant of a run: its id (what baselines and the publish index match on)."""

    id: str  # the recipe path, or "recipe@variant" for a variant not named "default" (overrides never change it)
    recipe: str  # the recipe path as the run names it
    overrides: tuple[str, ...]  # the variant's --set values, then the command line's


@dataclass
class RunSpec:
    """What one `trtspec ci` run does: its recipe set, entries, gates and checks."""

    name: str | None  # the matrix name; None for recipes named on the command line
    entries: list[Entry]
    gates: Gates
    checks: Checks


def load_matrix(path: str | Path) -> tuple[Matrix, Path]:
    """Read and validate a matrix file; UserError at file:line:col for any problem."""
    display = str(path)
    data, locations = parse(read_file(Path(path), display), display, Budget(), mapping=True)
    try:
        return Matrix.model_validate(data if data is not None else {}), Path(path)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise _error(dict(first), locations, display, len(exc.errors())) from None


def _error(err: dict[str, Any], locations: dict, display: str, count: int) -> UserError:
    loc = tuple(err["loc"])
    where = display
    for n in range(len(loc), -1, -1):
        hit = locations.get(loc[:n])
        if hit:
            where = f"{hit[0]}:{hit[1]}:{hit[2]}"
            break
    field = ".".join(str(p) for p in loc) or "(matrix)"
    more = f" (+{count - 1} more problems)" if count > 1 else ""
    if err["type"] == "extra_forbidden":
        parent = SECTIONS.get(tuple(p for p in loc[:-1] if isinstance(p, str)))
        allowed = ", ".join(parent.model_fields) if parent is not None else None
        return UserError(f"unknown field{more}", location=where, field=field, allowed=allowed)
    msg = "required field is missing" if err["type"] == "missing" else err["msg"].removeprefix("Value error, ")
    return UserError(f"{msg}{more}", location=where, field=field)


def expand(
    matrix: Matrix, matrix_path: Path, cli_overrides: tuple[str, ...] = (), cli_recipes: tuple[str, ...] = ()
) -> RunSpec:
    """The matrix's entries: every recipe (globs expanded, in order) × every variant that applies.
    Recipes named on the command line replace the matrix's `recipes`."""
    base = matrix_path.resolve().parent
    recipes: list[str] = _unique(cli_recipes)
    for i, pattern in enumerate([] if cli_recipes else matrix.recipes):
        full = str(base / pattern)
        found = sorted(glob.glob(full)) if glob.has_magic(pattern) else [full] if os.path.isfile(full) else []
        if not found:
            raise UserError(
                f"{clip(pattern)!r} matches no recipe file (relative to {_show(base)})",
                location=str(matrix_path),
                field=f"recipes.{i}",
            )
        recipes += [r for r in _unique(found) if r not in recipes]
    entries: list[Entry] = []
    for recipe in recipes:
        for v in matrix.variants:
            name = Path(recipe).name
            if (v.only and not any(fnmatch.fnmatch(name, pat) for pat in v.only)) or any(
                fnmatch.fnmatch(name, pat) for pat in v.skip
            ):
                continue
            entry_id = recipe if v.name == "default" else f"{recipe}@{v.name}"
            if any(e.id == entry_id for e in entries):
                raise UserError(
                    f"two variants named {v.name!r} apply to {recipe}", location=str(matrix_path), field="variants"
                )
            entries.append(Entry(entry_id, recipe, (*v.set, *cli_overrides)))
    if not entries:
        raise UserError(
            "no recipe × variant applies (check the variants' only / skip patterns)",
            location=str(matrix_path),
            field="variants",
        )
    return RunSpec(matrix.name, entries, matrix.gates, matrix.checks)


def adhoc(recipes: tuple[str, ...], cli_overrides: tuple[str, ...] = ()) -> RunSpec:
    """A run over recipes named on the command line: the schema's default gates and checks."""
    return RunSpec(None, [Entry(r, r, tuple(cli_overrides)) for r in _unique(recipes)], Gates(), Checks())


def _unique(paths) -> list[str]:
    out: list[str] = []
    for p in paths:
        if _show(Path(p)) not in out:
            out.append(_show(Path(p)))
    return out


def _show(path: Path) -> str:
    """A path as entry ids spell it: relative to the working directory when inside it, POSIX slashes."""
    rel = os.path.relpath(path)
    return Path(rel).as_posix() if not rel.startswith("..") else path.resolve().as_posix()
