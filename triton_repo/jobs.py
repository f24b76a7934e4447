"""What the scheduler (`triton_repo.scheduler`) hands around: jobs, their response chunks, the sink a job
answers through, the scheduler's counters, the errors a request can end with, and the log lines.

Every job ends exactly once, with one final chunk: finish_reason length | stop | cancelled (`OUTCOMES`), or an
error of a kind in `ERROR_KINDS` (its Triton error code: `ERROR_CODES`). Each job logs one line when it is
received and one when it ends, with the scheduler's request number and the client's request id.
"""

from __future__ import annotations

import math
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from builder.speculative.decoding import Generation, Request

ERROR_KINDS = ("bad_request", "overload", "unavailable", "deadline", "prefill", "step", "shutdown")
ERROR_CODES = {
    "bad_request": "INVALID_ARG",
    "overload": "UNAVAILABLE",
    "unavailable": "UNAVAILABLE",
    "deadline": "UNAVAILABLE",
    "shutdown": "UNAVAILABLE",
    "prefill": "INTERNAL",
    "step": "INTERNAL",
}
OUTCOMES = ("length", "stop", "cancelled", "error")


class Overloaded(RuntimeError):
    """The pending queue is full (triton.max_queue_size): the request is refused at once."""


class Unavailable(RuntimeError):
    """The scheduler is stopped or broken: the request is refused at once."""


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
    error_kind: str = ""  # one of ERROR_KINDS when error is set


class Sink(Protocol):
    def send(self, chunk: Chunk) -> None: ...

    def cancelled(self) -> bool: ...


@dataclass(eq=False)
class Job:
    request: Request
    stream: bool
    sink: Sink
    deadline: float = math.inf  # time.monotonic() past which the job ends with a deadline error
    label: str = ""  # the client's request id (log lines)
    key: str = ""  # a front model's relay id: `Scheduler.cancel(key)` ends this job
    number: int = -1  # this scheduler's request number (log lines)
    index: int = -1  # the decoder's request index while active
    gen: Generation | None = None
    sent: int = 0  # generated ids whose text earlier chunks covered
    dirty: bool = False  # new tokens since the last chunk
    done: bool = False  # nothing more to send: the final chunk went out, or the client is gone
    ended: bool = False  # the job's end was accounted for (counters, log line)
    arrived: float = field(default_factory=time.monotonic)
    admitted: float = 0.0
    cancel_at: float | None = None  # when a cancel arrived through `Scheduler.cancel`


@dataclass
class Stats:
    """Counters over the scheduler's life (read by the metrics exporter; written by the loop thread)."""

    steps: int = 0
    admitted: int = 0
    received: int = 0
    cancelled: int = 0
    max_batch: int = 0
    batch_steps: dict[int, int] = field(default_factory=dict)  # batch size -> steps run at it
    ended: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    errors: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ERROR_KINDS, 0))
    step_seconds: deque = field(default_factory=lambda: deque(maxlen=65536))  # observations not yet exported
    taus: deque = field(default_factory=lambda: deque(maxlen=65536))  # τ of each request that ran a step


def label(job: Job) -> str:
    return f" (id {job.label!r})" if job.label else ""


def last_line() -> str:
    lines = traceback.format_exc(limit=2).strip().splitlines()
    return lines[-1] if lines else "unknown error"


def deadline_message(job: Job, now: float) -> str:
    n = 0 if job.gen is None else len(job.gen.token_ids)
    return (
        f"spec_decoder: deadline exceeded: {now - job.arrived:.3f} s after arrival (limit {job.deadline - job.arrived:.3g} s: "
        f"the request's timeout_s or triton.request_timeout_s), {n} tokens generated"
    )


def end_line(job: Job, outcome: str, kind: str, error: str | None, detail: str) -> str:
    now = time.monotonic()
    gen = job.gen
    head = f"request {job.number}{label(job)} ended: "
    if outcome == "cancelled":
        n = 0 if gen is None else len(gen.token_ids)
        freed = (
            ""
            if job.cancel_at is None
            else f"; slot and KV freed {1e3 * (now - job.cancel_at):.1f} ms after the cancel"
        )
        return f"{head}cancelled {detail} after {n} tokens{freed}".replace("  ", " ")
    if error is not None:
        return f"{head}error ({kind}): {error}"
    assert gen is not None
    waited = job.admitted - job.arrived if job.admitted else 0.0
    return (
        f"{head}{outcome}: {len(gen.token_ids)} tokens, {gen.steps} steps, τ {gen.tau:.2f}, queued {waited:.3f} s, "
        f"decoded {now - (job.admitted or job.arrived):.3f} s"
    )
