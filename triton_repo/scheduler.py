"""In-flight batching for spec_decoder: one thread drives a `Decoder` over the engine's batch.

    scheduler = Scheduler(decoder, queue_delay_s, max_queue=64).start()
    scheduler.submit(Job(request, stream, sink, deadline=...))   # from Triton's execute thread; returns at once
    scheduler.cancel(key)                                          # a front model forwarding its client's cancel

Between two steps the thread admits waiting jobs into free slots (at most the engine's max_batch_size
active; the rest wait in arrival order), ends jobs whose client cancelled or went away, or whose deadline
passed (`Decoder.cancel`: slot and KV freed before the next step), runs one `Decoder.step` for the whole
batch and hands each job its news: streamed jobs get a chunk per step that emitted tokens, the others one
final chunk. The decoder's draft schedule shrinks the trees as the batch grows. When idle, the first
arrival waits up to `queue_delay_s` for company, so a burst starts as one prefill.

Every job ends exactly once, with one final chunk: finish_reason length | stop | cancelled, or an error of a
kind (`ERROR_KINDS`). Failures stay local: a prefill that raises fails its own requests (retried one by
one, so only the culprit fails), a step that raises fails the requests in that step; the loop carries on.
Only a broken engine (`EngineBroken`: releasing a slot failed) or a bug in the loop itself ends the
loop: then every pending and active job gets a final error, `broken` says why, `submit` refuses at once
and `on_broken` is called (spec_decoder makes the model unready). `stop()` ends every job with a final
error too. The pending queue is bounded (`max_queue`): past it `submit` raises `Overloaded` at once.

A `Sink` is the only thing a job knows of Triton: `send(chunk)` (raising when the client is gone) and
`cancelled()` (an IPC round trip in the Python backend: asked at most every `cancel_check_s`; a
`Scheduler.cancel` from another thread costs nothing and is seen at the next step boundary). `Stats` and
`Decoder.totals` are plain counters read by the metrics exporter (`triton_repo.metrics`).
"""

from __future__ import annotations

import threading
import time
import traceback
from typing import Callable

from builder.speculative.decoding import Decoder, EngineBroken, Generation
from triton_repo.detok import window
from triton_repo.jobs import Chunk, Job, Overloaded, Stats, Unavailable, deadline_message, end_line, label, last_line


class Scheduler:
    def __init__(
        self,
        decoder: Decoder,
        queue_delay_s: float = 0.0,
        log: Callable[[str], None] = lambda _m: None,
        cancel_check_s: float = 0.02,
        max_queue: int = 64,
        on_broken: Callable[[str], None] | None = None,
    ) -> None:
        self.decoder, self.queue_delay_s, self._log_fn = decoder, queue_delay_s, log
        self.cancel_check_s = cancel_check_s  # asking Triton costs an IPC round trip: at most this often
        self.max_queue, self.on_broken = max_queue, on_broken
        self.stats = Stats()
        self.broken: str | None = None  # why the loop ended for good
        self._checked = 0.0
        self._pending: list[Job] = []
        self._active: dict[int, Job] = {}
        self._keys: dict[str, Job] = {}
        self._next = 0
        self._numbers = 0
        self._cond = threading.Condition()
        self._send_lock = threading.Lock()  # final chunks may come from stop() while the loop is stuck
        self._running = False
        self._thread: threading.Thread | None = None

    def log(self, message: str) -> None:
        """Log through the given function; a failing logger never takes the loop (or a caller) down."""
        try:
            self._log_fn(message)
        except Exception:
            pass

    # -- outside the thread -------------------------------------------------------------------------

    def start(self) -> "Scheduler":
        self._running = True
        self._thread = threading.Thread(target=self._loop, name="trtspec-scheduler", daemon=True)
        self._thread.start()
        return self

    @property
    def healthy(self) -> bool:
        return self.broken is None and self._running and self._thread is not None and self._thread.is_alive()

    def submit(self, job: Job) -> None:
        """Queue a job; Overloaded / Unavailable (nothing queued, nothing sent) when it cannot be taken."""
        with self._cond:
            if not self.healthy:
                raise Unavailable(self.broken or "spec_decoder is shutting down")
            if len(self._pending) >= self.max_queue:
                self.stats.errors["overload"] += 1
                raise Overloaded(
                    f"{len(self._pending)} requests already wait for a slot (triton.max_queue_size "
                    f"{self.max_queue}); retry later"
                )
            self._numbers += 1
            job.number = self._numbers
            self.stats.received += 1
            self._pending.append(job)
            if job.key:
                self._keys[job.key] = job
            waiting = len(self._pending)
            self._cond.notify()
        r = job.request
        self.log(
            f"request {job.number}{label(job)} received: {len(r.prompt)} prompt tokens, max_tokens "
            f"{r.max_new_tokens}{', stream' if job.stream else ''}, deadline {job.deadline - job.arrived:.3g} s, "
            f"{waiting} waiting, {len(self._active)} active"
        )

    def refused(self, kind: str) -> None:
        """Count a request refused before it reached the queue (e.g. "bad_request")."""
        self.stats.errors[kind] = self.stats.errors.get(kind, 0) + 1

    def cancel(self, key: str) -> bool:
        """End the job submitted with this key at the next step boundary; False if no such job is left."""
        with self._cond:
            job = self._keys.get(key)
            if job is None or job.ended:
                return False
            job.cancel_at = job.cancel_at or time.monotonic()
            self._cond.notify()
            return True

    def stop(self, timeout: float = 10.0) -> None:
        """End the loop; every pending and active job gets a final error response."""
        with self._cond:
            self._running = False
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():  # stuck in a step: answer the clients from here
                self.log(f"scheduler: the loop did not stop within {timeout:.0f} s; ending its requests from here")
                self._close("spec_decoder is shutting down", release=False)

    @property
    def load(self) -> tuple[int, int]:
        """(active, waiting) jobs."""
        with self._cond:
            return len(self._active), len(self._pending)

    # -- the thread ----------------------------------------------------------------------------------

    def _loop(self) -> None:
        reason, release = "spec_decoder is shutting down", True
        try:
            while self._wait_for_work():
                self._admit()
                self._sweep()
                if self._active:
                    self._step()
        except EngineBroken as exc:
            reason, release = f"spec_decoder's engine is broken: {exc}", False
            self.log(f"{reason}\n{traceback.format_exc(limit=6)}")
        except BaseException as exc:  # a bug in the loop itself: it must not die silently
            reason, release = f"spec_decoder's scheduler loop died: {exc!r}", False
            self.log(f"{reason}\n{traceback.format_exc(limit=6)}")
        finally:
            self._close(reason, release)

    def _wait_for_work(self) -> bool:
        with self._cond:
            while self._running and not self._pending and not self._active:
                self._cond.wait()
            return self._running

    def _close(self, reason: str, release: bool) -> None:
        """End every job (final error) after the loop ended; `broken` unless this was a stop()."""
        with self._cond:
            failed = self._running
            self._running = False
            if failed:
                self.broken = self.broken or reason
            jobs, self._pending = [*self._pending, *self._active.values()], []
            self._active = {}
        kind = "unavailable" if failed else "shutdown"
        for job in jobs:
            if release and job.index >= 0:
                try:
                    self.decoder.cancel(job.index)
                except Exception as exc:  # shutting down anyway
                    self.log(f"scheduler: releasing request {job.number} failed: {exc!r}")
            self._end(job, "error", kind, reason)
        if failed and self.on_broken is not None:
            try:
                self.on_broken(reason)
            except Exception:
                self.log(f"scheduler: on_broken failed:\n{traceback.format_exc(limit=4)}")

    def _admit(self) -> None:
        if not self._active and self.queue_delay_s > 0:
            deadline = time.monotonic() + self.queue_delay_s
            with self._cond:
                while len(self._pending) < self.decoder.free_slots and time.monotonic() < deadline and self._running:
                    self._cond.wait(max(deadline - time.monotonic(), 0))
        with self._cond:
            take = self._pending[: self.decoder.free_slots]
            self._pending = self._pending[len(take) :]
        now, live = time.monotonic(), []
        for job in take:
            if job.cancel_at is not None or self._asked_cancelled(job):
                self._end(job, "cancelled", detail="before it started")
            elif job.deadline <= now:
                self._end(job, "error", "deadline", deadline_message(job, now))
            else:
                live.append(job)
        if not live:
            return
        try:
            self._add(live)
        except EngineBroken:
            raise
        except Exception:
            if len(live) == 1:
                self._fail_prefill(live[0])
            else:  # one request's prefill must not fail its neighbours: again one by one
                for job in live:
                    try:
                        self._add([job])
                    except EngineBroken:
                        raise
                    except Exception:
                        self._fail_prefill(job)
        self._flush()

    def _add(self, jobs: list[Job]) -> None:
        first = self._next
        for job in jobs:
            job.index, self._next = self._next, self._next + 1
            self._active[job.index] = job
        try:
            seqs = self.decoder.add([j.request for j in jobs], first, self._on_tokens)
        except BaseException:
            for job in jobs:
                self._active.pop(job.index, None)
                job.index = -1
            raise
        now = time.monotonic()
        self.stats.admitted += len(jobs)
        for s, job in zip(seqs, jobs):
            job.gen, job.admitted = s.gen, now

    def _fail_prefill(self, job: Job) -> None:
        self.log(f"request {job.number}: prefill failed:\n{traceback.format_exc(limit=4)}")
        self._end(job, "error", "prefill", f"spec_decoder: prefill failed: {last_line()}")

    def _asked_cancelled(self, job: Job) -> bool:
        try:
            return bool(job.sink.cancelled())
        except Exception as exc:  # the request's state cannot be read: treat the client as gone
            self.log(f"request {job.number}: cancellation check failed ({exc!r}); ending it")
            return True

    def _sweep(self) -> None:
        """End jobs cancelled (by the client or a front model) or past their deadline, pending or active."""
        now = time.monotonic()
        ask = now - self._checked >= self.cancel_check_s
        if ask:
            self._checked = now
        with self._cond:
            over = [j for j in self._pending if j.cancel_at is not None or j.deadline <= now]
            if over:
                self._pending = [j for j in self._pending if j.cancel_at is None and j.deadline > now]
        for job in over:
            if job.cancel_at is not None:
                self._end(job, "cancelled", detail="while it waited for a slot")
            else:
                self._end(job, "error", "deadline", deadline_message(job, now))
        for job in list(self._active.values()):
            if job.cancel_at is not None or (ask and self._asked_cancelled(job)):
                self._retire(job, "cancelled", detail="by the client")
            elif job.deadline <= now:
                self._retire(job, "error", "deadline", deadline_message(job, now))

    def _retire(self, job: Job, outcome: str, kind: str = "", message: str = "", detail: str = "") -> None:
        """End an active job now: its slot and KV are freed before the next step."""
        self.decoder.cancel(job.index)
        self._active.pop(job.index, None)
        self._end(job, outcome, kind, message, detail)

    def _step(self) -> None:
        b = len(self.decoder.active)
        self.stats.steps += 1
        if b > self.stats.max_batch:
            self.log(
                f"first step with a batch of {b} sequences (draft budget {self.decoder.schedule.budget(b) or 'uncapped'})"
            )
        self.stats.max_batch = max(self.stats.max_batch, b)
        self.stats.batch_steps[b] = self.stats.batch_steps.get(b, 0) + 1
        t0 = time.perf_counter()
        try:
            self.decoder.step(self._on_tokens)
        except EngineBroken:
            raise
        except Exception:  # the decoder already released every sequence of the step: fail exactly those
            self.log(
                f"decoding step failed; failing its {len(self._active)} request(s):\n{traceback.format_exc(limit=4)}"
            )
            failed, self._active = list(self._active.values()), {}
            for job in failed:
                self._end(job, "error", "step", f"spec_decoder: decoding failed: {last_line()}")
            return
        self.stats.step_seconds.append(time.perf_counter() - t0)
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
                self._end(job, gen.finish_reason)
            elif job.stream and job.dirty:
                if not self._send(job, final=False):
                    self._retire(job, "cancelled", detail="by the client" if job.cancel_at else "(it lost its client)")
            job.dirty = False

    def _end(self, job: Job, outcome: str, kind: str = "", message: str = "", detail: str = "") -> None:
        """The job's final chunk (an error when outcome is "error"), its counters and its log line (once)."""
        with self._cond:
            if job.ended:
                return
            job.ended = True
            if job.key:
                self._keys.pop(job.key, None)
        gen = job.gen
        if gen is not None and not gen.finish_reason:
            gen.finish_reason = outcome
        error = (message or f"spec_decoder: {kind}") if outcome == "error" else None
        self.stats.ended[outcome] = self.stats.ended.get(outcome, 0) + 1
        if kind:
            self.stats.errors[kind] = self.stats.errors.get(kind, 0) + 1
        if outcome == "cancelled":
            self.stats.cancelled += 1
        if gen is not None and gen.steps:
            self.stats.taus.append(gen.tau)
        self.log(end_line(job, outcome, kind, error, detail))  # before the final response: see `stop`
        self._send(job, final=True, reason="" if error else outcome, error=error, kind=kind)

    def _send(self, job: Job, final: bool, reason: str = "", error: str | None = None, kind: str = "") -> bool:
        """Send one chunk; False when the client is gone (the job is then done)."""
        with self._send_lock:
            if job.done:
                return False
            gen = job.gen or Generation([])
            ids, prefix = window(gen.token_ids, job.sent if job.stream else 0, final)
            chunk = Chunk(
                ids,
                prefix,
                final,
                len(gen.token_ids),
                gen.steps,
                sum(gen.accepted_per_step),
                gen.drafted,
                reason if final else "",
                error,
                kind if error else "",
            )
            try:
                job.sink.send(chunk)
            except Exception as exc:  # the client went away: nothing more to send
                self.log(f"request {job.number}: send failed ({exc}); dropping it")
                job.done = True
                return False
            job.sent = len(gen.token_ids)
            job.done = final
            return True
