"""In-flight batching for spec_decoder: one thread drives a `Decoder` over the engine's batch.

    scheduler = Scheduler(decoder, queue_delay_s)
    scheduler.submit(Job(request, stream, sink))      # from Triton's execute thread; returns at once

Between two steps the thread admits waiting jobs into free slots (at most the engine's
max_batch_size active; the rest wait in arrival order), drops jobs whose client cancelled or went
away (`Decoder.cancel`: slot and KV freed before the next step), runs one `Decoder.step` for the
whole batch and hands each job its news: streamed jobs get a chunk per step that emitted tokens,
the others one final chunk. The decoder's draft schedule shrinks the trees as the batch grows. When
idle, the first arrival waits up to `queue_delay_s` for company, so a burst starts as one prefill.

A `Sink` is the only thing a job knows of Triton: `send(chunk)` (raising when the client is gone) and
`cancelled()` (an IPC round trip in the Python backend: asked at most every `cancel_check_s`). Tests drive the scheduler with plain sinks; spec_decoder wraps the response sender.
"""

from __future__ import annotations

import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable, Protocol

from builder.speculative.decoding import Decoder, Generation, Request
from triton_repo.detok import window


@dataclass
class Chunk:
    """One response: a window of generated ids (see `triton_repo.detok`) and the counters so far."""

    ids: list[int]
    prefix_len: int
    final: bool
    output_tokens: int
    steps: int
    accepted: int
    drafted: int
    finish_reason: str = ""
    error: str | None = None  # an error response (final)


class Sink(Protocol):
    def send(self, chunk: Chunk) -> None:
        ...

    def cancelled(self) -> bool:
        ...


@dataclass
class Job:
    request: Request
    stream: bool
    sink: Sink
    index: int = -1
    gen: Generation | None = None
    sent: int = 0  # generated ids whose text earlier chunks covered
    dirty: bool = False  # new tokens since the last chunk
    done: bool = False


@dataclass
class Stats:
    steps: int = 0
    admitted: int = 0
    finished: int = 0
    cancelled: int = 0
    errors: int = 0
    max_batch: int = 0
    batch_steps: dict[int, int] = field(default_factory=dict)  # batch size -> steps run at it


class Scheduler:
    def __init__(self, decoder: Decoder, queue_delay_s: float = 0.0, log: Callable[[str], None] = lambda _m: None,
                 cancel_check_s: float = 0.02) -> None:
        self.decoder, self.queue_delay_s, self.log = decoder, queue_delay_s, log
        self.cancel_check_s = cancel_check_s  # asking Triton costs an IPC round trip: at most this often
        self._checked = 0.0
        self.stats = Stats()
        self._pending: list[Job] = []
        self._active: dict[int, Job] = {}
        self._next = 0
        self._cond = threading.Condition()
        self._running = False
        self._thread: threading.Thread | None = None

    # -- outside the thread -------------------------------------------------------------------------

    def start(self) -> "Scheduler":
        self._running = True
        self._thread = threading.Thread(target=self._loop, name="trtspec-scheduler", daemon=True)
        self._thread.start()
        return self

    def submit(self, job: Job) -> None:
        with self._cond:
            self._pending.append(job)
            self._cond.notify()

    def stop(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._running = False
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def load(self) -> tuple[int, int]:
        """(active, waiting) jobs."""
        with self._cond:
            return len(self._active), len(self._pending)

    # -- the thread ----------------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._running and not self._pending and not self._active:
                    self._cond.wait()
                if not self._running:
                    break
            try:
                self._admit()
                self._drop_cancelled()
                if self._active:
                    self._step()
            except Exception:  # an engine failure: fail the batch, keep serving
                self._fail_all(traceback.format_exc(limit=4))

    def _admit(self) -> None:
        if not self._active and self.queue_delay_s > 0:
            deadline = time.monotonic() + self.queue_delay_s
            with self._cond:
                while len(self._pending) < self.decoder.free_slots and time.monotonic() < deadline:
                    self._cond.wait(max(deadline - time.monotonic(), 0))
        with self._cond:
            take = self._pending[: self.decoder.free_slots]
            self._pending = self._pending[len(take) :]
        live = []
        for job in take:
            if job.sink.cancelled():
                self._finish(job, "cancelled")
            else:
                job.index, self._next = self._next, self._next + 1
                live.append(job)
        if not live:
            return
        for job in live:
            self._active[job.index] = job
        self.stats.admitted += len(live)
        try:
            seqs = self.decoder.add([j.request for j in live], live[0].index, self._on_tokens)
        except Exception as exc:  # e.g. a drafter refusing a request's settings: those requests fail alone
            self.stats.errors += 1
            self.log(f"prefill failed: {traceback.format_exc(limit=4)}")
            for job in live:
                self._active.pop(job.index, None)
                self._send(job, final=True, error=f"spec_decoder: prefill failed: {exc}")
            return
        for s, job in zip(seqs, live):
            job.gen = s.gen
        self._flush()

    def _drop_cancelled(self) -> None:
        now = time.monotonic()
        if now - self._checked < self.cancel_check_s:
            return
        self._checked = now
        for job in list(self._active.values()):
            if job.sink.cancelled():
                self._cancel(job, "cancelled by the client")
                self._finish(job, "cancelled")

    def _cancel(self, job: Job, why: str) -> None:
        self.decoder.cancel(job.index)
        self._active.pop(job.index, None)
        self.stats.cancelled += 1
        n = 0 if job.gen is None else len(job.gen.token_ids)
        self.log(f"request {job.index} {why}: cancelled after {n} tokens, slot and KV freed")

    def _step(self) -> None:
        b = len(self.decoder.active)
        self.stats.steps += 1
        if b > self.stats.max_batch:
            self.log(f"first step with a batch of {b} sequences (draft budget {self.decoder.schedule.budget(b) or 'uncapped'})")
        self.stats.max_batch = max(self.stats.max_batch, b)
        self.stats.batch_steps[b] = self.stats.batch_steps.get(b, 0) + 1
        self.decoder.step(self._on_tokens)
        self._flush()

    def _on_tokens(self, index: int, _tokens: list[int]) -> None:
        job = self._active.get(index)
        if job is not None:
            job.dirty = True

    def _flush(self) -> None:
        """Send what each job has news of: a chunk per step when streaming, the final one always."""
        for job in list(self._active.values()):
            gen = job.gen
            if gen is None:
                continue
            if gen.finish_reason:
                self._active.pop(job.index, None)
                self.stats.finished += 1
                self._finish(job, gen.finish_reason)
            elif job.stream and job.dirty:
                if not self._send(job, final=False):
                    self._cancel(job, "lost its client")
            job.dirty = False

    def _finish(self, job: Job, reason: str) -> None:
        if job.gen is not None and not job.gen.finish_reason:
            job.gen.finish_reason = reason
        self._send(job, final=True, reason=reason)

    def _send(self, job: Job, final: bool, reason: str = "", error: str | None = None) -> bool:
        """Send one chunk; False when the client is gone (the job is then done)."""
        if job.done:
            return False
        gen = job.gen or Generation([])
        ids, prefix = window(gen.token_ids, job.sent if job.stream else 0, final)
        chunk = Chunk(ids, prefix, final, len(gen.token_ids), gen.steps, sum(gen.accepted_per_step), gen.drafted,
                      reason if final else "", error)  # fmt: skip
        try:
            job.sink.send(chunk)
        except Exception as exc:  # the client went away: nothing more to send
            self.log(f"job {job.index}: send failed ({exc}); dropping it")
            job.done = True
            return False
        job.sent = len(gen.token_ids)
        job.done = final
        return True

    def _fail_all(self, message: str) -> None:
        self.stats.errors += 1
        self.log(f"decoding step failed; failing {len(self._active)} request(s):\n{message}")
        for job in list(self._active.values()):
            self.decoder.cancel(job.index)
            self._send(job, final=True, error=f"spec_decoder: decoding failed: {message.strip().splitlines()[-1]}")
        self._active.clear()
