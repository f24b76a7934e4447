"""The decoding loop: one algorithm over any engine (torch reference, ONNX Runtime, TensorRT) and drafter.

    ids, first = engine.start(prompts)            # prefill; the first token is verified at the root
    loop:  drafts = drafter.propose(seqs, roots)  # Medusa heads | EAGLE tree | Lookahead n-grams | n-grams
           out = engine.step(seqs, drafts)        # one target pass, tree_verify and commit inside
           drafter.update(seqs, drafts, out)

`Decoder.step` is that algorithm, top to bottom (gpt-fast's `speculative_decode`, pytorch-labs/gpt-fast
generate.py, is the model). `Decoder` runs many requests at once (in-flight batching): requests join between steps
(`add`) and leave when done or cancelled (`cancel`: slot and KV freed at once); `run` drives a list of requests
through it. Each step's tree is capped at a node budget for the live batch size — by the engine folder's measured
rule (`BudgetRule`, `builder.speculative.budget`: the budget with the most tokens per ms, refined online from the
steps' own acceptance) or by a pinned `DraftSchedule` — so speculation shrinks as the batch grows and switches off
(budget 1: a plain step, through the plain fast path where the drafter learns from emitted tokens) where it does
not pay; drafters that support it (`Budgeted`) apply the cap. Without a drafter (or with speculation off for a request) every step is
a root-only tree (T = 1): plain autoregressive decoding through the very same engine and verification, which is what
makes "speculative output == plain output" a real test. Each request draws its sampling uniforms from its own seeded
generator, so its output does not depend on which other requests shared its steps. Words as in the glossary
(`builder.speculative`); per-sequence state and the stop rules: `builder.speculative.sequence`.

Fast paths: where the engine has greedy fast steps (`ChainStepping`, `PlainStepping`, `GreedyBursting`: the ONNX
Runtime and TensorRT engines), a step that is a common simple case — batch 1 plain or drafting chains, a batch in
which nothing drafts, a lone plain sequence's steps back to back in `run` (`STREAM_BURST` steps at a time while
tokens stream) — goes through them instead, with the same outcome and less host work (`builder.speculative.
fast_paths.FastPaths`, picked per step). `Decoder(..., fast_paths=False)` runs the reference step alone.

Failures never leak a slot: a failed drafter start releases the engine's new sequences; a step that raises
ends (finish_reason "error") and releases every active sequence, then propagates. If releasing fails too,
the engine is beyond repair (`EngineBroken`). (`builder.speculative.protocols.check_paths`: what KV compaction
needs of a draft's paths.)
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable, Sequence, cast

import numpy as np

from builder.speculative.budget import BudgetRule
from builder.speculative.fast_paths import FastPaths
from builder.speculative.protocols import (
    Budgeted,
    Configurable,
    Draft,
    Drafter,
    Engine,
    PrefillResult,
    Sampling,
    SamplingBatch,
    implements,
    root_only,
)
from builder.speculative.requests import DraftSchedule, Generation, Request, Timing, Totals
from builder.speculative.sequence import EngineBroken, OnTokens, SequenceState

__all__ = [
    "Decoder",
    "DraftSchedule",
    "EngineBroken",
    "Generation",
    "OnTokens",
    "Request",
    "STREAM_BURST",
    "SequenceState",
    "Timing",
    "Totals",
    "generate",
]  # (the request and result types live in builder.speculative.requests; EngineBroken, OnTokens and the
# per-sequence state in builder.speculative.sequence)

STREAM_BURST = 8  # `run`'s back-to-back plain steps between two `on_tokens` calls (module docstring)


class Decoder:
    """In-flight batching over one engine and at most one (batched) drafter."""

    def __init__(
        self,
        engine: Engine,
        drafter: Drafter | None = None,
        schedule: DraftSchedule | BudgetRule | None = None,
        *,
        fast_paths: bool = True,
    ) -> None:
        self.engine, self.drafter = engine, drafter
        self.schedule = schedule or DraftSchedule()
        self.active: list[SequenceState] = []
        self.timing = Timing()
        self.totals = Totals()
        self.budget: int | None = None  # the node cap of the latest step (None: uncapped)
        self._observe = self.schedule.observe if isinstance(self.schedule, BudgetRule) else None
        self._seen_steps = self._seen_accepted = 0  # totals at the latest observation (`_apply_budget`)
        self._greedy: dict[tuple[int, int], SamplingBatch] = {}  # all-greedy verification inputs per (B, W)
        self._budgeted = implements(drafter, Budgeted)
        self._configurable = implements(drafter, Configurable)
        # the engine's fast paths where it has them (a wrapper that does not define them — fault injection, a tap —
        # keeps every step on `step` / `update`: `implements`); fast_paths=False: the reference step alone
        self.fast = FastPaths.of(engine, drafter, self.timing, self.totals) if fast_paths else None

    @property
    def free_slots(self) -> int:
        return self.engine.max_batch_size - len(self.active)

    @property
    def rows_in_use(self) -> int:
        """Sequences the engine holds (its own count: equals len(active) unless a slot leaked)."""
        return len(self.engine.rows)

    def add(
        self, requests: Sequence[Request], first_index: int = 0, on_tokens: OnTokens | None = None
    ) -> list[SequenceState]:
        """Prefill requests into the running batch (at most `free_slots` of them)."""
        if len(requests) > self.free_slots:
            raise ValueError(f"{len(requests)} requests but {self.free_slots} free slots")
        t0 = time.perf_counter()
        seqs = [
            SequenceState(
                first_index + i,
                r,
                Generation([]),
                np.random.default_rng(r.sampling.seed),
                self.drafter is not None and r.speculate,
            )
            for i, r in enumerate(requests)
        ]
        for r in requests:  # refuse before the engine starts anything
            if r.lookahead is not None and r.speculate:
                if not self._configurable:
                    raise ValueError("per-request Lookahead settings need a Lookahead drafter")
                cast(Configurable, self.drafter).check(*r.lookahead)
        ids, pre = self.engine.start([list(r.prompt) for r in requests], self._sampling(seqs, [1] * len(seqs)))
        for s, sid in zip(seqs, ids):
            s.id, s.committed, s.stops = sid, len(s.req.prompt), frozenset(s.req.stop_ids)
            s.plain_until = 0 if s.stops or s.req.stop_sequences else s.req.max_new_tokens
        try:
            self._start_drafting(seqs, pre)
        except BaseException:  # e.g. a drafter refusing a prompt: the engine's new sequences go back
            self._abandon(seqs)
            raise
        self.timing.prefill += time.perf_counter() - t0
        for s, tok in zip(seqs, pre.tokens.tolist()):
            self.active.append(s)
            s.emit([int(tok)], self.totals, on_tokens)
        self._retire()
        return seqs

    def step(self, on_tokens: OnTokens | None = None, *, burst: int = 1) -> list[SequenceState]:
        """One target step for every active sequence; returns the sequences that finished. `burst` > 1: where one
        greedy sequence without a draft or stop sequences is active and the engine can (`GreedyBursting`), up to
        that many of its plain steps back to back instead (`run` asks for it when nothing could join meanwhile).

        If anything in the step raises, every active sequence ends (finish_reason "error", released)
        and the exception propagates; EngineBroken instead when the release fails too."""
        if not self.active:
            return []
        try:
            t0 = time.perf_counter()
            if self.drafter is not None:  # 1. the budget: the cap for this batch size (1: a plain step)
                self._apply_budget()
            fast = self.fast
            if fast is not None:  # a fast path, where one applies to this step (`FastPaths`: the same outcome)
                took = fast.step(self.active, t0, on_tokens, burst, self.budget == 1)
                if took is not None:
                    return self._retire() if took else []
            if self.drafter is not None:  # a tree that no longer fits ends that sequence's drafting
                room = self.engine.max_seq_len - self.drafter.max_nodes
                for s in self.active:
                    if s.drafting and s.committed > room:
                        self._stop_drafting(s)
            # 2. propose: the k drafting sequences' drafts, then a root-only tree for each of the rest
            active = self.active
            k = sum(s.drafting for s in active)
            order = (
                active
                if k in (0, len(active))
                else [s for s in active if s.drafting] + [s for s in active if not s.drafting]
            )
            roots = [s.tokens[-1] for s in order]
            ids = [s.id for s in order]
            drafts: list[Draft] = self.drafter.propose(ids[:k], roots[:k]) if k else []  # type: ignore[union-attr]
            drafts += [root_only(r) for r in roots[k:]]
            t1 = time.perf_counter()
            if fast is not None and len(order) == 1:  # batch 1: a chain draft through the engine's chain step
                took = fast.chain_draft(order[0], drafts[0], bool(k), t0, t1, on_tokens)
                if took is not None:
                    return self._retire() if took else []
            # 3. one batched engine step: the target over every draft, tree_verify and the KV commit inside
            out = self.engine.step(ids, drafts, self._sampling(order, [d.paths.shape[1] for d in drafts]))
            t2 = time.perf_counter()
            # 4. the drafter learns the step (its result is valid until the engine's next step)
            if k:
                self.drafter.update(ids[:k], drafts[:k], out)  # type: ignore[union-attr]
            t3 = time.perf_counter()
            timing = self.timing
            timing.draft += (t1 - t0) + (t3 - t2)
            timing.target += t2 - t1
            timing.steps += 1
            # 5. accept: each sequence emits its accepted drafts and the bonus token, cut at its stop rules
            accepted, emitted = out.accepted_len.tolist(), out.tokens.tolist()
            drafted_total = 0
            for s, n, d, toks in zip(order, accepted, drafts, emitted):
                drafted = d.tokens.shape[0] - 1
                drafted_total += drafted
                s.account(n, drafted, toks, self.totals, on_tokens)
            totals = self.totals
            totals.drafted += drafted_total
            totals.accepted += sum(accepted) - len(order)
            totals.sequence_steps += len(order)
            totals.drafting_steps += k
            # 6. retire: finished sequences leave, their slots and KV freed
            return self._retire()
        except BaseException:
            failed, self.active = self.active, []
            for s in failed:
                s.gen.finish_reason = "error"
            self._abandon(failed)
            raise

    def cancel(self, index: int) -> Generation | None:
        """Drop the active request with this index now (between steps): its slot and KV are freed.

        Returns its generation so far (finish_reason "cancelled"), or None if it is not active.
        """
        s = next((s for s in self.active if s.index == index), None)
        if s is None:
            return None
        s.gen.finish_reason = "cancelled"
        self._retire()
        return s.gen

    def run(
        self, requests: Sequence[Request], on_tokens: OnTokens | None = None, *, burst: bool = True
    ) -> list[Generation]:
        """Decode every request, admitting new ones as slots free up; results in request order.

        burst: a step of a lone greedy plain sequence runs its steps back to back (`step`'s burst: to its end, or
        `STREAM_BURST` steps at a time while `on_tokens` streams) — nothing can join it meanwhile, as every pending
        request was admitted while slots were free. False: one step at a time (what a server's loop does; the
        host-share measurement of `trtspec tune` decodes so)."""
        done: dict[int, Generation] = {}
        pending = list(enumerate(requests))
        n = 1 if not burst else STREAM_BURST if on_tokens is not None else 1 << 30
        while pending or self.active:
            if pending and self.free_slots:
                take, pending = pending[: self.free_slots], pending[self.free_slots :]
                for s in self.add([r for _, r in take], take[0][0], on_tokens):
                    if s.gen.finish_reason:
                        done[s.index] = s.gen
            for s in self.step(on_tokens, burst=1 if pending and self.free_slots else n):
                done[s.index] = s.gen
        return [done[i] for i in range(len(requests))]

    # -- internals -------------------------------------------------------------------------------

    def _start_drafting(self, seqs: list[SequenceState], pre: PrefillResult) -> None:
        drafting = [i for i, s in enumerate(seqs) if s.drafting]
        if not drafting:
            return
        assert self.drafter is not None
        self.drafter.start(
            [seqs[i].id for i in drafting], [list(seqs[i].req.prompt) for i in drafting], _rows(pre, drafting)
        )
        for i in drafting:
            if seqs[i].req.lookahead is not None:  # checked in add
                cast(Configurable, self.drafter).configure(seqs[i].id, *seqs[i].req.lookahead)

    def _apply_budget(self) -> None:
        """Tell the drafter this step's node cap (from the schedule or rule and the batch size); a rule first learns
        the acceptance of the drafting steps since the last call, all of them taken at the previous cap."""
        if self._observe is not None:
            totals = self.totals
            steps = totals.drafting_steps - self._seen_steps
            if steps:
                accepted = totals.accepted - self._seen_accepted
                if self.budget is not None:
                    self._observe(self.budget, accepted + steps, steps)
                self._seen_steps, self._seen_accepted = totals.drafting_steps, totals.accepted
        budget = self.schedule.budget(len(self.active))
        if budget != self.budget and self.drafter is not None:
            if not self._budgeted and budget is not None:
                raise ValueError(f"{type(self.drafter).__name__} cannot apply a draft budget")
            if self._budgeted:
                cast(Budgeted, self.drafter).set_budget(budget)
        self.budget = budget

    def _sampling(self, seqs: Sequence[SequenceState], widths: Sequence[int]) -> SamplingBatch:
        w = max(widths)
        if all(s.req.sampling.greedy for s in seqs):  # the common case: one shared, read-only batch per shape
            key = (len(seqs), w)
            batch = self._greedy.get(key)
            if batch is None:
                batch = self._greedy[key] = SamplingBatch.all_greedy(len(seqs), w)
                for a in (batch.temperature, batch.top_p, batch.uniforms):
                    a.flags.writeable = False
            return batch
        batch = SamplingBatch(
            np.array([s.req.sampling.temperature for s in seqs], np.float32),
            np.array([s.req.sampling.top_p for s in seqs], np.float32),
            np.zeros((len(seqs), w), np.float32),
        )
        for row, (s, width) in enumerate(zip(seqs, widths)):
            if not s.req.sampling.greedy:
                batch.uniforms[row, :width] = s.rng.random(width, dtype=np.float32)
        return batch

    def _stop_drafting(self, s: SequenceState) -> None:
        s.drafting = False
        if self.drafter is not None:
            self.drafter.release(s.id)

    def _retire(self) -> list[SequenceState]:
        """Finished sequences leave: released from the drafter and the engine (EngineBroken if that fails)."""
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

    def _abandon(self, seqs: Sequence[SequenceState]) -> None:
        """Release sequences the engine started (a failed prefill or step); EngineBroken if that fails."""
        for s in seqs:
            try:
                if s.drafting and self.drafter is not None:
                    s.drafting = False
                    with contextlib.suppress(KeyError):  # (the drafter may never have started it)
                        self.drafter.release(s.id)
                self.engine.release(s.id)
            except Exception as exc:
                raise EngineBroken(f"releasing sequence {s.id} failed: {exc!r}") from exc


def _rows(pre: PrefillResult, rows: list[int]) -> PrefillResult:
    """The given rows of a PrefillResult (the requests that draft)."""
    return PrefillResult(
        pre.tokens[rows], [pre.hidden[i] for i in rows], None if pre.medusa_topk is None else pre.medusa_topk[rows]
    )


def generate(
    engine: Engine,
    prompt_ids: Sequence[int],
    max_new_tokens: int,
    drafter: Drafter | None = None,
    sampling: Sampling = Sampling(),
    stop_ids: Sequence[int] = (),
    on_tokens: Callable[[list[int]], None] | None = None,
    schedule: DraftSchedule | BudgetRule | None = None,
) -> Generation:
    """Generate up to `max_new_tokens` after `prompt_ids` (one request); stops after a stop token. `schedule`: the
    draft budget per step (the engine folder's rule, a pinned schedule; None: the whole draft)."""
    dec = Decoder(engine, drafter, schedule)
    req = Request(tuple(int(t) for t in prompt_ids), max_new_tokens, sampling, tuple(stop_ids))
    callback = None if on_tokens is None else (lambda _i, toks: on_tokens(toks))
    return dec.run([req], callback)[0]
