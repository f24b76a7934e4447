"""`OrtEagleNet`: the `EagleNet` protocol (builder.speculative.engine) over the exported EAGLE draft graph.

Its own KV buffer (the draft layer's cache) with its own dense rows; the sequence ids are the target
engine's. `extend` runs the pending pairs causally and commits them; `expand` runs one tree level in
the tentative tail (after `write_offset` earlier tentative slots). Inputs are laid out in row order;
rows without work this call are idle (num_new 0 writes nothing in the `ort` variant). Its bindings are the
graph's I/O contract (`builder.export.contract.EAGLE`) at the call's sizes, in float32 (the CPU form).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from builder.engines.batched import LruBindings
from builder.engines.ort.kv import KVBuffers
from builder.engines.ort.session import Bound, make_session
from builder.engines.rows import RowTable
from builder.export.contract import EAGLE, call_spec
from builder.speculative.engine import DraftOutput


class OrtEagleNet:
    def __init__(self, graph: Path, *, layers: int, kv_heads: int, head_dim: int, hidden_size: int, top_k: int,
                 capacity: int, max_batch_size: int = 1, threads: int = 1) -> None:  # fmt: skip
        self.top_k, self.hidden_size, self.capacity = top_k, hidden_size, capacity
        self.session = make_session(graph, threads)
        self.rows = RowTable(max_batch_size)
        self.kv = KVBuffers(layers, max_batch_size, kv_heads, capacity, head_dim)
        self.committed = np.zeros(max_batch_size, dtype=np.int64)
        self._ids: dict[int, int] = {}  # the target engine's sequence id -> our sequence id
        self._bound = LruBindings()

    def start(self, seqs: Sequence[int]) -> None:
        for s, ours in zip(seqs, self.rows.add(len(seqs))):
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

    def _binding(self, b: int, f: int, u: int) -> Bound:
        return self._bound.get((b, f, u), lambda: self._build(b, f, u))

    def _build(self, b: int, f: int, u: int) -> Bound:
        inputs, outputs = call_spec(EAGLE, {"B": b, "F": f, "U": u, "C": self.hidden_size, "K": self.top_k})
        return Bound(self.session, inputs, outputs, self.kv.ortvalues(0, b))
