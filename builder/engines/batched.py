"""The host side of an engine over the exported target step graph, shared by the ONNX Runtime and the
TensorRT engines: the `Engine` protocol (builder.speculative.engine) minus the runtime.

`BatchedTarget` keeps the running batch in dense rows (`builder.engines.rows`), fills the graph's inputs
for a prefill or a step (I/O contract: `builder.export`), reads the verdict, commits the accepted chain
(KV compaction in the backend's buffer) and hands back NumPy results; its greedy shortcuts (`step_chain`,
`decode_greedy`, `step_plain`) are `builder.engines.shortcuts`'. A backend supplies (protocols:
`builder.engines.bindings`)

* `kv` — its KV buffers (`KVRows`: compact a committed chain, move a row, capacity; optionally
  `compact_rows`, every row's chain in one call), and
* `_make_binding(mode, r0, r1, inputs, outputs)` — a `Binding` for rows [r0, r1) of the greedy or
  rejection graph: host arrays `x` (inputs) and `y` (outputs) of exactly the shapes `target_io` gives,
  and `run()`, after which `y` holds the graph's outputs and the rows' caches the new nodes' KV.

Subclasses call `check_capacity` before allocating anything (the base does not check again).

Failures leave nothing behind: a prefill that raises takes its new rows back (`RowTable.adding`), every
draft's paths are checked against its tree before the commit compacts KV along them (`DraftBatch`, the
batched `check_draft`), and an accepted length the draft cannot hold is refused before anything moves.

Host work per step is a fixed number of NumPy calls, whatever the batch size (no per-row Python beyond
gathering the drafts' arrays; `scripts/bench_host.py` measures it):

* a step's drafts become one `DraftBatch` (padded arrays); when their trees are the previous step's (static
  trees, Lookahead layouts: the same read-only arrays) only the tokens are restacked, and the binding's
  mask, paths and node counts, already in place, are not written again;
* the verdict is checked, the chains gathered and the results written for all rows at once; the KV of every
  chain not already in place moves in one `compact_rows` call;
* results land in arrays kept per result shape (`builder.engines.results.ReusedResult`, with the verdict check
  `checked_verdicts`): a `StepResult` is valid until this engine's next `step`.

Bindings: a step's is keyed by its shape class (mode, rows in use, T, Tv, P, W) — never by a sequence or a
start row — so steady-state decoding builds nothing. A prefill's is keyed by (mode, start row, rows, prompt
length) and kept apart (`LruBindings`: a small pool of its own), so new prompt lengths never push a step's
binding out. Rounding the prompt length up to a bucket would let prefills share bindings, but measured on the
regime fixture a binding costs 0.13 ms to build while 12 padded tokens cost 5 ms of prefill (100 → 112
tokens: 51 → 57 ms): exact lengths win. The greedy graph serves all-greedy batches; a batch with any
sampled row runs the rejection graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Sequence

import numpy as np

from builder.engines.bindings import Binding, BindingCache, KVRows, Spec, target_io
from builder.engines.results import ReusedResult, checked_verdicts
from builder.engines.rows import RowTable
from builder.engines.shortcuts import ShortcutSteps, _ChainIO, _PlainIO
from builder.speculative.batch import DraftBatch, StructureCache
from builder.speculative.engine import Draft, PrefillResult, SamplingBatch, StepResult


@dataclass(frozen=True)
class _Filled:
    """What a binding's structure inputs hold: `batch`'s structure for `rows`, and its nodes' depths."""

    bound: Binding
    batch: DraftBatch
    rows: np.ndarray  # [b] the rows the structure was written for
    offsets: np.ndarray  # [rows in use, T] node depth per row (0: padding, idle rows)


class BatchedTarget(ShortcutSteps):
    """The `Engine` protocol over a target step graph; subclasses supply the runtime (module docstring)."""

    name = "batched"

    def __init__(
        self,
        kv: KVRows,
        bindings: BindingCache,
        *,
        vocab_size: int,
        hidden_size: int,
        medusa: tuple[int, int] | None,
        max_seq_len: int,
        max_batch_size: int,
    ) -> None:
        self.kv, self._bound = kv, bindings
        self._last: tuple[Hashable, Binding | None] = ((), None)  # the latest (shape key, binding): the fast path
        self.vocab_size, self.hidden_size, self.medusa = vocab_size, hidden_size, medusa
        self.max_seq_len, self.max_batch_size = max_seq_len, max_batch_size
        self.rows = RowTable(max_batch_size)
        self.committed: np.ndarray = np.zeros(max_batch_size, dtype=np.int64)  # per row
        self._filled: dict[int, _Filled] = {}  # id(binding) -> what its structure inputs hold (see _fill_step)
        self._structures: StructureCache = {}  # recent reusable draft structures (DraftBatch.of)
        self._chains: dict[
            int, _ChainIO
        ] = {}  # T -> the greedy one-row binding of T-node chains, once `step` filled it
        self._plain: Binding | None = None  # the binding whose structure inputs `step_plain` set (every row root-only)
        self._plain_io: _PlainIO | None = None  # `step_plain`'s running batch (its binding and views)
        self._results: dict[tuple[int, int, int, bool], ReusedResult] = {}  # (B, W, T, medusa) -> reused result arrays
        self._rows_key: tuple[int, list[int]] | None = None  # (row table version, sequences) of `_rows`
        self._rows: np.ndarray = np.zeros(0, np.int64)
        self._in_order = True

    @staticmethod
    def check_capacity(max_seq_len: int, capacity: int) -> None:
        if max_seq_len >= capacity:
            raise ValueError(
                f"max_seq_len {max_seq_len} leaves no room for draft nodes in the exported capacity {capacity}"
            )

    def committed_len(self, seq: int) -> int:
        return int(self.committed[self.rows.row(seq)])

    def release(self, seq: int) -> None:
        moved = self.rows.remove(seq)
        if moved is not None:
            hole, last = moved
            self.kv.move_row(hole, last, int(self.committed[last]))
            self.committed[hole] = self.committed[last]
        self.committed[len(self.rows)] = 0

    # -- prefill ---------------------------------------------------------------------------------

    def start(self, prompts: Sequence[Sequence[int]], sampling: SamplingBatch) -> tuple[list[int], PrefillResult]:
        lens = [len(p) for p in prompts]
        for p in prompts:
            if not 0 < len(p) <= self.max_seq_len:
                raise ValueError(f"prompt of {len(p)} tokens: need 1..{self.max_seq_len}")
            if min(p) < 0 or max(p) >= self.vocab_size:
                raise ValueError(f"prompt token ids must lie in [0, {self.vocab_size})")
        r0 = len(self.rows)
        with self.rows.adding(len(prompts)) as ids:  # a failing prefill takes its rows back
            try:
                return ids, self._prefill(prompts, lens, sampling, r0)
            except BaseException:
                self.committed[r0 : r0 + len(prompts)] = 0
                raise

    def _prefill(
        self, prompts: Sequence[Sequence[int]], lens: list[int], sampling: SamplingBatch, r0: int
    ) -> PrefillResult:
        b, t = len(prompts), max(lens)
        bound = self._binding(sampling, r0, r0 + b, t, 1, 1, 1, prefill=True)
        x = bound.x
        x["tokens"][:] = 0
        for i, p in enumerate(prompts):
            x["tokens"][i, : lens[i]] = p
        x["position_ids"][:] = np.arange(t)
        x["tree_mask"][:] = np.tril(np.ones((t, t), dtype=bool))
        x["past_len"][:] = 0
        x["num_nodes"][:] = lens
        x["verify_index"][:, 0] = np.array(lens) - 1
        x["paths"][:] = 0
        self._fill_sampling(x, sampling, np.arange(b))
        bound.run()
        y = bound.y
        self.committed[r0 : r0 + b] = lens
        hidden = [y["hidden"][i, : lens[i]].copy() for i in range(b)]  # b × [n_i, C]
        topk = y["medusa_topk"].copy() if "medusa_topk" in y else None  # [b, H, K]
        return PrefillResult(y["output_tokens"][:, 0].astype(np.int64), hidden, topk)

    # -- step ------------------------------------------------------------------------------------

    def step(self, seqs: Sequence[int], drafts: Sequence[Draft], sampling: SamplingBatch) -> StepResult:
        """One step (the `Engine` protocol); the result's arrays are reused by the next step (module docstring)."""
        b = len(seqs)
        if b != len(drafts) or (b > 1 and len(set(seqs)) != b):
            raise ValueError("step needs one draft per distinct sequence")
        rows = self._rows_of(seqs)  # [b] engine rows of the given sequences
        self._plain_io = None  # (rows' lengths move)
        n_rows = len(self.rows)
        batch = DraftBatch.of(drafts, self.vocab_size, cache=self._structures)  # checked: tokens, masks, depths, paths
        t, past = batch.t, self.committed[:n_rows]
        whole = len(rows) == n_rows and self._in_order  # rows == 0..n_rows-1: slices instead of gathers
        mine = past if whole else past[rows]
        if (int(mine[0]) if b == 1 else int(mine.max())) + t > self.kv.capacity:
            i = int(np.argmax(mine))
            raise ValueError(f"sequence at {mine[i]} tokens has no room for {t} nodes (capacity {self.kv.capacity})")
        bound = self._binding(sampling, 0, n_rows, t, t, batch.p, batch.w)
        self._fill_step(bound, rows, batch, past, whole)
        self._fill_sampling(bound.x, sampling, rows)
        bound.run()
        self._verify_on_host(bound.y, rows, batch, whole, sampling.greedy)
        out = self._commit(bound.y, rows, batch, whole)
        if n_rows == 1 and sampling.greedy and batch.p == 1 and batch.w == t:  # one chain (root-only included)
            if t not in self._chains or self._chains[t].bound is not bound:  # its structure inputs hold the one
                self._chains[t] = _ChainIO(bound)  # T-node chain structure for row 0 (step_chain)
        return out

    def _verify_on_host(
        self, y: dict[str, np.ndarray], rows: np.ndarray, batch: DraftBatch, whole: bool, greedy: bool
    ) -> None:
        """Where the graph leaves a step's verdict to the host (a plain-steps graph running chains): write it into
        `y`. The graphs verify in-graph by default: nothing to do."""

    def _rows_of(self, seqs: Sequence[int]) -> np.ndarray:
        """Rows of the given sequences (cached while the sequences and the row table stay the same)."""
        key = (self.rows.version, list(seqs))
        if key != self._rows_key:
            self._rows = self.rows.array(seqs)
            self._rows_key = key
            self._in_order = bool((self._rows == np.arange(len(self._rows))).all())
        return self._rows

    def _fill_step(self, bound: Binding, rows: np.ndarray, batch: DraftBatch, past: np.ndarray, whole: bool) -> None:
        """The binding's inputs for this step. The structure (mask, node counts, paths, depth offsets) is written
        only when it differs from what this binding last held (remembered per binding, so chains whose length
        changes every step, each length its own binding, rewrite nothing); tokens and positions every step."""
        x = bound.x
        f = self._filled.get(id(bound))
        if f is not None and f.bound is bound and f.batch is batch and batch.same_structure and f.rows is rows:
            offsets = f.offsets
        else:
            self._filled.pop(id(bound), None)  # until the structure below is complete
            if self._plain is bound:
                self._plain = None
            x["tokens"][:] = 0
            x["tree_mask"][:] = np.eye(batch.t, dtype=bool)  # padding nodes and idle rows attend themselves only
            x["num_nodes"][:] = 0  # rows without a draft this step are idle
            x["paths"][:] = -1
            x["paths"][:, :, 0] = 0
            x["tree_mask"][rows] = batch.mask
            x["num_nodes"][rows] = batch.nodes
            x["paths"][rows] = batch.paths
            offsets = np.zeros((len(past), batch.t), np.int64)  # [rows, T] node depth (0: padding, idle)
            offsets[rows] = batch.depth
            if len(self._filled) >= 64:
                self._filled.clear()
            self._filled[id(bound)] = _Filled(bound, batch, rows, offsets)
        if whole:
            x["tokens"][...] = batch.tokens
        else:
            x["tokens"][rows] = batch.tokens
        x["past_len"][...] = past
        np.add(past[:, None], offsets, out=x["position_ids"])

    @staticmethod
    def _fill_sampling(x: dict[str, np.ndarray], sampling: SamplingBatch, rows: np.ndarray) -> None:
        if "temperature" not in x:
            return
        x["temperature"][:] = 0.0
        x["top_p"][:] = 1.0
        x["uniforms"][:] = 0.0
        w = min(x["uniforms"].shape[1], sampling.uniforms.shape[1])
        b = len(rows)
        x["temperature"][rows] = sampling.temperature[:b]
        x["top_p"][rows] = sampling.top_p[:b]
        x["uniforms"][rows, :w] = sampling.uniforms[:b, :w]

    def _commit(self, y: dict[str, np.ndarray], rows: np.ndarray, batch: DraftBatch, whole: bool) -> StepResult:
        acc, best = (y["accepted_len"], y["best_path"]) if whole else (y["accepted_len"][rows], y["best_path"][rows])
        moved = checked_verdicts(batch, acc, best)  # rows whose chain is not in place; raises before KV moves
        out = self._result(batch, "medusa_topk" in y)
        out.fill(y, rows, batch, best, acc, whole)
        if isinstance(moved, bool):  # one row (the scalar path), or root-only drafts (False: nothing moves)
            if moved:
                self.kv.compact(int(rows[0]), int(self.committed[rows[0]]), out.chain[0, : int(acc[0])])
        elif moved.any():
            self._compact(rows[moved], self.committed[rows[moved]], out.chain[moved], out.accepted_len[moved])
        if whole:
            self.committed[: len(rows)] += out.accepted_len
        else:
            self.committed[rows] += out.accepted_len
        return out

    def _compact(self, rows: np.ndarray, starts: np.ndarray, chains: np.ndarray, lengths: np.ndarray) -> None:
        """Move each chain's KV into place (chains[i, k] -> slot starts[i] + k, k < lengths[i])."""
        compact_rows = getattr(self.kv, "compact_rows", None)
        if compact_rows is not None:
            compact_rows(rows, starts, chains, lengths)
            return
        for i in range(len(rows)):  # a backend without the batched move: one call per moved row
            self.kv.compact(int(rows[i]), int(starts[i]), chains[i, : lengths[i]])

    def _result(self, batch: DraftBatch, medusa: bool) -> ReusedResult:
        """The result arrays for this shape, kept for the next step of the same shape (module docstring)."""
        key = (batch.size, batch.w, batch.t, medusa)
        out = self._results.get(key)
        if out is None:
            if len(self._results) >= 64:
                self._results.clear()
            out = self._results[key] = ReusedResult(
                batch.size, batch.w, batch.t, self.hidden_size, self.medusa if medusa else None
            )
        return out

    # -- bindings --------------------------------------------------------------------------------

    def _binding(
        self, sampling: SamplingBatch, r0: int, r1: int, t: int, tv: int, p: int, w: int, *, prefill: bool = False
    ) -> Binding:
        """A prefill's binding is keyed by its rows and length, a step's (rows 0..r1) by its shape class."""
        return self._mode_binding("greedy" if sampling.greedy else "rejection", r0, r1, t, tv, p, w, prefill)

    def _mode_binding(
        self, mode: str, r0: int, r1: int, t: int, tv: int, p: int, w: int, prefill: bool = False
    ) -> Binding:
        key = ("prefill", mode, r0, r1, t) if prefill else ("step", mode, r1, t, tv, p, w)
        last_key, last = self._last
        if key == last_key and last is not None:  # steady state: the same shape as the previous call
            return last
        bound = self._bound.get(key, lambda: self._build(mode, r0, r1, t, tv, p, w))
        self._last = (key, bound)
        return bound

    def _build(self, mode: str, r0: int, r1: int, t: int, tv: int, p: int, w: int) -> Binding:
        inputs, outputs = target_io(mode, r1 - r0, t, tv, p, w, self.hidden_size, self.medusa)
        bound = self._make_binding(mode, r0, r1, inputs, outputs)
        if tv == t:
            bound.x["verify_index"][:] = np.arange(t)  # a step verifies every node; set once
        return bound

    def _make_binding(self, mode: str, r0: int, r1: int, inputs: Spec, outputs: Spec) -> Binding:
        raise NotImplementedError
