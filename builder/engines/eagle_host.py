"""The host side of the EAGLE draft net, shared by the ONNX Runtime and the TensorRT engines: the `EagleNet`
protocol (builder.speculative.engine) minus the runtime (as `builder.engines.batched` is for the target).

`EagleHost` keeps its own dense rows (`builder.engines.rows`) and committed lengths; the sequence ids are
the target engine's. `extend` runs the pending pairs causally and commits them; `expand` runs one tree
level in the tentative tail (after `write_offset` earlier tentative slots). Inputs are laid out in row
order; rows without work this call are idle (num_new 0 writes nothing in the `ort` variant). A call's
tensors are the graph's I/O contract (`builder.export.contract.EAGLE`) at its sizes, in the draft's
`Precision` (float32 in the CPU form; model.dtype for `hidden_in` / `hidden_out` in the GPU form).

A backend supplies
* `kv` — its KV buffer (`move_row`: a departure leaves rows dense), and
* `_build(b, f, u)` — a `Binding` (host arrays `x` / `y` of `io(b, f, u)`'s shapes and dtypes, `run()`)
  for the running rows 0..b-1, F new rows per sequence and U attended tentative slots.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

import numpy as np

from builder.engines.batched import Binding, LruBindings
from builder.engines.rows import RowTable
from builder.export.contract import CPU, EAGLE, Precision, call_spec
from builder.speculative.engine import DraftOutput

IoSpec = dict[str, tuple[tuple[int, ...], Any]]  # name -> (shape, NumPy dtype)


class EagleKV(Protocol):
    def move_row(self, dst: int, src: int, length: int) -> None: ...


class EagleHost:
    """The `EagleNet` protocol over an EAGLE draft graph; subclasses supply the runtime (module docstring)."""

    def __init__(self, kv: EagleKV, *, hidden_size: int, top_k: int, capacity: int, max_batch_size: int,
                 precision: Precision = CPU) -> None:  # fmt: skip
        self.kv = kv
        self.top_k, self.hidden_size, self.capacity, self.precision = top_k, hidden_size, capacity, precision
        self.rows = RowTable(max_batch_size)
        self.committed: np.ndarray = np.zeros(max_batch_size, dtype=np.int64)  # per row
        self._ids: dict[int, int] = {}  # the target engine's sequence id -> our sequence id
        self._bound = LruBindings()

    def start(self, seqs: Sequence[int]) -> None:
        if len(set(seqs)) != len(seqs) or any(s in self._ids for s in seqs):
            raise ValueError(f"sequences {list(seqs)} are already started (or repeated)")
        for s, ours in zip(seqs, self.rows.add(len(seqs))):  # nothing below can fail once the rows are added
            self._ids[s] = ours
            self.committed[self.rows.row(ours)] = 0

    def release(self, seq: int) -> None:
        moved = self.rows.remove(self._ids.pop(seq))
        if moved is not None:
            hole, last = moved
            self.kv.move_row(hole, last, int(self.committed[last]))
            self.committed[hole] = self.committed[last]
        self.committed[len(self.rows)] = 0

    def committed_len(self, seq: int) -> int:
        return int(self.committed[self._row(seq)])

    def _row(self, seq: int) -> int:
        return self.rows.row(self._ids[seq])

    def extend(self, seqs: Sequence[int], tokens: np.ndarray, hidden: np.ndarray, num_new: np.ndarray) -> DraftOutput:
        rows = [self._row(s) for s in seqs]
        m = tokens.shape[1]
        past = self.committed[: len(self.rows)]
        if (past[rows] + m > self.capacity).any():
            raise ValueError(f"EAGLE draft cache full (capacity {self.capacity})")
        bound = self._binding(len(self.rows), m, m)
        x = bound.x
        self._clear(x, past, m)
        x["position_ids"][:] = past[:, None] + np.arange(m)
        x["write_offset"][:] = 0
        x["tree_mask"][:] = np.tril(np.ones((m, m), dtype=bool))
        for i, row in enumerate(rows):
            x["tokens"][row] = tokens[i]
            x["hidden_in"][row] = hidden[i]
            x["num_new"][row] = num_new[i]
        bound.run()
        y = bound.y
        last = np.asarray(num_new, dtype=np.int64) - 1
        self.committed[rows] += np.asarray(num_new, dtype=np.int64)
        return DraftOutput(y["hidden_out"][rows, last][:, None].copy(), y["topk_tokens"][rows, last][:, None].copy(),
                           y["topk_logprobs"][rows, last][:, None].copy())  # fmt: skip

    def expand(self, seqs: Sequence[int], tokens: np.ndarray, hidden: np.ndarray, position_ids: np.ndarray,
               write_offset: int, tree_mask: np.ndarray) -> DraftOutput:  # fmt: skip
        rows = [self._row(s) for s in seqs]
        f = tokens.shape[1]
        u = write_offset + f
        past = self.committed[: len(self.rows)]
        if (past[rows] + u > self.capacity).any():
            raise ValueError(f"EAGLE draft cache full (capacity {self.capacity})")
        bound = self._binding(len(self.rows), f, u)
        x = bound.x
        self._clear(x, past, f)
        x["write_offset"][:] = write_offset
        x["tree_mask"][:, np.arange(f), write_offset + np.arange(f)] = True
        for i, row in enumerate(rows):
            x["tokens"][row] = tokens[i]
            x["hidden_in"][row] = hidden[i]
            x["position_ids"][row] = position_ids[i]
            x["tree_mask"][row] = tree_mask[i, :, :u]
            x["num_new"][row] = f
        bound.run()
        y = bound.y
        return DraftOutput(y["hidden_out"][rows].copy(), y["topk_tokens"][rows].copy(), y["topk_logprobs"][rows].copy())

    @staticmethod
    def _clear(x: dict[str, np.ndarray], past: np.ndarray, f: int) -> None:
        """Idle defaults for every row (rows given work overwrite them)."""
        x["tokens"][:] = 0
        x["hidden_in"][:] = 0.0
        x["position_ids"][:] = past[:, None]
        x["past_len"][:] = past
        x["num_new"][:] = 0
        x["tree_mask"][:] = False

    def io(self, b: int, f: int, u: int) -> tuple[IoSpec, IoSpec]:
        """(inputs, outputs) of one call, caches excluded: the contract's tensors at these sizes, in our precision."""
        return call_spec(EAGLE, {"B": b, "F": f, "U": u, "C": self.hidden_size, "K": self.top_k}, self.precision)

    def _binding(self, b: int, f: int, u: int) -> Binding:
        return self._bound.get((b, f, u), lambda: self._build(b, f, u))

    def _build(self, b: int, f: int, u: int) -> Binding:
        raise NotImplementedError
