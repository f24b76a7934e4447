"""Load a recipe: hardened YAML with source locations, `extends:` chains, `--set` overrides, schema.

Every user error becomes a `UserError` whose location is `file:line:col` of the offending value.
The YAML policy and limits (size, depth, values, no anchors, unique keys) live in `yaml_safe`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from builder.errors import UserError
from builder.recipe.fields import field_bounds, section_model
from builder.recipe.schema import Recipe
from builder.recipe.yaml_safe import MAX_BYTES, MAX_DEPTH, MAX_FILES, Budget, Loc, Path_, clip, parse, read_file

DISCRIMINATORS = ("method", "type")
BOUND_ERRORS = {
    "greater_than",
    "greater_than_equal",
    "less_than",
    "less_than_equal",
    "finite_number",
    "int_parsing_size",
    "float_parsing",
    "int_from_float",
}
MAX_REPORTED = 20  # schema problems listed per recipe; the rest are counted
_BAD_KEY = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


@dataclass
class LoadedRecipe:
    recipe: Recipe
    path: Path  # the recipe file named by the user
    data: dict[str, Any]  # merged raw data (after extends and --set)
    locations: dict[Path_, Loc] = field(default_factory=dict)
    chain: list[Path] = field(default_factory=list)  # files merged, base first

    def where(self, path: Path_) -> str:
        """`file:line:col` of the value at `path` (or its nearest located ancestor)."""
        for n in range(len(path), -1, -1):
            loc = self.locations.get(tuple(path[:n]))
            if loc:
                return f"{loc[0]}:{loc[1]}:{loc[2]}"
        return str(self.path)

    def dir_of(self, path: Path_) -> Path:
        """Directory relative paths in the value at `path` resolve against: the defining file's."""
        loc = self.locations.get(tuple(path))
        if loc is None or loc[0].startswith("--set"):
            return Path.cwd() if loc else self.path.resolve().parent
        return Path(loc[0]).resolve().parent


def _read_yaml(path: Path, display: str, budget: Budget) -> tuple[dict[str, Any], dict[Path_, Loc]]:
    data, locations = parse(read_file(path, display), display, budget, mapping=True)
    return data if data is not None else {}, locations


def _display(path: Path) -> str:
    """The path as the user would type it: relative to the working directory when inside it."""
    rel = os.path.relpath(path)
    return path.as_posix() if rel.startswith("..") else rel


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Deep merge: mappings merge, everything else replaces; a changed discriminator replaces."""
    out = dict(base)
    for key, value in over.items():
        old = out.get(key)
        if isinstance(old, dict) and isinstance(value, dict) and not _retagged(old, value):
            out[key] = _merge(old, value)
        else:
            out[key] = value
    return out


def _retagged(old: dict[str, Any], new: dict[str, Any]) -> bool:
    return any(k in old and k in new and old[k] != new[k] for k in DISCRIMINATORS)


def _resolve_chain(given: Path, stack: tuple[Path, ...], budget: Budget) -> tuple[dict, dict[Path_, Loc], list[Path]]:
    """Read `given` and the files it extends (depth first), merged; messages name `given` as spelled."""
    path = Path(os.path.realpath(given))  # not Path.resolve: that raises on a symlink loop
    if path in stack:
        cycle = " -> ".join(str(p) for p in (*stack, path))
        raise UserError(f"extends cycle: {cycle}", location=str(stack[-1]), field="extends")
    budget.files -= 1
    data, locs = _read_yaml(path, _display(given), budget)
    parents = data.pop("extends", None)
    if parents is None:
        return data, locs, [path]
    loc = locs.get(("extends",), (_display(given), 1, 1))
    where = f"{loc[0]}:{loc[1]}:{loc[2]}"
    parent_list = [parents] if isinstance(parents, str) else parents
    if not isinstance(parent_list, list) or not all(isinstance(p, str) for p in parent_list):
        raise UserError("must be a relative path or a list of them", location=where, field="extends")
    merged: dict[str, Any] = {}
    merged_locs: dict[Path_, Loc] = {}
    chain: list[Path] = []
    for parent in parent_list:
        ppath = path.parent / parent
        if not os.path.lexists(ppath):
            raise UserError(f"extended recipe not found: {clip(str(ppath), 300)}", location=where, field="extends")
        if budget.files <= 0:
            raise UserError(
                f"more than {MAX_FILES} recipe files in the extends: chain (the limit)", location=where, field="extends"
            )
        pdata, plocs, pchain = _resolve_chain(ppath, (*stack, path), budget)
        merged, chain = _merge(merged, pdata), chain + pchain
        merged_locs.update(plocs)
    merged_locs.update({k: v for k, v in locs.items() if k and k[0] != "extends"})
    return _merge(merged, data), merged_locs, chain + [path]


def parse_override(text: str, budget: Budget | None = None) -> tuple[list[str], Any, str]:
    """`a.b.c=value` → (["a","b","c"], value parsed as YAML, its source label for locations).

    The value goes through the same hardened reader as recipe files (no anchors, depth and size caps).
    """
    source = f"--set {clip(text)}"
    key, sep, raw = text.partition("=")
    keys = key.split(".")
    if not sep or not key or any(not part for part in keys):
        raise UserError(f"--set '{clip(text)}': expected dotted.path=value (e.g. build.max_batch_size=16)")
    if len(keys) > MAX_DEPTH or len(text) > MAX_BYTES:
        raise UserError(f"--set '{clip(text)}': longer than a recipe may be ({MAX_DEPTH} keys, {MAX_BYTES} bytes)")
    if _BAD_KEY.search(key):
        raise UserError(f"--set '{clip(text)}': the field path holds a control character or an invalid code point")
    value, _ = parse(raw, source, budget or Budget(), mapping=False) if raw.strip() else ("", {})
    return keys, value, source


def _apply_override(data: dict[str, Any], keys: list[str], value: Any, text: str) -> None:
    node = data
    for i, key in enumerate(keys[:-1]):
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            raise UserError(f"--set '{clip(text)}': {clip('.'.join(keys[: i + 1]))} is not a section")
        node = child
    old = node.get(keys[-1])
    if isinstance(old, dict) and isinstance(value, dict) and not _retagged(old, value):
        node[keys[-1]] = _merge(old, value)
    else:
        node[keys[-1]] = value


def load_recipe(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> LoadedRecipe:
    """Read, merge, override and validate a recipe; raise UserError (listing every problem)."""
    path = Path(path)
    budget = Budget()
    data, locations, chain = _resolve_chain(path, (), budget)
    for text in overrides:
        keys, value, source = parse_override(text, budget)
        _apply_override(data, keys, value, text)
        for k in [p for p in locations if p[: len(keys)] == tuple(keys)]:
            del locations[k]
        locations[tuple(keys)] = (source, 1, 1)
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as exc:
        loaded = LoadedRecipe(recipe=None, path=path, data=data, locations=locations, chain=chain)  # type: ignore[arg-type]
        errors = exc.errors()
        shown = [_to_user_error(err, loaded) for err in errors[:MAX_REPORTED]]
        if len(errors) > MAX_REPORTED:
            shown.append(UserError(f"... and {len(errors) - MAX_REPORTED} more problems", location=_display(path)))
        raise RecipeErrors(shown) from None
    return LoadedRecipe(recipe=recipe, path=path, data=data, locations=locations, chain=chain)


class RecipeErrors(UserError):
    """Several problems in one recipe, reported together."""

    def __init__(self, errors: list[UserError]) -> None:
        super().__init__(errors[0].message if errors else "invalid recipe")
        self.errors = errors

    def __str__(self) -> str:
        return "\n".join(str(e) for e in self.errors)


def _data_path(loc: tuple[Any, ...], data: Any) -> Path_:
    """Strip pydantic's union-tag and type-name components so the path matches the YAML keys."""
    out: list[str | int] = []
    node = data
    for part in loc:
        if isinstance(node, dict) and part not in node and _is_tag(part, node):
            continue  # a discriminator tag or union member name, not a key
        if isinstance(node, list) and not isinstance(part, int):
            continue
        out.append(part)
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            node = None
    return tuple(out)


def _is_tag(part: Any, node: dict[str, Any]) -> bool:
    if not isinstance(part, str):
        return True
    return part in {str(node.get(k)) for k in DISCRIMINATORS} or "[" in part or part[:1].isupper()


def _to_user_error(err: dict[str, Any], loaded: LoadedRecipe) -> UserError:
    path = _data_path(err["loc"], loaded.data)
    if err["type"] == "extra_forbidden":
        parent = path[:-1]
        allowed = _allowed_keys(parent, loaded)
        return UserError("unknown field", location=loaded.where(path), field=_dotted(path), allowed=allowed)
    ctx = err.get("ctx") or {}
    allowed = ctx.get("expected") or ctx.get("expected_tags")
    msg = err["msg"]
    if err["type"] == "union_tag_invalid":
        path = (*path, str(ctx.get("discriminator", "")).strip("'"))
        err = {**err, "input": ctx.get("tag")}
    if err["type"] == "missing":
        msg = "required field is missing"
    elif allowed and err["type"] in ("literal_error", "union_tag_invalid"):
        msg = f"invalid value {clip(repr(err.get('input')))}"
    elif err["type"] == "value_error":
        msg = msg.removeprefix("Value error, ")
    elif err["type"] in BOUND_ERRORS:
        allowed = field_bounds(path, loaded.data)
    return UserError(msg, location=loaded.where(path), field=_dotted(path) or "(recipe)", allowed=allowed)


def _dotted(path: Path_) -> str:
    return clip(".".join(str(p) for p in path), 120)


def _allowed_keys(parent: Path_, loaded: LoadedRecipe) -> str | None:
    model = section_model(parent, loaded.data)
    return ", ".join(model.model_fields) if model is not None else None
