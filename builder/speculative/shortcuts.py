"""The decoding loop's per-sequence state and bookkeeping (`_Seq`; `ShortcutSteps`, a base of
`builder.speculative.decoding.Decoder`): a step's emitted tokens accounted per sequence (`_account`, stop rules in
`_emit`), finished sequences retired, and the loop's shortcut steps — the engine's greedy shortcuts
(`builder.engines.shortcuts`) taken where a step is a common simple case:

* `_plain_step`: a batch in which no sequence drafts and all are greedy, through `step_plain` (roots in, next tokens
  out; the last plain step's ids and emitted tokens are the roots while the batch is unchanged);
* `_chain_step` / `_chain_done`: a lone greedy sequence whose draft is a chain (a plain step included), through
  `step_chain`; `_drafted_chain_step`: the same without a `Draft`, where the drafter gives its chains as token lists;
* `_burst`: a lone greedy plain sequence's steps back to back through `decode_greedy`.

Each returns None, with nothing done, where it does not apply; `Decoder._step` then runs the general step.
tests/unit/test_batch1_paths.py holds them to it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from builder.speculative.engine import Draft, Drafter, Engine
from builder.speculative.requests import Generation, Request, Timing, Totals

OnTokens = Callable[[int, list[int]], None]  # (request index, newly emitted tokens)


class EngineBroken(RuntimeError):
    """Releasing a sequence failed: the engine's rows or KV can no longer be trusted (the decoder is dead)."""


@dataclass(slots=True)
class _Seq:
    index: int  # the request's index in the caller's list
    req: Request
    gen: Generation
    rng: np.random.Generator
    drafting: bool
    id: int = -1  # the engine's sequence id
    committed: int = 0  # tokens whose KV the engine holds (its committed_len: the prompt, then + accepted per step)
    stops: frozenset[int] = frozenset()  # req.stop_ids
    plain_until: int = 0  # no stop ids, no stop sequences: req.max_new_tokens (tokens emitted while the output stays
    # shorter need no scan), else 0
    tokens: list[int] = field(init=False)  # gen.token_ids (the same list: read per step without going through gen)

    def __post_init__(self) -> None:
        self.tokens = self.gen.token_ids


class ShortcutSteps:
    """Per-sequence bookkeeping and the shortcut steps (module docstring), over the state `Decoder` keeps."""

    engine: Engine
    drafter: Drafter | None
    active: list[_Seq]
    timing: Timing
    totals: Totals
    _step_chain: Callable[..., Any] | None  # the engine's shortcuts, where its class has them
    _decode_greedy: Callable[..., Any] | None
    _step_plain: Callable[..., Any] | None
    _plain_last: tuple[list[_Seq], int, list[int], list[int]] | None  # `_plain_step`'s batch
    _update_emitted: bool  # the drafter learns from emitted tokens alone
    _chains: bool  # the drafter's drafts are chains it gives as token lists (`propose_chain`)

    def _max_nodes(self) -> int:
        raise NotImplementedError

    def _apply_budget(self) -> None:
        raise NotImplementedError

    def _plain_step(self, t0: float, on_tokens: OnTokens | None) -> list[_Seq] | None:
        """`_step` for a batch of greedy sequences none of which drafts, through the engine's `step_plain`: roots in,
        each sequence's next token out, no `Draft` per row. None, with nothing done, where it does not apply."""
        active, last = self.active, self._plain_last
        if last is not None and last[0] is active and last[1] == len(active):  # the same batch as the last plain
            ids, roots = last[2], last[3]  # step: its sequences, and the tokens it emitted are the roots now
        else:
            for s in active:
                if s.drafting or not s.req.sampling.greedy:
                    return None
            ids, roots = [s.id for s in active], [s.gen.token_ids[-1] for s in active]
        assert self._step_plain is not None
        toks = self._step_plain(ids, roots)
        self._plain_last = None
        if toks is None:
            return None
        self.timing.target += time.perf_counter() - t0
        self.timing.steps += 1
        emitted = 0
        for s, tok in zip(active, toks):  # `_account` of one emitted token, inline for the common case
            out = s.tokens
            if len(out) + 1 < s.plain_until:
                g = s.gen
                g.steps += 1
                g.accepted_per_step.append(0)
                s.committed += 1
                out.append(tok)
                emitted += 1
                if on_tokens is not None:
                    on_tokens(s.index, [tok])
            else:  # a stop rule, or its last token
                self._account(s, 1, 0, [tok], on_tokens)
        self.totals.emitted += emitted
        self.totals.sequence_steps += len(active)
        self._plain_last = (active, len(active), ids, toks)  # (a row that finished changes `active`: `_retire`)
        return [] if emitted == len(active) else self._retire()  # (only `_account` finishes a row)

    def _chain_step(
        self, s: _Seq, d: Draft, drafting: bool, t0: float, t1: float, on_tokens: OnTokens | None
    ) -> list[_Seq] | None:
        """`_step` for one greedy sequence whose draft is a chain (root-only included) through the engine's
        `step_chain`; a drafting sequence only with a drafter that learns from the emitted tokens alone
        (`update_emitted`). None, with nothing done, where the shortcut does not apply."""
        t = d.tokens.shape[0]
        if not s.req.sampling.greedy or d.paths.shape != (1, t) or (drafting and not self._update_emitted):
            return None
        assert self._step_chain is not None
        toks = self._step_chain(s.id, d.tokens.tolist())
        return None if toks is None else self._chain_done(s, toks, t - 1, drafting, t0, t1, on_tokens)

    def _drafted_chain_step(self, s: _Seq, t0: float, on_tokens: OnTokens | None) -> list[_Seq] | None:
        """`_step` for the only active sequence, greedy and drafting, where the drafter's drafts are chains it gives as
        token lists (`propose_chain`) and it learns from the emitted tokens (`update_emitted`): no `Draft`, the step
        through the engine's `step_chain`. None where it does not apply — with the draft proposed, which the general
        step then proposes again (`propose_chain` allows that) — and nothing else done."""
        if not s.req.sampling.greedy or s.committed > self.engine.max_seq_len - self._max_nodes():
            return None  # (a tree that no longer fits: the general step stops the drafting)
        self._apply_budget()
        assert self.drafter is not None and self._step_chain is not None
        chain: list[int] = self.drafter.propose_chain(s.id, s.tokens[-1])  # type: ignore[attr-defined]
        t1 = time.perf_counter()
        toks = self._step_chain(s.id, chain)
        return None if toks is None else self._chain_done(s, toks, len(chain) - 1, True, t0, t1, on_tokens)

    def _chain_done(
        self, s: _Seq, toks: list[int], drafted: int, drafting: bool, t0: float, t1: float, on_tokens: OnTokens | None
    ) -> list[_Seq]:
        """The rest of a `step_chain` step of `drafted` draft tokens that emitted `toks` (drafting: the drafter
        learns them)."""
        t2 = time.perf_counter()
        if drafting:
            self.drafter.update_emitted(s.id, toks, drafted)  # type: ignore[union-attr]
        t3 = time.perf_counter()
        self.timing.draft += (t1 - t0) + (t3 - t2)
        self.timing.target += t2 - t1
        self.timing.steps += 1
        n = len(toks)
        self._account(s, n, drafted, toks, on_tokens)
        totals = self.totals
        totals.drafted += drafted
        totals.accepted += n - 1
        totals.sequence_steps += 1
        return self._retire() if s.gen.finish_reason else []  # (the only active sequence: nothing else can finish)

    def _burst(self, s: _Seq, burst: int, t0: float, on_tokens: OnTokens | None) -> list[_Seq] | None:
        """Up to `burst` plain greedy steps of the only active sequence through the engine's `decode_greedy` (none
        with stop sequences: those are matched per step); None, with nothing done, where it does not apply."""
        if self._decode_greedy is None or s.req.stop_sequences:
            return None
        g = s.gen
        toks = self._decode_greedy(s.id, g.token_ids[-1], min(burst, s.req.max_new_tokens - len(g.token_ids)), s.stops)
        if toks is None:
            return None
        k = len(toks)
        self.timing.target += time.perf_counter() - t0
        self.timing.steps += k
        g.steps += k
        g.accepted_per_step += [0] * k
        s.committed += k
        self.totals.sequence_steps += k
        self._emit(s, toks, on_tokens)  # (the engine stopped right after a stop id: nothing past it is committed)
        return self._retire()

    def _account(self, s: _Seq, n: int, drafted: int, toks: list[int], on_tokens: OnTokens | None) -> None:
        """A sequence's step: `drafted` draft tokens, `n` emitted (toks[:n]: the accepted drafts, then the bonus)."""
        g = s.gen
        g.steps += 1
        g.drafted += drafted
        g.accepted_per_step.append(n - 1)
        s.committed += n
        if len(g.token_ids) + n < s.plain_until:  # no stop rule, not the last tokens
            g.token_ids += toks[:n]
            self.totals.emitted += n
            if on_tokens is not None:
                on_tokens(s.index, toks[:n])
        else:
            self._emit(s, toks[:n], on_tokens)

    def _emit(self, s: _Seq, tokens: list[int], on_tokens: OnTokens | None) -> None:
        g, req = s.gen, s.req
        room = req.max_new_tokens - len(g.token_ids)
        if len(tokens) > room:
            tokens = tokens[: max(room, 0)]
        if s.stops or req.stop_sequences:
            for i, tok in enumerate(tokens):
                if tok in s.stops or (
                    req.stop_sequences and _ends_with_any(g.token_ids, tokens[: i + 1], req.stop_sequences)
                ):
                    tokens = tokens[: i + 1]
                    g.finish_reason = "stop"
                    break
        g.token_ids.extend(tokens)
        self.totals.emitted += len(tokens)
        if not g.finish_reason and len(g.token_ids) >= req.max_new_tokens:
            g.finish_reason = "length"
        if on_tokens is not None and tokens:
            on_tokens(s.index, tokens)

    def _stop_drafting(self, s: _Seq) -> None:
        s.drafting = False
        if self.drafter is not None:
            self.drafter.release(s.id)

    def _retire(self) -> list[_Seq]:
        finished = [s for s in self.active if s.gen.finish_reason]
        if not finished:
            return finished
        self.active = [s for s in self.active if not s.gen.finish_reason]
        for s in finished:
            try:
                if s.drafting:
                    self._stop_drafting(s)
                self.engine.release(s.id)
            except Exception as exc:
                raise EngineBroken(f"releasing sequence {s.id} failed: {exc!r}") from exc
        return finished


def _ends_with_any(done: list[int], new: list[int], sequences: Sequence[tuple[int, ...]]) -> bool:
    """Whether done + new ends with one of the sequences (only the tail is looked at)."""
    for seq in sequences:
        n = len(seq)
        if n == 0 or n > len(done) + len(new):
            continue
        tail = new[-n:] if n <= len(new) else done[len(done) - (n - len(new)) :] + new
        if tuple(tail) == seq:
            return True
    return False
