"""What the shared host side of the target engines (`builder.engines.batched`) asks of a backend, and the pieces
every backend uses: a `Binding` (host input and output arrays of one graph call, and `run`), the backend's KV rows
(`KVRows`), the binding cache (`LruBindings`) and the I/O shapes of one target-graph call (`target_io`)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Hashable, Mapping, Protocol

import numpy as np

Shape = tuple[int, ...]
Spec = Mapping[str, tuple[Shape, type]]  # name -> (shape, numpy dtype)


class Binding(Protocol):
    x: dict[str, np.ndarray]  # inputs, filled in place before run()
    y: dict[str, np.ndarray]  # outputs, valid after run()

    def run(self) -> None: ...


class KVRows(Protocol):
    capacity: int

    def compact(self, row: int, start: int, nodes: np.ndarray) -> None: ...
    def move_row(self, dst: int, src: int, length: int) -> None: ...


class KVRowsBatched(KVRows, Protocol):
    def compact_rows(self, rows: np.ndarray, starts: np.ndarray, chains: np.ndarray, lengths: np.ndarray) -> None: ...


class BindingCache(Protocol):
    def get(self, key: Hashable, build: Callable[[], Binding]) -> Binding: ...


class LruBindings:
    """The most recently used bindings, keyed by shape; built on demand. A key whose first element is
    "prefill" lives in its own smaller pool, so prompts of new lengths never push a step's binding out."""

    def __init__(self, size: int = 32, prefill: int = 4) -> None:
        self.size, self.prefill = size, prefill
        self._items: OrderedDict[Hashable, Binding] = OrderedDict()
        self._prefills: OrderedDict[Hashable, Binding] = OrderedDict()

    def get(self, key: Hashable, build: Callable[[], Binding]) -> Binding:
        is_prefill = isinstance(key, tuple) and key[:1] == ("prefill",)
        items, size = (self._prefills, self.prefill) if is_prefill else (self._items, self.size)
        item = items.get(key)
        if item is None:
            item = items[key] = build()
            if len(items) > size:
                items.popitem(last=False)
        else:
            items.move_to_end(key)
        return item


def target_io(
    mode: str, b: int, t: int, tv: int, p: int, w: int, hidden_size: int, medusa: tuple[int, int] | None
) -> tuple[dict[str, tuple[Shape, type]], dict[str, tuple[Shape, type]]]:
    """(inputs, outputs) of one target-graph call: name -> (shape, numpy dtype); caches not included."""
    inputs: dict[str, tuple[Shape, type]] = {
        "tokens": ((b, t), np.int64),
        "position_ids": ((b, t), np.int64),
        "tree_mask": ((b, t, t), np.bool_),
        "past_len": ((b,), np.int64),
        "num_nodes": ((b,), np.int64),
        "verify_index": ((b, tv), np.int64),
        "paths": ((b, p, w), np.int32),
    }
    if mode == "rejection":
        inputs |= {"temperature": ((b,), np.float32), "top_p": ((b,), np.float32), "uniforms": ((b, w), np.float32)}
    outputs: dict[str, tuple[Shape, type]] = {
        "accepted_len": ((b,), np.int32),
        "best_path": ((b,), np.int32),
        "output_tokens": ((b, w), np.int32),
        "node_argmax": ((b, tv), np.int64),
        "hidden": ((b, t, hidden_size), np.float32),
    }
    if medusa is not None:
        outputs["medusa_topk"] = ((b, *medusa), np.int64)
    return inputs, outputs
