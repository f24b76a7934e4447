"""The engine backends by name: `backend("trtllm")`, `backend_of(recipe)` (its target.backend), and every stage name
in pipeline order (`stage_order`, for `trtspec cache`). A backend is a module under builder/stages/backends/ that
declares one `Backend` (`builder.stages.stage`), listed here once.
"""

# trtllm: the backend registry lists each backend module once

from __future__ import annotations

from builder.errors import UserError
from builder.recipe.schema import Recipe
from builder.stages.backends import onnxruntime, tensorrt, trtllm, trtllm_llmapi
from builder.stages.stage import Backend

BACKENDS: dict[str, Backend] = {
    b.name: b for b in (onnxruntime.BACKEND, tensorrt.BACKEND, trtllm.BACKEND, trtllm_llmapi.BACKEND)
}


def backend(name: str) -> Backend:
    """The backend declared under `name`; UserError (exit 2) naming target.backend and the known ones."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise UserError(
            f"unknown engine backend {name!r}", field="target.backend", allowed=", ".join(BACKENDS)
        ) from None


def backend_of(recipe: Recipe) -> Backend:
    """The recipe's backend (target.backend, or the device's default)."""
    return backend(recipe.target.engine_backend)


def stage_order() -> tuple[str, ...]:
    """Every stage name of every backend, upstream before downstream (each backend's order merged)."""
    order: list[str] = []
    for b in BACKENDS.values():
        for i, stage in enumerate(b.stages):
            if stage.name in order:
                continue
            later = [order.index(s.name) for s in b.stages[i + 1 :] if s.name in order]
            order.insert(min(later, default=len(order)), stage.name)
    return tuple(order)


def opened_here() -> tuple[str, ...]:
    """The backends whose engine folders trtspec opens itself (generate, serve, bench, tune)."""
    return tuple(name for name, b in BACKENDS.items() if b.served_elsewhere is None)
