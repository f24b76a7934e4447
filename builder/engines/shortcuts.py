"""The target engines' greedy shortcuts (`ShortcutSteps`, a base of `builder.engines.batched.BatchedTarget`): steps
the decoding loop takes instead of `step` where a step is a common simple case, doing what `step` would do with it —
the same binding and inputs, the verdict checked, the KV committed — with less host work per step:

* `step_chain`: one greedy step of the engine's only sequence with a chain draft (a plain step included), in scalars;
* `decode_greedy`: that sequence's plain greedy steps back to back, nothing but the token fed back between two calls;
* `step_plain`: one greedy plain step of every running sequence, roots in and next tokens out, no `Draft` per row.

Each returns None, with nothing done, where it does not apply; the caller then calls `step`, which says what is
wrong. tests/unit/test_batch1_paths.py holds each to `step`.
"""

from __future__ import annotations

from typing import Any, Callable, Container, Sequence

import numpy as np

from builder.engines.bindings import Binding, KVRows
from builder.engines.rows import RowTable


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
    """How a shortcut calls a binding for plain (and chain) steps: (run, tokens, positions_apart, check).
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


class ShortcutSteps:
    """The shortcuts (module docstring), over the state `BatchedTarget` keeps."""

    rows: RowTable
    committed: np.ndarray  # [max batch] committed tokens per row
    kv: KVRows
    vocab_size: int
    _chains: dict[int, _ChainIO]  # T -> the greedy one-row binding of T-node chains, once `step` filled it
    _plain: Binding | None  # the binding whose structure inputs `step_plain` set (every row root-only)
    _filled: dict[int, Any]  # id(binding) -> what its structure inputs hold (`BatchedTarget._fill_step`)
    _in_order: bool  # the latest `_rows_of` sequences are rows 0..n-1 in order
    _plain_io: _PlainIO | None  # `step_plain`'s running batch

    def _rows_of(self, seqs: Sequence[int]) -> np.ndarray:
        raise NotImplementedError

    def _mode_binding(
        self, mode: str, r0: int, r1: int, t: int, tv: int, p: int, w: int, prefill: bool = False
    ) -> Binding:
        raise NotImplementedError

    def step_chain(self, seq: int, tokens: list[int]) -> list[int] | None:
        """One greedy step of `seq`, while it is the engine's only sequence, with a chain draft (node i at depth i;
        `tokens` = root first; one token: a plain step): the tokens it emits (the accepted drafts, then the target's
        next). What `step` does with that call — the same binding and inputs, the verdict checked, the KV committed
        (a chain's accepted nodes are already in place) — in scalars: the commonest call of a batch-1 decode, whose
        host work per step this cuts (`Decoder._step` takes it). None, with nothing done, where it does not apply
        (another sequence held, no step of a T-node chain run by `step` yet, a token out of range, no room): the
        caller then calls `step`, which says what is wrong."""
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
        cuts (`Decoder._step` takes it; the batch's binding and views are kept while its sequences stay the same:
        `_PlainIO`). None, with nothing done, where it does not apply (not every running sequence in row order, a
        token out of range, no room): the caller then calls `step`, which says what is wrong."""
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
