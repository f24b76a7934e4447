"""The decoding loop's fast paths: a step that is a common simple case taken through the engine's greedy fast steps
(`ChainStepping`, `GreedyBursting`, `PlainStepping` in `builder.speculative.protocols`; `builder.engines.batched`
has them), with less host work than the reference step (`builder.speculative.decoding.Decoder.step`) and the same
outcome — the tokens emitted, the counts, the KV committed, the drafter's state. Which one applies is picked per step
(the batch and the drafting change between steps):

* lone plain — the only active sequence, greedy, not drafting: its plain steps back to back through `decode_greedy`
  where the loop allows a burst (no stop sequences: those are matched per step), else one through `step_chain`;
* lone drafted chain — the only active sequence, greedy, drafting with a drafter whose drafts are all chains it
  gives as token lists (`ChainProposing`) and which learns from emitted tokens (`EmittedUpdates`): no `Draft` is
  made, the chain goes through `step_chain`;
* plain batch — several sequences, all greedy, none drafting — or, at a budget of 1 (the draft budget rule turned
  speculation off for this batch size), drafting ones whose drafter learns a plain step (`PlainUpdates`: n-gram,
  Lookahead): one `step_plain` (roots in, next tokens out; the last plain step's ids and emitted tokens are the roots
  while the batch is unchanged), the very loop of requests that do not speculate; at batch 1 such a sequence's plain
  step goes through `step_chain` alike;
* chain draft — after the reference step proposed: the only sequence's greedy draft is a chain (or root-only) and
  its drafter, if it drafts, learns from emitted tokens: `step_chain` instead of `step` (`Decoder.step` asks).

Each returns None, with nothing done, where it does not apply (the engine's fast step refusing included); the
reference step then runs. `Decoder(..., fast_paths=False)` never takes them: tests/unit/test_batch1_paths.py and
test_fast_paths.py hold each to the reference.
"""

from __future__ import annotations

import time
from typing import cast

from builder.speculative.protocols import (
    ChainProposing,
    ChainStepping,
    Draft,
    Drafter,
    EmittedUpdates,
    Engine,
    GreedyBursting,
    PlainStepping,
    PlainUpdates,
    implements,
)
from builder.speculative.requests import Timing, Totals
from builder.speculative.sequence import OnTokens, SequenceState


class FastPaths:
    """The fast paths an engine (and drafter) allow, over the loop's `timing` and `totals` (module docstring).

    `step` and `chain_draft` return None where they do not apply, else whether a sequence may have finished (the
    loop then retires finished sequences)."""

    def __init__(
        self,
        engine: Engine,
        drafter: Drafter | None,
        timing: Timing,
        totals: Totals,
    ) -> None:
        # the engine's fast steps, bound once (capabilities of its class: `implements`)
        chain, burst, plain = (implements(engine, c) for c in (ChainStepping, GreedyBursting, PlainStepping))
        self.step_chain = cast(ChainStepping, engine).step_chain if chain else None
        self.decode_greedy = cast(GreedyBursting, engine).decode_greedy if burst else None
        self.step_plain = cast(PlainStepping, engine).step_plain if plain else None
        # the drafter as its capabilities (its methods are looked up per call: a benchmark may wrap them later)
        self.drafter = drafter
        learns = implements(drafter, EmittedUpdates)
        self.learner = cast(EmittedUpdates, drafter) if learns else None  # it learns from the emitted tokens alone
        plain = implements(drafter, PlainUpdates)
        self.plain_learner = cast(PlainUpdates, drafter) if plain else None  # it learns a plain step (budget 1)
        self.chains = (  # its drafts are chains it gives as token lists
            chain and learns and implements(drafter, ChainProposing) and cast(ChainProposing, drafter).chains_only()
        )
        self.chain_drafter = cast(ChainProposing, drafter) if self.chains else None
        self.max_seq_len = engine.max_seq_len
        self.timing, self.totals = timing, totals
        # the last plain batch: its sequences, their count, ids, emitted tokens, and whether any of them drafts
        self._plain_last: tuple[list[SequenceState], int, list[int], list[int], bool] | None = None

    @classmethod
    def of(
        cls,
        engine: Engine,
        drafter: Drafter | None,
        timing: Timing,
        totals: Totals,
    ) -> FastPaths | None:
        """The fast paths of this engine and drafter, or None where the engine has no fast steps."""
        if not (implements(engine, ChainStepping) or implements(engine, PlainStepping)):
            return None
        return cls(engine, drafter, timing, totals)

    def step(
        self, active: list[SequenceState], t0: float, on_tokens: OnTokens | None, burst: int, off: bool = False
    ) -> bool | None:
        """This step through the fast path that applies to it (picked here, per step), or None: none does. `off`: the
        step's node budget is 1 (no draft)."""
        if len(active) > 1:
            return self._plain_batch(active, t0, on_tokens, off) if self.step_plain is not None else None
        s = active[0]
        if s.drafting:
            if off and self.plain_learner is not None and self.step_chain is not None and s.req.sampling.greedy:
                root = s.tokens[-1]
                toks = self.step_chain(s.id, [root])
                if toks is None:
                    return None
                t1 = time.perf_counter()
                self.plain_learner.update_plain(s.id, root, toks[0])
                self.timing.draft += time.perf_counter() - t1
                return self._chain_done(s, toks, 0, False, t0, t0, on_tokens, drafting_step=True)
            return self._drafted_chain(s, t0, on_tokens) if self.chains else None
        step_chain = self.step_chain  # lone plain (inline: the commonest step of all)
        if step_chain is None or not s.req.sampling.greedy:
            return None
        if burst > 1:
            done = self._burst(s, burst, t0, on_tokens)
            if done is not None:
                return done
        toks = step_chain(s.id, [s.tokens[-1]])
        return None if toks is None else self._chain_done(s, toks, 0, False, t0, t0, on_tokens)

    def chain_draft(
        self, s: SequenceState, d: Draft, drafting: bool, t0: float, t1: float, on_tokens: OnTokens | None
    ) -> bool | None:
        """The rest of the reference step for the only active sequence and its proposed draft `d` (proposed between
        t0 and t1), through `step_chain`: where the sequence is greedy, `d` a chain (root-only included) and, if it
        drafts, its drafter learns from emitted tokens; else None, with nothing done."""
        t = d.tokens.shape[0]
        if (
            self.step_chain is None
            or not s.req.sampling.greedy
            or d.paths.shape != (1, t)
            or (drafting and self.learner is None)
        ):
            return None
        toks = self.step_chain(s.id, d.tokens.tolist())
        return None if toks is None else self._chain_done(s, toks, t - 1, drafting, t0, t1, on_tokens)

    # -- the paths -------------------------------------------------------------------------------------------------

    def _burst(self, s: SequenceState, burst: int, t0: float, on_tokens: OnTokens | None) -> bool | None:
        """Up to `burst` plain greedy steps of the only active sequence through `decode_greedy` (none with stop
        sequences: those are matched per step)."""
        if self.decode_greedy is None or s.req.stop_sequences:
            return None
        g = s.gen
        toks = self.decode_greedy(s.id, g.token_ids[-1], min(burst, s.req.max_new_tokens - len(g.token_ids)), s.stops)
        if toks is None:
            return None
        k = len(toks)
        self.timing.target += time.perf_counter() - t0
        self.timing.steps += k
        g.steps += k
        g.accepted_per_step += [0] * k
        s.committed += k
        self.totals.sequence_steps += k
        s.emit(toks, self.totals, on_tokens)  # (the engine stopped right after a stop id: nothing past it is committed)
        return True

    def _drafted_chain(self, s: SequenceState, t0: float, on_tokens: OnTokens | None) -> bool | None:
        """The only active sequence, greedy, drafting chains as token lists. None where it does not apply — with the
        draft proposed, which the reference step then proposes again (`propose_chain` allows that) — and nothing
        else done."""
        assert self.drafter is not None and self.chain_drafter is not None and self.step_chain is not None
        if not s.req.sampling.greedy or s.committed > self.max_seq_len - self.drafter.max_nodes:
            return None  # (a tree that no longer fits: the reference step stops the drafting)
        chain = self.chain_drafter.propose_chain(s.id, s.tokens[-1])
        t1 = time.perf_counter()
        toks = self.step_chain(s.id, chain)
        return None if toks is None else self._chain_done(s, toks, len(chain) - 1, True, t0, t1, on_tokens)

    def _chain_done(
        self,
        s: SequenceState,
        toks: list[int],
        drafted: int,
        drafting: bool,
        t0: float,
        t1: float,
        on_tokens: OnTokens | None,
        drafting_step: bool = False,
    ) -> bool:
        """The rest of a `step_chain` step of `drafted` draft tokens that emitted `toks` (drafting: the drafter learns
        them; drafting_step: a drafting sequence's step the drafter has learnt already, a budget-1 plain step)."""
        t2 = time.perf_counter()
        if drafting:
            self.learner.update_emitted(s.id, toks, drafted)  # type: ignore[union-attr]  # (drafting: `chain_draft`)
        t3 = time.perf_counter()
        timing = self.timing
        timing.draft += (t1 - t0) + (t3 - t2)
        timing.target += t2 - t1
        timing.steps += 1
        n = len(toks)
        totals = self.totals
        s.account(n, drafted, toks, totals, on_tokens)
        totals.drafted += drafted
        totals.accepted += n - 1
        totals.sequence_steps += 1
        totals.drafting_steps += drafting or drafting_step
        return bool(s.gen.finish_reason)  # (the only active sequence: nothing else can finish)

    def _plain_batch(
        self, active: list[SequenceState], t0: float, on_tokens: OnTokens | None, off: bool
    ) -> bool | None:
        """A batch of greedy sequences none of which drafts (`off`: or whose drafter learns the step's tokens), through
        `step_plain`: roots in, each sequence's next token out, no `Draft` per row."""
        last, learner = self._plain_last, self.plain_learner if off else None
        if last is not None and last[0] is active and last[1] == len(active) and (learner is not None or not last[4]):
            ids, roots, drafts = last[2], last[3], last[4]  # the same batch as the last plain step: its sequences,
        else:  # and the tokens it emitted are the roots now
            drafts = False
            for s in active:
                if not s.req.sampling.greedy or (s.drafting and learner is None):
                    return None
                drafts = drafts or s.drafting
            ids, roots = [s.id for s in active], [s.tokens[-1] for s in active]
        assert self.step_plain is not None
        toks = self.step_plain(ids, roots)
        self._plain_last = None
        if toks is None:
            return None
        if drafts:  # (off) the drafting rows' drafter learns the plain step: no draft, one token
            t1 = time.perf_counter()
            for s, root, tok in zip(active, roots, toks):
                if s.drafting:
                    learner.update_plain(s.id, root, tok)  # type: ignore[union-attr]
                    self.totals.drafting_steps += 1
            self.timing.draft += time.perf_counter() - t1
        self.timing.target += time.perf_counter() - t0
        self.timing.steps += 1
        totals = self.totals
        emitted = 0
        for s, tok in zip(active, toks):  # `account` of one emitted token, inline for the common case
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
                s.account(1, 0, [tok], totals, on_tokens)
        totals.emitted += emitted
        totals.sequence_steps += len(active)
        self._plain_last = (active, len(active), ids, toks, drafts)  # (a finished row changes `active`: retired)
        return emitted != len(active)  # (only `account` finishes a row)
