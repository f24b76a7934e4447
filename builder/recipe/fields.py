"""Walk the recipe schema along a data path (used for 'allowed keys' in error messages)."""

from __future__ import annotations

import types
import typing
from typing import Any

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
