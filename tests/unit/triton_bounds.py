"""An address checker for OpenAI Triton's interpreter (TRITON_INTERPRET=1), for tests.

On a GPU an out-of-range load or store is an illegal address that poisons the CUDA context; under the
interpreter it is a raw read or write of host memory, which may go unnoticed. `checked_addresses()` makes it
loud: while active, every launch records the extent of each tensor it was given (GridExecutor._init_args_hst,
the host copies the interpreter runs on), and every masked-on lane of every load and store
(InterpreterBuilder.create_masked_load / create_masked_store) must lie wholly inside one of those extents
— else OutOfBounds (raised inside the launch; Triton re-raises it wrapped in an InterpreterError naming it).
Read from triton 3.9's `triton/runtime/interpreter.py`.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Iterator

import numpy as np


class OutOfBounds(AssertionError):
    pass


def _extent(t: Any) -> tuple[int, int]:
    """[start, end) bytes of a tensor view (non-negative strides; a stride-0 dimension reads one row)."""
    if t.numel() == 0:
        return t.data_ptr(), t.data_ptr()
    last = sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()


def _tensors(arg: Any) -> Iterator[Any]:
    if isinstance(arg, (tuple, list)):
        for a in arg:
            yield from _tensors(a)
    elif hasattr(arg, "data_ptr") and hasattr(arg, "element_size"):
        yield arg


def _check(extents: list[tuple[int, int]], ptrs: np.ndarray, mask: np.ndarray, itemsize: int, what: str) -> None:
    addr = np.broadcast_to(ptrs, np.broadcast_shapes(ptrs.shape, mask.shape))[np.broadcast_to(mask, ptrs.shape)]
    if addr.size == 0:
        return
    addr = addr.astype(np.uint64).reshape(-1)
    starts = np.array([s for s, _ in extents], dtype=np.uint64)
    ends = np.array([e for _, e in extents], dtype=np.uint64)
    order = np.argsort(starts)
    starts, ends = starts[order], ends[order]
    i = np.searchsorted(starts, addr, side="right") - 1  # the extent starting at or before each address
    ok = (i >= 0) & (addr + np.uint64(itemsize) <= ends[np.maximum(i, 0)])
    if not ok.all():
        bad = int(addr[~ok][0])
        raise OutOfBounds(
            f"{what} of {itemsize} bytes at {bad:#x}: outside every tensor of the launch ({int((~ok).sum())} lanes)"
        )


@contextlib.contextmanager
def checked_addresses() -> Iterator[list[str]]:
    """Check every interpreted load / store (module docstring); yields the list of launches seen."""
    interp = sys.modules["triton.runtime.interpreter"]
    builder, executor = interp.InterpreterBuilder, interp.GridExecutor
    launches: list[str] = []
    extents: list[tuple[int, int]] = []
    orig_init, orig_load, orig_store = executor._init_args_hst, builder.create_masked_load, builder.create_masked_store

    def init_args_hst(self, args_dev, kwargs):
        args_hst, kwargs_hst = orig_init(self, args_dev, kwargs)
        extents[:] = [_extent(t) for t in _tensors([*args_hst, *kwargs_hst.values()])]
        launches.append(getattr(self.fn, "__name__", "?"))
        return args_hst, kwargs_hst

    def create_masked_load(self, ptrs, mask, other, cache_policy, is_volatile):
        itemsize = np.dtype(interp._get_np_dtype(ptrs.get_element_ty())).itemsize
        _check(extents, ptrs.data, mask.data, itemsize, f"load in {launches[-1]}")
        return orig_load(self, ptrs, mask, other, cache_policy, is_volatile)

    def create_masked_store(self, ptrs, value, mask, cache_policy):
        itemsize = np.dtype(interp._get_np_dtype(ptrs.get_element_ty())).itemsize
        _check(extents, ptrs.data, mask.data, itemsize, f"store in {launches[-1]}")
        return orig_store(self, ptrs, value, mask, cache_policy)

    executor._init_args_hst, builder.create_masked_load = init_args_hst, create_masked_load
    builder.create_masked_store = create_masked_store
    try:
        yield launches
    finally:
        executor._init_args_hst, builder.create_masked_load = orig_init, orig_load
        builder.create_masked_store = orig_store
