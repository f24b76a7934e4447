"""The host side of the EAGLE draft net, shared by the ONNX Runtime and the TensorRT engines: the `EagleNet`
protocol (builder.speculative.protocols) minus the runtime (as `builder.engines.batched` is for the target).

`EagleHost` keeps its own dense rows (`builder.engines.rows`) and committed lengths; the sequence ids are
the target engine's. `extend` runs the pending pairs causally and commits them; `expand` runs one tree
level in the tentative tail (after `write_offset` earlier tentative slots). Inputs are laid out in row
order; rows without work this call are idle (num_new 0 writes nothing in the `ort` variant). A call's
tensors are the graph's I/O contract (`builder.export.contract.EAGLE`) at its sizes, in the draft's
`Precision` (float32 in the CPU form; model.dtype for `hidden_in` / `hidden_out` in the GPU form).

A graph that picks its output rows (`pick_rows`: its `out_rows` input, the ONNX Runtime form; see
`builder.export.eagle`) is asked for one row per sequence in `extend` (the last pair's: R = 1) and for every
row in `expand` (R = F, `out_rows` set when the binding is built); other graphs return all F rows.

A backend supplies
* `kv` — its KV buffer (`move_row`: a departure leaves rows dense), and
* `_build(b, f, u)` — a `Binding` (host arrays `x` / `y` of `io(b, f, u)`'s shapes and dtypes, `run()`)
  for the running rows 0..b-1, F new rows per sequence and U attended tentative slots (and `_build_rows`
  where it binds row ranges, and `pick_rows` where its graph has `out_rows`).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Protocol, Sequence

import numpy as np

from builder.engines.bindings import Binding, LruBindings
from builder.engines.results import arange
from builder.engines.rows import RowTable
from builder.export.contract import CPU, EAGLE, Precision, call_spec
from builder.speculative.protocols import DraftOutput

IoSpec = dict[str, tuple[tuple[int, ...], Any]]  # name -> (shape, NumPy dtype)


class EagleKV(Protocol):
    def move_row(self, dst: int, src: int, length: int) -> None: ...


class EagleHost:
    """The `EagleNet` protocol over an EAGLE draft graph; subclasses supply the runtime (module docstring)."""

    ranged = False  # the backend binds any contiguous row range (`_build_rows`), not only 0..B-1
    pick_rows = False  # the graph takes `out_rows` (module docstring)
    step_rows = 64  # calls with more new rows than this are prompt pairs (their bindings: a pool of their own)

    def __init__(
        self,
        kv: EagleKV,
        *,
        hidden_size: int,
        top_k: int,
        capacity: int,
        max_batch_size: int,
        precision: Precision = CPU,
    ) -> None:
        self.kv = kv
        self.top_k, self.hidden_size, self.capacity, self.precision = top_k, hidden_size, capacity, precision
        self.rows = RowTable(max_batch_size)
        self.committed: np.ndarray = np.zeros(max_batch_size, dtype=np.int64)  # per row
        self._ids: dict[int, int] = {}  # the target engine's sequence id -> our sequence id
        self._bound = LruBindings()
        self._rows_key: tuple[int, list[int]] | None = None
        self._rows_cache: np.ndarray = np.zeros(0, np.int64)
        self._masked: dict[int, np.ndarray | None] = {}  # id(binding) -> the read-only tree mask its input holds

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

    def committed_lens(self, seqs: Sequence[int]) -> np.ndarray:
        out: np.ndarray = self.committed[self._rows_of(seqs)]
        return out

    def _row(self, seq: int) -> int:
        return self.rows.row(self._ids[seq])

    def _rows_of(self, seqs: Sequence[int]) -> np.ndarray:
        """Rows of the given sequences, [B] int64 (cached while the sequences and the row table stay the same)."""
        key = (self.rows.version, list(seqs))
        if key != self._rows_key:
            self._rows_cache = self.rows.array([self._ids[s] for s in seqs])
            self._rows_key = key
        return self._rows_cache

    def extend(self, seqs: Sequence[int], tokens: np.ndarray, hidden: np.ndarray, num_new: np.ndarray) -> DraftOutput:
        rows = self._rows_of(seqs)
        m = tokens.shape[1]
        if (self.committed[rows] + m > self.capacity).any():
            raise ValueError(f"EAGLE draft cache full (capacity {self.capacity})")
        num_new = np.asarray(num_new, dtype=np.int64)
        bound, r0, local = self._call(rows, m, m)
        x = bound.x
        past = self._idle(x, r0, len(rows))
        np.add(past[:, None], arange(m), out=x["position_ids"])
        x["write_offset"][:] = 0
        x["tree_mask"][:] = _tril(m)
        picked = self.pick_rows  # the graph returns each row's last pair only (R = 1; idle rows: row 0)
        if len(rows) == 1 == len(past):  # one row, the call's only one: plain copies, no gathers
            x["tokens"][:] = tokens
            x["hidden_in"][:] = hidden
            x["num_new"][:] = num_new
            i = int(num_new[0]) - 1
            if picked:
                x["out_rows"][:] = i
            bound.run()
            y = bound.y
            self.committed[rows] += num_new
            if picked:
                return DraftOutput(y["hidden_out"], y["topk_tokens"], y["topk_logprobs"])  # (views: see `expand`)
            return DraftOutput(
                y["hidden_out"][:, i : i + 1], y["topk_tokens"][:, i : i + 1], y["topk_logprobs"][:, i : i + 1]
            )  # (views: see `expand`)
        x["tokens"][local] = tokens
        x["hidden_in"][local] = hidden
        x["num_new"][local] = num_new
        last: np.ndarray = num_new - 1
        if picked:
            x["out_rows"][:] = 0
            x["out_rows"][local, 0] = last
        bound.run()
        y = bound.y
        self.committed[rows] += num_new
        if picked:
            return DraftOutput(y["hidden_out"][local], y["topk_tokens"][local], y["topk_logprobs"][local])
        return DraftOutput(
            y["hidden_out"][local, last][:, None],
            y["topk_tokens"][local, last][:, None],
            y["topk_logprobs"][local, last][:, None],
        )

    def expand(
        self,
        seqs: Sequence[int],
        tokens: np.ndarray,
        hidden: np.ndarray,
        position_ids: np.ndarray,
        write_offset: int,
        tree_mask: np.ndarray,
    ) -> DraftOutput:
        rows = self._rows_of(seqs)
        f = tokens.shape[1]
        u = write_offset + f
        if (
            int(self.committed[rows[0]]) + u > self.capacity
            if len(rows) == 1
            else (self.committed[rows] + u > self.capacity).any()
        ):
            raise ValueError(f"EAGLE draft cache full (capacity {self.capacity})")
        bound, r0, local = self._call(rows, f, u, "expand")  # (its write_offset is u - f, set when built)
        x = bound.x
        b = len(rows)
        past = self._idle(x, r0, b)
        if b == 1 == len(past):  # one row, the call's only one: plain copies, no gathers (num_new is f, set
            x["tokens"][:] = tokens  # when built: see `_call`)
            x["hidden_in"][:] = hidden
            x["position_ids"][:] = position_ids
            if tree_mask.flags.writeable or self._masked.get(id(bound)) is not tree_mask:  # a read-only mask (a
                x["tree_mask"][:] = tree_mask  # static tree's, cached by the drafter) already there stays
                self._masked[id(bound)] = None if tree_mask.flags.writeable else tree_mask
            bound.run()
            y = bound.y  # the binding's own output arrays, not copies: valid until this binding runs again
            return DraftOutput(y["hidden_out"], y["topk_tokens"], y["topk_logprobs"])
        self._masked.pop(id(bound), None)
        if b < len(past):
            x["tree_mask"][:, arange(f), write_offset + arange(f)] = True  # idle rows: each node itself
        x["tokens"][local] = tokens
        x["hidden_in"][local] = hidden
        x["position_ids"][local] = position_ids
        x["tree_mask"][local] = tree_mask[:b, :, :u]
        x["num_new"][local] = f
        bound.run()
        y = bound.y
        return DraftOutput(y["hidden_out"][local], y["topk_tokens"][local], y["topk_logprobs"][local])

    def _call(self, rows: np.ndarray, f: int, u: int, kind: str = "step") -> tuple[Binding, int, np.ndarray]:
        """The binding for a call on `rows` (F new rows, U tentative slots), its first row r0, and `rows` - r0.
        A call runs the contiguous rows r0..r1 holding the given sequences when the backend binds such ranges
        (`ranged`: a new sequence's prompt pairs run alone, not over the whole batch), else rows 0..B-1.
        `expand` calls (kind "expand") have bindings of their own, made with write_offset = U - F (what every
        call with that key writes) and num_new = F (what a one-row binding's every call writes; calls with
        idle rows write theirs)."""
        if not self.ranged:
            r0, r1 = 0, len(self.rows)
        elif len(rows) == 1:
            r0 = int(rows[0])
            r1 = r0 + 1
        else:
            r0, r1 = int(rows.min()), int(rows.max()) + 1
        if f > self.step_rows:
            kind = "prefill"  # prompt pairs: a pool of their own (`LruBindings`)
        bound = self._bound.get((kind, r0, r1, f, u), lambda: self._build_call(kind, r0, r1, f, u))
        return bound, r0, rows - r0 if r0 else rows

    def _build_call(self, kind: str, r0: int, r1: int, f: int, u: int) -> Binding:
        """A binding for a call of this kind; with `pick_rows`, an expand's asks for all F rows (R = F, set
        here), an extend's or a prompt's for one per sequence (R = 1, set per call)."""
        expand = kind == "expand"
        bound = self._build_rows(r0, r1, f, u, f if expand else 1)
        if len(self._masked) > 256:  # (entries of evicted bindings)
            self._masked.clear()
        self._masked.pop(id(bound), None)  # a new binding (its id may be an evicted one's): its mask is zeros
        if expand:
            bound.x["write_offset"][:] = u - f
            bound.x["num_new"][:] = f
            if self.pick_rows:
                bound.x["out_rows"][:] = arange(f)
        return bound

    def _idle(self, x: dict[str, np.ndarray], r0: int, busy: int) -> np.ndarray:
        """Idle defaults for every row of the call (rows given work overwrite them): nothing new, nothing
        written, positions at the committed length. Returns the call's committed lengths."""
        past = self.committed[r0 : r0 + len(x["past_len"])]
        x["past_len"][:] = past
        if busy < len(past):  # (when every row of the call has work, the caller overwrites all of these)
            x["tokens"][:] = 0
            x["hidden_in"][:] = 0.0
            x["num_new"][:] = 0
            x["tree_mask"][:] = False
            x["position_ids"][:] = past[:, None]
        return past

    def io(self, b: int, f: int, u: int, r: int | None = None) -> tuple[IoSpec, IoSpec]:
        """(inputs, outputs) of one call, caches excluded: the contract's tensors at these sizes, in our precision
        (R output rows per sequence with `pick_rows`; default F)."""
        sizes = {"B": b, "F": f, "U": u, "R": f if r is None else r, "C": self.hidden_size, "K": self.top_k}
        return call_spec(EAGLE, sizes, self.precision, rows=self.pick_rows)

    def _build_rows(self, r0: int, r1: int, f: int, u: int, r: int) -> Binding:
        """A binding for rows r0..r1 with R output rows (backends with `ranged = True`; otherwise r0 is 0 and R is
        F or unused: `_build`)."""
        if r0:
            raise NotImplementedError("this backend binds every row from 0")
        return self._build(r1, f, u)

    def _build(self, b: int, f: int, u: int) -> Binding:
        raise NotImplementedError


@lru_cache(maxsize=64)
def _tril(n: int) -> np.ndarray:
    a: np.ndarray = np.tril(np.ones((n, n), dtype=bool))
    a.flags.writeable = False
    return a
