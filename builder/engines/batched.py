"""The host side of an engine over the exported target step graph, shared by the ONNX Runtime and the
TensorRT engines: the `Engine` protocol (builder.speculative.protocols) minus the runtime.

`BatchedTarget` keeps the running batch in dense rows (`builder.engines.rows`), fills the graph's inputs
for a prefill or a step (I/O contract: `builder.export`), reads the verdict, commits the accepted chain
(KV compaction in the backend's buffer) and hands back NumPy results. Its greedy fast steps — the capabilities
`ChainStepping`, `GreedyBursting` and `PlainStepping` of `builder.speculative.protocols`, which the decoding loop's
fast paths take (`builder.speculative.fast_paths`) — do what `step` would do with the same call, with less host
work (section "fast steps" below). A backend supplies (protocols: `builder.engines.bindings`)

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

Fast steps, each of which returns None, with nothing done, where it does not apply (the caller then calls `step`,
which says what is wrong; tests/unit/test_batch1_paths.py holds each to `step`):

* `step_chain`: one greedy step of the engine's only sequence with a chain draft (a plain step included), in scalars
  — the same binding and inputs as `step`'s (`_ChainIO`: a view of the one-row chain binding `step` filled), the
  verdict checked, the KV committed (a chain's accepted nodes are already in place);
* `decode_greedy`: that sequence's plain greedy steps back to back, nothing but the token fed back between two calls;
* `step_plain`: one greedy plain step of every running sequence, roots in and next tokens out, no `Draft` per row
  (`_PlainIO`: the batch's binding and views, kept while its sequences stay the same).

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
from typing import Callable, Container, Hashable, Sequence

import numpy as np

from builder.engines.bindings import Binding, BindingCache, KVRows, Spec, target_io
from builder.engines.results import ReusedResult, checked_verdicts
from builder.engines.rows import RowTable
from builder.speculative.batch import DraftBatch, StructureCache
from builder.speculative.protocols import Draft, PrefillResult, SamplingBatch, StepResult


class _ChainIO:
    """`step_chain`'s view of a one-row T-node chain binding: the inputs it writes per step, row 0's, and its run
    (`run_plain` where the binding has one: the engine's `_chain_verdict` then reads `node_argmax`)."""

    def __init__(self, bound: Binding) -> None:
        x = bound.x
        self.bound = bound
        self.tokens, self.past, self.positions = x["tokens"][0], x["past_len"], x["position_ids"][0]  # [T], [1], [T]
        self.depth = np.arange(self.tokens.shape[0])  # node i at depth i
        # (this engine's `_chain_verdict` reads what `run` writes; `out`: row 0's greedy tokens, for `decode_greedy`)
        self.run, self.out, self.positions_apart, self.check = _plain_call(bound, self.positions, self.past)


class _PlainIO:
    """`step_plain`'s view of the T = 1 binding of every running row, kept while the batch is the same (its
    sequences, in row order, and the row table's version) and only `step_plain` steps it (`step`, `step_chain` and
    `decode_greedy` drop it): the inputs it writes and the outputs it reads per step, the longest row, and the list
    of tokens it handed out last (fed back as the roots: copied from the array they came from, unchecked)."""

    def __init__(self, bound: Binding, ids: list[int], version: int, past: np.ndarray) -> None:
        x, y = bound.x, bound.y
        self.bound, self.ids, self.version = bound, ids, version
        self.past = past  # [n] the engine's committed lengths of rows 0..n-1 (a view)
        self.top = int(past.max())  # the longest row's
        self.tokens, self.past_len, self.positions = x["tokens"][:, 0], x["past_len"], x["position_ids"][:, 0]  # [n]
        self.run, out, self.positions_apart, self.check = _plain_call(bound, self.positions, self.past_len)
        self.out, self.accepted, self.best = out[:, 0], y["accepted_len"], y["best_path"]  # [n]
        self.last: list[int] | None = None


def _plain_call(
    bound: Binding, positions: np.ndarray, past_len: np.ndarray
) -> tuple[Callable[[], None], np.ndarray, bool, bool]:
    """How a fast step calls a binding for plain (and chain) steps: (run, tokens, positions_apart, check).
    run / tokens: its `run_plain` and `node_argmax` where it has one (a binding that takes the greedy tokens on the
    host: `output_tokens` is then a copy that plain steps need not make), else its `run` and `output_tokens`.
    positions_apart: its `position_ids` are not `past_len`'s memory (one array where T = 1 lets it), so a T = 1 step
    writes both. check: its T = 1 verdict is not constant (`fixed_plain_verdict`), so a plain step reads it."""
    run_plain = getattr(bound, "run_plain", None)
    run, tokens = (
        (run_plain, bound.y["node_argmax"]) if run_plain is not None else (bound.run, bound.y["output_tokens"])
    )
    apart = not np.shares_memory(positions, past_len)
    return run, tokens, apart, not getattr(bound, "fixed_plain_verdict", False)


@dataclass(frozen=True)
class _Filled:
    """What a binding's structure inputs hold: `batch`'s structure for `rows`, and its nodes' depths."""

    bound: Binding
    batch: DraftBatch
    rows: np.ndarray  # [b] the rows the structure was written for
    offsets: np.ndarray  # [rows in use, T] node depth per row (0: padding, idle rows)


class BatchedTarget:
    """The `Engine` protocol over a target step graph, with the fast steps `ChainStepping`, `GreedyBursting` and
    `PlainStepping`; subclasses supply the runtime (module docstring)."""

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
        self._chains: dict[int, _ChainIO] = {}  # T -> the one-row binding of T-node chains, once `step` filled it
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

    # -- fast steps -----------------------------------------------------------------------------------

    def step_chain(self, seq: int, tokens: list[int]) -> list[int] | None:
        """One greedy step of `seq`, while it is the engine's only sequence, with a chain draft (node i at depth i;
        `tokens` = root first; one token: a plain step): the tokens it emits (the accepted drafts, then the target's
        next). What `step` does with that call — the same binding and inputs, the verdict checked, the KV committed
        (a chain's accepted nodes are already in place) — in scalars: the commonest call of a batch-1 decode, whose
        host work per step this cuts (`ChainStepping`). None, with nothing done, where it does not apply (another
        sequence held, no step of a T-node chain run by `step` yet, a token out of range, no room): the caller then
        calls `step`, which says what is wrong."""
        t = len(tokens)
        io = self._lone_chain(seq, t, min(tokens), max(tokens))
        if io is None:
            return None
        self._plain_io = None  # (its longest row moves)
        past = int(self.committed[0])
        io.past[0] = past
        if t == 1:  # a plain step: scalars (the commonest call)
            io.tokens[0] = tokens[0]
            if io.positions_apart:
                io.positions[0] = past
        else:
            io.tokens[:] = tokens
            np.add(io.depth, past, out=io.positions)
        io.run()
        emitted = self._chain_verdict(io.bound.y, tokens)
        self.committed[0] = past + len(emitted)
        return emitted

    def step_plain(self, seqs: Sequence[int], roots: list[int]) -> list[int] | None:
        """One greedy plain step of every running sequence — `seqs` all of them, in row order, `roots` each one's
        newest token —: each one's next token. What `step` does with a root-only draft per row — the same binding
        (T = 1, every row), the verdict checked, the KV committed — without a `Draft` per row, a `DraftBatch` or a
        `StepResult`: the decoding loop's call for a batch in which nothing drafts, whose host work per step this
        cuts (`PlainStepping`; the batch's binding and views are kept while its sequences stay the same: `_PlainIO`).
        None, with nothing done, where it does not apply (not every running sequence in row order, a token out of
        range, no room): the caller then calls `step`, which says what is wrong."""
        io = self._plain_io
        if io is None or io.version != self.rows.version or seqs != io.ids:
            io = self._plain_batch(seqs)
            if io is None:
                return None
        past, bound = io.past, io.bound
        if io.top >= self.kv.capacity:
            return None
        if roots is io.last:  # the tokens of the last step: still in `out`, the graph's own (in range)
            io.tokens[:] = io.out
        elif len(roots) != len(io.ids) or min(roots) < 0 or max(roots) >= self.vocab_size:
            return None
        else:
            io.tokens[:] = roots
        if self._plain is not bound:  # every row root-only (a `step` of this shape may have left idle rows)
            x = bound.x
            self._filled.pop(id(bound), None)
            x["tree_mask"][:] = True
            x["num_nodes"][:] = 1
            x["paths"][:] = 0
            self._plain = bound
        io.past_len[:] = past
        if io.positions_apart:
            io.positions[:] = past
        io.run()
        if io.check:  # (not for a binding whose verdict of T = 1 is constant)
            acc, best = io.accepted, io.best
            bad = (acc ^ 1) | best  # nonzero where a row's verdict is not (1 node, path 0)
            if bad.any():
                i = int(np.argmax(bad != 0))
                raise RuntimeError(
                    f"the engine accepted {int(acc[i])} nodes of path {int(best[i])} of a plain step (row {i})"
                )
        past += 1
        io.top += 1
        io.last = io.out.tolist()
        return io.last

    def _plain_batch(self, seqs: Sequence[int]) -> _PlainIO | None:
        """`step_plain`'s view of the running batch (kept in `_plain_io`), or None where `seqs` are not every running
        sequence in row order."""
        n = len(self.rows)
        if len(seqs) != n or not n:
            return None
        self._rows_of(seqs)
        if not self._in_order:
            return None
        bound = self._mode_binding("greedy", 0, n, 1, 1, 1, 1)
        self._plain_io = _PlainIO(bound, list(seqs), self.rows.version, self.committed[:n])
        return self._plain_io

    def decode_greedy(self, seq: int, token: int, max_tokens: int, stop_ids: Container[int] = ()) -> list[int] | None:
        """Up to `max_tokens` plain greedy steps of `seq`, while it is the engine's only sequence, back to back:
        each fed the token the one before emitted (the first: `token`), nothing but the feed between the session
        calls; it ends after a token in `stop_ids` or when the KV cache is full. The tokens emitted (their KV
        committed), what as many `step_chain(seq, [token])` calls would emit. None, with nothing done, where
        `step_chain` would refuse (the caller then steps)."""
        io = self._lone_chain(seq, 1, token, token)
        if io is None or max_tokens < 1:
            return None
        self._plain_io = None  # (its longest row moves)
        past = int(self.committed[0])
        n = min(max_tokens, self.kv.capacity - past)
        tokens, pasts, positions, y = io.tokens, io.past, io.positions, io.bound.y
        run, out, apart, check = io.run, io.out, io.positions_apart, io.check
        accepted, best, committed = y["accepted_len"], y["best_path"], self.committed
        emitted: list[int] = []
        for _ in range(n):  # (per token: the feed, the call, the token read; each NumPy touch runs cold after a call)
            tokens[0] = token
            pasts[0] = past
            if apart:
                positions[0] = past
            run()
            if check and (accepted[0] != 1 or best[0] != 0):
                raise RuntimeError(
                    f"the engine accepted {int(accepted[0])} nodes of path {int(best[0])} of a plain step"
                )
            token = int(out[0, 0])
            past += 1
            committed[0] = past
            emitted.append(token)
            if token in stop_ids:
                break
        return emitted

    def _lone_chain(self, seq: int, t: int, lo: int, hi: int) -> _ChainIO | None:
        """The T-node chain binding `step_chain` and `decode_greedy` use, or None where they do not apply: `seq` not
        the engine's only sequence, no such step run by `step` yet, tokens (lowest lo, highest hi) outside the vocabulary, no
        room in the KV cache for T more nodes."""
        io = self._chains.get(t)
        if (
            io is None
            or len(self.rows) != 1
            or self.rows.row(seq) != 0
            or lo < 0
            or hi >= self.vocab_size
            or int(self.committed[0]) + t > self.kv.capacity
        ):
            return None
        return io

    def _chain_verdict(self, y: dict[str, np.ndarray], tokens: list[int]) -> list[int]:
        """`step_chain`'s emitted tokens from the graph's verdict (checked: path 0, 1..T nodes)."""
        n, best = int(y["accepted_len"][0]), int(y["best_path"][0])
        if best != 0 or not 1 <= n <= len(tokens):
            raise RuntimeError(f"the engine accepted {n} nodes of path {best} of a {len(tokens)}-node chain")
        emitted: list[int] = y["output_tokens"][0, :n].tolist()
        return emitted

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
