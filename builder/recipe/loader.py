"""Load a recipe: YAML (safe) with source locations, `extends:` chains, `--set` overrides, schema.

Every user error becomes a `UserError` whose location is `file:line:col` of the offending value.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from builder.errors import UserError
from builder.recipe.schema import Recipe

Loc = tuple[str, int, int]  # file, line, column (1-based)
Path_ = tuple[str | int, ...]
DISCRIMINATORS = ("method", "type")


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


def _locate(node: yaml.Node, file: str, prefix: Path_, out: dict[Path_, Loc]) -> None:
    out[prefix] = (file, node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            _locate(value_node, file, (*prefix, key_node.value), out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _locate(item, file, (*prefix, i), out)


def _read_yaml(path: Path) -> tuple[dict[str, Any], dict[Path_, Loc]]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UserError(f"recipe not found: {path}") from None
    except OSError as exc:
        raise UserError(f"cannot read recipe {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise UserError(f"invalid YAML: {getattr(exc, 'problem', exc)}", location=where) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UserError("a recipe must be a mapping of sections", location=f"{path}:1:1")
    locations: dict[Path_, Loc] = {}
    if node is not None:
        _locate(node, _display(path), (), locations)
    return data, locations


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


def _resolve_chain(path: Path, stack: tuple[Path, ...]) -> tuple[dict, dict[Path_, Loc], list[Path]]:
    path = path.resolve()
    if path in stack:
        cycle = " -> ".join(str(p) for p in (*stack, path))
        raise UserError(f"extends cycle: {cycle}", location=str(stack[-1]), field="extends")
    data, locs = _read_yaml(path)
    parents = data.pop("extends", None)
    if parents is None:
        return data, locs, [path]
    parent_list = [parents] if isinstance(parents, str) else parents
    if not isinstance(parent_list, list) or not all(isinstance(p, str) for p in parent_list):
        loc = locs.get(("extends",), (str(path), 1, 1))
        raise UserError("must be a relative path or a list of them", location=f"{loc[0]}:{loc[1]}:{loc[2]}", field="extends")
    merged: dict[str, Any] = {}
    merged_locs: dict[Path_, Loc] = {}
    chain: list[Path] = []
    for parent in parent_list:
        ppath = (path.parent / parent)
        if not ppath.is_file():
            loc = locs[("extends",)]
            raise UserError(f"extended recipe not found: {ppath}", location=f"{loc[0]}:{loc[1]}:{loc[2]}", field="extends")
        pdata, plocs, pchain = _resolve_chain(ppath, (*stack, path))
        merged, chain = _merge(merged, pdata), chain + pchain
        merged_locs.update(plocs)
    merged_locs.update({k: v for k, v in locs.items() if k and k[0] != "extends"})
    return _merge(merged, data), merged_locs, chain + [path]


def parse_override(text: str) -> tuple[list[str], Any]:
    """`a.b.c=value` → (["a","b","c"], value parsed as YAML scalar/list)."""
    key, sep, raw = text.partition("=")
    if not sep or not key or any(not part for part in key.split(".")):
        raise UserError(f"--set {text!r}: expected dotted.path=value (e.g. build.max_batch_size=16)")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        raise UserError(f"--set {text!r}: value is not valid YAML") from None
    return key.split("."), value


def _apply_override(data: dict[str, Any], keys: list[str], value: Any, text: str) -> None:
    node = data
    for i, key in enumerate(keys[:-1]):
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            raise UserError(f"--set {text!r}: {'.'.join(keys[: i + 1])} is not a section")
        node = child
    old = node.get(keys[-1])
    if isinstance(old, dict) and isinstance(value, dict) and not _retagged(old, value):
        node[keys[-1]] = _merge(old, value)
    else:
        node[keys[-1]] = value


def load_recipe(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> LoadedRecipe:
    """Read, merge, override and validate a recipe; raise UserError (listing every problem)."""
    path = Path(path)
    data, locations, chain = _resolve_chain(path, ())
    for text in overrides:
        keys, value = parse_override(text)
        _apply_override(data, keys, value, text)
        for k in [p for p in locations if p[: len(keys)] == tuple(keys)]:
            del locations[k]
        locations[tuple(keys)] = (f"--set {text}", 1, 1)
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as exc:
        loaded = LoadedRecipe(recipe=None, path=path, data=data, locations=locations, chain=chain)  # type: ignore[arg-type]
        raise RecipeErrors([_to_user_error(err, loaded) for err in exc.errors()]) from None
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
        msg = f"invalid value {err.get('input')!r}"
    elif err["type"] == "value_error":
        msg = msg.removeprefix("Value error, ")
    return UserError(msg, location=loaded.where(path), field=_dotted(path) or "(recipe)", allowed=allowed)


def _dotted(path: Path_) -> str:
    return ".".join(str(p) for p in path)


def _allowed_keys(parent: Path_, loaded: LoadedRecipe) -> str | None:
    from builder.recipe.fields import section_model

    model = section_model(parent, loaded.data)
    return ", ".join(model.model_fields) if model is not None else None
