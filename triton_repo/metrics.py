"""Triton custom metrics of the repository's Python models, on the server's metrics port (`/metrics`).

Triton 2.51 (container 24.10) binds `pb_utils.MetricFamily` with kinds COUNTER, GAUGE and HISTOGRAM, and
`Metric.increment / set / observe` (triton-inference-server/python_backend r24.10, commit 01d0ad8,
src/pb_stub.cc: the `MetricFamily` and `Metric` bindings; histograms arrived in 958c8c9, "Add new
histogram metric type", 2024-08, before r24.10 branched). Each call is an IPC round trip to the server,
so nothing is exported from the decoding loop itself: the loop counts in plain integers (`Scheduler.stats`,
`Decoder.totals`) and an `Exporter` thread publishes the changes every `interval_s` (counters by their
increase, gauges when they changed, histograms one observation per recorded value).

Families (defined once here; `builder.bench.serve_metrics` reads a scrape against the same names). Every
series carries the labels model, instance (the model instance) and pid (its stub process: a restarted
model starts fresh series, and two processes never share one of Triton's metric objects).

    spec_decoder
      trtspec_requests_queued              gauge      requests waiting for a slot
      trtspec_requests_active              gauge      requests holding a slot (decoding)
      trtspec_kv_rows_in_use               gauge      sequences the engine holds (== active unless a slot leaked)
      trtspec_loop_up                      gauge      1 while the decoding loop serves, 0 once it is broken
      trtspec_requests_received_total      counter    requests queued
      trtspec_requests_ended_total         counter    by outcome: length | stop | cancelled | error
      trtspec_request_errors_total         counter    by kind (`triton_repo.scheduler.ERROR_KINDS`), refusals included
      trtspec_steps_total                  counter    batched target steps
      trtspec_sequence_steps_total         counter    Σ over steps of the sequences in them
      trtspec_draft_tokens_total           counter    draft tokens proposed (roots excluded)
      trtspec_accepted_tokens_total        counter    draft tokens accepted (bonus excluded)
      trtspec_output_tokens_total          counter    tokens generated (each request's output_tokens, summed)
      trtspec_draft_budget                 gauge      by batch: the draft tree nodes (root included; 1 = no draft) a
                                                      step of that many sequences uses (the rule's pick, refined online)
      trtspec_tau                          histogram  τ (tokens per target step) of each request that ran a step
      trtspec_step_seconds                 histogram  wall time of each batched step (draft + target + commit)
    front model (counters only: a gauge would change, so be sent, just as the model unloads)
      trtspec_front_cancels_total          counter    client cancellations forwarded to spec_decoder
      trtspec_front_backend_failures_total counter    spec_decoder stub processes that ended under the front
      trtspec_front_backend_restarts_total counter    spec_decoder reloads that succeeded

No metric is sent once a model's unload has begun (`close`): Triton 2.51 answers a stub's finalize request
before the stub runs `finalize` (python_backend r24.10 src/pb_stub.cc `RunCommand` / `Finalize`), and an IPC
message that reaches the server after that answer can abort it (seen here: boost lock_exception).
"""

from __future__ import annotations

import os
import threading
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from triton_repo.jobs import ERROR_KINDS, OUTCOMES
from triton_repo.scheduler import Scheduler

TAU_BUCKETS = (1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0)
STEP_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


@dataclass(frozen=True)
class Family:
    name: str
    kind: str  # "counter" | "gauge" | "histogram"
    help: str
    label: str = ""  # an extra label (one series per value), e.g. "outcome"
    buckets: tuple[float, ...] = ()


SPEC_DECODER = (
    Family("trtspec_requests_queued", "gauge", "Requests waiting for a decoding slot."),
    Family("trtspec_requests_active", "gauge", "Requests holding a decoding slot."),
    Family("trtspec_kv_rows_in_use", "gauge", "Sequences the engine holds (equals active unless a slot leaked)."),
    Family("trtspec_loop_up", "gauge", "1 while the decoding loop serves, 0 once it is broken."),
    Family("trtspec_requests_received_total", "counter", "Requests queued for decoding."),
    Family("trtspec_requests_ended_total", "counter", "Requests ended, by outcome.", "outcome"),
    Family(
        "trtspec_request_errors_total",
        "counter",
        "Requests that ended in or were refused with an error, by kind.",
        "kind",
    ),
    Family("trtspec_steps_total", "counter", "Batched target steps."),
    Family("trtspec_sequence_steps_total", "counter", "Sum over target steps of the sequences in them."),
    Family("trtspec_draft_tokens_total", "counter", "Draft tokens proposed (roots excluded)."),
    Family("trtspec_accepted_tokens_total", "counter", "Draft tokens the target accepted (bonus tokens excluded)."),
    Family("trtspec_output_tokens_total", "counter", "Tokens generated."),
    Family(
        "trtspec_draft_budget",
        "gauge",
        "Draft tree nodes per sequence (root included; 1 = no draft) a step of this many sequences uses.",
        "batch",
    ),
    Family("trtspec_tau", "histogram", "Tokens per target step of each request that ran a step.", buckets=TAU_BUCKETS),
    Family("trtspec_step_seconds", "histogram", "Wall time of each batched decoding step.", buckets=STEP_BUCKETS),
)
FRONT = (
    Family("trtspec_front_cancels_total", "counter", "Client cancellations forwarded to spec_decoder."),
    Family(
        "trtspec_front_backend_failures_total",
        "counter",
        "spec_decoder stub processes that ended under the front model.",
    ),
    Family(
        "trtspec_front_backend_restarts_total", "counter", "spec_decoder reloads by the front model that succeeded."
    ),
)

Values = Mapping[str, "float | Mapping[str, float]"]  # family -> value, or label value -> value
Observations = Mapping[str, list[float]]  # histogram family -> new observations


def spec_decoder_values(s: Scheduler) -> dict[str, Any]:
    """The counters and gauges of spec_decoder's families, read from the scheduler and its decoder."""
    active, waiting = s.load
    st, tot = s.stats, s.decoder.totals
    rows = s.decoder.rows_in_use
    return {
        "trtspec_requests_queued": waiting,
        "trtspec_requests_active": active,
        "trtspec_kv_rows_in_use": len(s.decoder.active) if rows is None else rows,
        "trtspec_loop_up": 1.0 if s.healthy else 0.0,
        "trtspec_requests_received_total": st.received,
        "trtspec_requests_ended_total": {k: st.ended.get(k, 0) for k in OUTCOMES},
        "trtspec_request_errors_total": {k: st.errors.get(k, 0) for k in ERROR_KINDS},
        "trtspec_steps_total": st.steps,
        "trtspec_sequence_steps_total": tot.sequence_steps,
        "trtspec_draft_tokens_total": tot.drafted,
        "trtspec_accepted_tokens_total": tot.accepted,
        "trtspec_output_tokens_total": tot.emitted,
        "trtspec_draft_budget": draft_budgets(s.decoder),
    }


def draft_budgets(decoder: Any) -> dict[str, float]:
    """{batch size: node budget} for every batch size the engine runs (the whole draft where nothing caps it; {}
    without a drafter)."""
    if decoder.drafter is None:
        return {}
    full = decoder.drafter.max_nodes
    out = {}
    for b in range(1, decoder.engine.max_batch_size + 1):
        n = decoder.schedule.budget(b)
        out[str(b)] = float(full if n is None else min(n, full))
    return out


def spec_decoder_observations(s: Scheduler) -> dict[str, list[float]]:
    """The histogram values recorded since the last call (taken out of the scheduler's queues)."""
    return {"trtspec_tau": _drain(s.stats.taus), "trtspec_step_seconds": _drain(s.stats.step_seconds)}


def _drain(q: Any) -> list[float]:
    out = []
    while True:
        try:
            out.append(float(q.popleft()))
        except IndexError:
            return out


class Exporter:
    """Publishes `read()` and `observe()` to Triton every `interval_s` from its own thread.

    `pb` is `triton_python_backend_utils`. `eager`: every series is created (at 0) at construction, in the
    model's initialize; otherwise a series is created when it first moves from 0 (the front model: no IPC
    at all while nothing happens, so none that could race a server that exits during the load). Families
    live as long as the model (their deletion is an IPC message too).
    """

    def __init__(
        self,
        pb: Any,
        families: tuple[Family, ...],
        labels: Mapping[str, str],
        read: Callable[[], Values],
        observe: Callable[[], Observations] = dict,
        interval_s: float = 0.25,
        log: Callable[[str], None] = lambda _m: None,
        eager: bool = True,
    ) -> None:
        self.pb, self.read, self.observe, self.interval_s, self.log = pb, read, observe, interval_s, log
        self.labels = {**labels, "pid": str(os.getpid())}
        self.families = {f.name: f for f in families}
        self._kinds = {
            "counter": pb.MetricFamily.COUNTER,
            "gauge": pb.MetricFamily.GAUGE,
            "histogram": pb.MetricFamily.HISTOGRAM,
        }
        self._pb_families: dict[str, Any] = {}
        self._metrics: dict[tuple[str, str], Any] = {}
        self._last: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._closed, self._eager = False, eager
        self._thread: threading.Thread | None = None
        self.flush()

    def start(self) -> "Exporter":
        self._thread = threading.Thread(target=self._run, name="trtspec-metrics", daemon=True)
        self._thread.start()
        return self

    def _metric(self, name: str, label_value: str) -> Any:
        key = (name, label_value)
        m = self._metrics.get(key)
        if m is None:
            f = self.families[name]
            if name not in self._pb_families:
                self._pb_families[name] = self.pb.MetricFamily(
                    name=f.name, description=f.help, kind=self._kinds[f.kind]
                )
            labels = dict(self.labels, **({f.label: label_value} if f.label else {}))
            m = self._pb_families[name].Metric(labels=labels, buckets=list(f.buckets) if f.buckets else None)
            self._metrics[key] = m
        return m

    def flush(self) -> None:
        """Observations, then counters, then gauges: a scrape that sees the gauges settle sees the rest too."""
        with self._lock:
            if self._closed:
                return
            for name, values in self.observe().items():
                m = self._metric(name, "")
                for v in values:
                    m.observe(v)
            values = self.read()
            for kind in ("counter", "gauge"):
                for name, value in values.items():
                    if self.families[name].kind == kind:
                        self._publish(name, kind, value)
            for f in self.families.values():  # histograms exist before their first observation
                if f.kind == "histogram" and self._eager:
                    self._metric(f.name, "")

    def _publish(self, name: str, kind: str, value: Any) -> None:
        items = value.items() if isinstance(value, Mapping) else [("", value)]
        for lv, v in items:
            key, v = (name, lv), float(v)
            last = self._last.get(key)
            if last is None and v == 0 and not self._eager:
                self._last[key] = 0.0  # created when it first moves
                continue
            if kind == "counter" and (last is None or v > last):
                self._metric(name, lv).increment(v - (last or 0.0))
                self._last[key] = v
            elif kind == "gauge" and v != last:
                self._metric(name, lv).set(v)
                self._last[key] = v

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.flush()
            except Exception:  # metrics must never take the model down
                self.log(f"metrics: export failed:\n{traceback.format_exc(limit=3)}")

    def close(self, flush: bool = True) -> None:
        """Stop the thread; a last flush unless `flush` is False (from `finalize`: no IPC any more)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)
        if flush:
            try:
                self.flush()
            except Exception:
                pass
        with self._lock:
            self._closed = True  # no metric is sent after this
