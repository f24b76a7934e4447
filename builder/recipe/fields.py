"""Walk the recipe schema along a data path (allowed keys and number ranges in error messages)."""

from __future__ import annotations

import types
import typing
from typing import Any

import annotated_types
from pydantic import BaseModel

from builder.recipe.schema import Recipe


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The BaseModel classes an annotation can hold (through Optional, Union, Annotated, list)."""
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if origin is typing.Annotated:
        return _models_in(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]
    return []


def _pick(models: list[type[BaseModel]], value: Any) -> type[BaseModel] | None:
    if len(models) == 1:
        return models[0]
    if isinstance(value, dict):
        for key in ("method", "type"):
            for m in models:
                f = m.model_fields.get(key)
                if f is not None and key in value and value[key] in typing.get_args(f.annotation):
                    return m
    return None


def section_model(path: tuple[Any, ...], data: Any) -> type[BaseModel] | None:
    """The pydantic model describing the mapping at `path` of the raw recipe data, if any."""
    model: type[BaseModel] | None = Recipe
    node = data
    for part in path:
        if model is None or not isinstance(part, str) or part not in model.model_fields:
            return None
        node = node.get(part) if isinstance(node, dict) else None
        model = _pick(_models_in(model.model_fields[part].annotation), node)
    return model


def field_bounds(path: tuple[Any, ...], data: Any) -> str | None:
    """The allowed range of the number at `path` (`1..4096`, `0 < x ≤ 1`), from the schema's bounds."""
    item = bool(path) and isinstance(path[-1], int)  # an element of a list field, e.g. bench.concurrency.1
    if item:
        path = path[:-1]
    model = section_model(path[:-1], data) if path else None
    info = model.model_fields.get(path[-1]) if model is not None and isinstance(path[-1], str) else None
    if info is None:
        return None
    annotation, metadata = info.annotation, list(info.metadata)
    if item:
        inner = (typing.get_args(annotation) or (None,))[0]
        annotation, *extra = typing.get_args(inner) if typing.get_origin(inner) is typing.Annotated else (inner,)
        metadata = [m for e in extra for m in getattr(e, "metadata", [e])]
    is_int = annotation is int or int in typing.get_args(annotation)
    return _range_text(metadata, is_int)


def _range_text(metadata: list[Any], is_int: bool) -> str | None:
    lo: Any = None
    hi: Any = None
    lo_open = hi_open = False
    for m in metadata:
        if isinstance(m, (annotated_types.Gt, annotated_types.Ge)):
            lo, lo_open = (m.gt, True) if isinstance(m, annotated_types.Gt) else (m.ge, False)
        elif isinstance(m, (annotated_types.Lt, annotated_types.Le)):
            hi, hi_open = (m.lt, True) if isinstance(m, annotated_types.Lt) else (m.le, False)
    if lo is None and hi is None:
        return None
    if is_int:
        low = "" if lo is None else str(lo + 1 if lo_open else lo)
        high = "" if hi is None else str(hi - 1 if hi_open else hi)
        return f"{low}..{high}"
    low = "" if lo is None else f"{lo:g} {'<' if lo_open else '≤'} "
    high = "" if hi is None else f" {'<' if hi_open else '≤'} {hi:g}"
    return f"{low}x{high}, finite"
