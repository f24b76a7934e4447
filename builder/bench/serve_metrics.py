"""Per-request serving metrics from a perf_analyzer profile export, and the server's own metrics (pure functions).

perf_analyzer 2.51 reports, for a decoupled model, latencies to the *first* response only. The
profile export (`--profile-export-file`) holds every request of the measurement windows with the
timestamp of each streamed response and its output tensors, which is all the rest needs:

    request latency   last response − send time (p50, p99, mean)
    TTFT              first response − send time (time to first token)
    ITL               (last − first response) / (tokens − tokens in the first response), per request,
                      then averaged: mean time per generated token after the first response (the same
                      definition as genai-perf's inter_token_latency, with the server's token counts)
    τ                 acceptance length = tokens emitted per target step, from spec_decoder's counters
                      in each request's final response: Σ (accepted + steps) / Σ steps (plain = 1)
    output tokens     spec_decoder's `output_tokens` in the final response (checked == output_len)

The server's own view comes from Triton's metrics port (`triton_repo.metrics`: spec_decoder's counters
and histograms): `parse_prometheus` reads a scrape, `server_delta` turns two scrapes around a run into
what spec_decoder did in it (requests, steps, tokens, τ over all steps, mean batch and step time, errors).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

NS_PER_MS = 1e6


@dataclass(frozen=True)
class RequestRecord:
    """One measured request."""

    sent_ns: int
    response_ns: tuple[int, ...]  # every streamed response, in arrival order
    output_tokens: int  # spec_decoder's count in the final response
    first_tokens: int  # tokens the first response carried
    steps: int  # target steps after prefill
    accepted: int  # draft tokens the target accepted

    @property
    def latency_ms(self) -> float:
        return (self.response_ns[-1] - self.sent_ns) / NS_PER_MS

    @property
    def ttft_ms(self) -> float:
        return (self.response_ns[0] - self.sent_ns) / NS_PER_MS

    @property
    def itl_ms(self) -> float | None:
        later = self.output_tokens - self.first_tokens
        return None if later <= 0 else (self.response_ns[-1] - self.response_ns[0]) / NS_PER_MS / later


def _int(out: dict[str, Any], name: str) -> int | None:
    v = out.get(name)
    if isinstance(v, list):  # some exports wrap scalars in a list
        v = v[0] if v else None
    return None if v is None else int(v)


def records(experiment: dict[str, Any]) -> list[RequestRecord]:
    """The requests of one profile-export experiment that got at least one response with counters."""
    out = []
    for r in experiment["requests"]:
        stamps, outputs = r.get("response_timestamps") or [], r.get("response_outputs") or []
        counted = [
            (t, o) for t, o in zip(stamps, outputs) if isinstance(o, dict) and _int(o, "output_tokens") is not None
        ]
        if not counted:
            continue
        first, last = counted[0][1], counted[-1][1]
        out.append(
            RequestRecord(
                int(r["timestamp"]),
                tuple(int(t) for t, _ in counted),
                _int(last, "output_tokens") or 0,
                _int(first, "output_tokens") or 0,
                _int(last, "steps") or 0,
                _int(last, "accepted_tokens") or 0,
            )
        )
    return out


def tau(recs: Sequence[RequestRecord]) -> float | None:
    """Acceptance length over the requests: Σ (accepted + steps) / Σ steps; None without steps."""
    steps = sum(r.steps for r in recs)
    return None if steps == 0 else (sum(r.accepted for r in recs) + steps) / steps


def _pct(values: Sequence[float], q: float) -> float | None:
    return None if not values else float(np.percentile(np.asarray(values, dtype=np.float64), q))


def _mean(values: Sequence[float]) -> float | None:
    return None if not values else float(np.mean(np.asarray(values, dtype=np.float64)))


def summarize(recs: Sequence[RequestRecord], output_len: int, window_ns: Sequence[int] = ()) -> dict[str, Any]:
    """Latency, TTFT, ITL, τ and the token-count check over the measured requests.

    `window_ns`: the export's window boundaries; with them, `export_requests_per_s` = requests sent
    inside the windows / their span (a cross-check of perf_analyzer's own throughput)."""
    lat = [r.latency_ms for r in recs]
    ttft = [r.ttft_ms for r in recs]
    itl = [x for x in (r.itl_ms for r in recs) if x is not None]
    wrong = sorted({r.output_tokens for r in recs if r.output_tokens != output_len})
    out: dict[str, Any] = {
        "measured_requests": len(recs),
        "token_counts_ok": not wrong and bool(recs),
        "wrong_token_counts": wrong,
        "latency_p50_ms": _pct(lat, 50),
        "latency_p99_ms": _pct(lat, 99),
        "latency_mean_ms": _mean(lat),
        "ttft_p50_ms": _pct(ttft, 50),
        "ttft_p99_ms": _pct(ttft, 99),
        "ttft_mean_ms": _mean(ttft),
        "itl_mean_ms": _mean(itl),
        "itl_p50_ms": _pct(itl, 50),
        "responses_per_request": _mean([len(r.response_ns) for r in recs]),
        "tau": tau(recs),
    }
    if len(window_ns) >= 2:
        lo, hi = int(window_ns[0]), int(window_ns[-1])
        inside = sum(1 for r in recs if lo <= r.sent_ns < hi)
        out["export_requests_per_s"] = inside / ((hi - lo) / 1e9) if hi > lo else None
    return out


# -- the server's own metrics (Triton's /metrics: Prometheus text) ---------------------------------------

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]  # (sample name, sorted labels) -> value


def parse_prometheus(text: str) -> Series:
    """Samples of a Prometheus text exposition (what Triton's metrics port serves); comments skipped."""
    out: Series = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, labels = head, ()
        if "{" in head:
            name, rest = head.split("{", 1)
            labels = tuple(sorted(_labels(rest.rsplit("}", 1)[0])))
        try:
            out[(name, labels)] = float(value)
        except ValueError:
            continue
    return out


def _labels(body: str) -> list[tuple[str, str]]:
    out, i = [], 0
    while i < len(body):
        eq = body.index("=", i)
        key = body[i:eq].strip().lstrip(",").strip()
        j, val = eq + 2, []  # after ="
        while body[j] != '"':
            if body[j] == "\\":
                j += 1
            val.append(body[j])
            j += 1
        out.append((key, "".join(val)))
        i = j + 1
    return out


def total(series: Series, name: str, **match: str) -> float:
    """Σ of a sample over every series whose labels include `match` (e.g. total(s, "x_total", kind="deadline"))."""
    return sum(
        v
        for (n, labels), v in series.items()
        if n == name and all(dict(labels).get(k) == want for k, want in match.items())
    )


SERVER_COUNTERS = (
    "trtspec_requests_received_total",
    "trtspec_steps_total",
    "trtspec_sequence_steps_total",
    "trtspec_draft_tokens_total",
    "trtspec_accepted_tokens_total",
    "trtspec_output_tokens_total",
    "trtspec_step_seconds_sum",
    "trtspec_step_seconds_count",
    "trtspec_tau_sum",
    "trtspec_tau_count",
)


def server_delta(before: Series, after: Series) -> dict[str, Any]:
    """What spec_decoder did between two scrapes (`triton_repo.metrics` names): its counters' increase, errors by
    kind, ends by outcome, and derived figures — τ over steps, mean step time, mean τ per request."""
    d = {n: total(after, n) - total(before, n) for n in SERVER_COUNTERS}
    kinds = {dict(lb).get("kind") for (n, lb) in after if n == "trtspec_request_errors_total"}
    outcomes = {dict(lb).get("outcome") for (n, lb) in after if n == "trtspec_requests_ended_total"}
    errors = {
        k: total(after, "trtspec_request_errors_total", kind=k) - total(before, "trtspec_request_errors_total", kind=k)
        for k in sorted(kinds - {None})
    }
    ended = {
        k: total(after, "trtspec_requests_ended_total", outcome=k)
        - total(before, "trtspec_requests_ended_total", outcome=k)
        for k in sorted(outcomes - {None})
    }
    seq = d["trtspec_sequence_steps_total"]
    return {
        "requests": d["trtspec_requests_received_total"],
        "ended": ended,
        "errors": errors,
        "steps": d["trtspec_steps_total"],
        "sequence_steps": seq,
        "output_tokens": d["trtspec_output_tokens_total"],
        "drafted": d["trtspec_draft_tokens_total"],
        "accepted": d["trtspec_accepted_tokens_total"],
        "tau": (d["trtspec_accepted_tokens_total"] + seq) / seq if seq else None,
        "mean_batch": seq / d["trtspec_steps_total"] if d["trtspec_steps_total"] else None,
        "step_ms_mean": 1e3 * d["trtspec_step_seconds_sum"] / d["trtspec_step_seconds_count"]
        if d["trtspec_step_seconds_count"]
        else None,
        "request_tau_mean": d["trtspec_tau_sum"] / d["trtspec_tau_count"] if d["trtspec_tau_count"] else None,
        "queued_after": total(after, "trtspec_requests_queued"),
        "active_after": total(after, "trtspec_requests_active"),
    }


def scrape(url: str, timeout: float = 10.0) -> Series:
    """GET a metrics endpoint (e.g. TritonServer.endpoints["metrics"]) and parse it."""
    import urllib.request

    with urllib.request.urlopen(url, timeout=timeout) as r:
        return parse_prometheus(r.read().decode("utf-8", "replace"))
