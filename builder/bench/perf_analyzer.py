"""One perf_analyzer run per concurrency level and mode, and the figures of repeated runs combined.

    row, records = run_level(endpoints, model, data, mode, concurrency, settings, raw_dir)
    level = combine([(row, records), ...], output_len)

perf_analyzer (`-i grpc --streaming --async`, time windows; the command from `builder.serve.perf`) runs in its
own process group (`run_tool`: killed with its children on timeout or interruption) and writes its CSV
(requests/s, its own latency percentiles) and a profile export (each request's response timestamps and
spec_decoder's counters), from which `serve_metrics` derives request latency, TTFT, ITL and τ. Triton's model
statistics before and after count the failed requests; spec_decoder's Prometheus counters, scraped before and
after, give the server's own view of the run (`server`).
"""

from __future__ import annotations

import gzip
import json
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from builder import procs
from builder.bench.serve_metrics import RequestRecord, records, summarize
from builder.bench.serve_settings import MODES, REQUEST_PARAMETERS, BenchError, BenchSettings


def _model_stats(http: str, model: str) -> dict[str, int]:
    with urllib.request.urlopen(f"http://{http}/v2/models/{model}/stats", timeout=10) as r:
        s = json.loads(r.read())["model_stats"][0]["inference_stats"]
    return {"success": int(s["success"]["count"]), "fail": int(s["fail"]["count"])}


def run_tool(cmd: list[str], env: dict[str, str], log_path: Path, timeout: float) -> int:
    """Run a client tool in its own process group (killed with its children on timeout or interruption)."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
        )
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise BenchError(f"{Path(cmd[0]).name} ran past {timeout:.0f} s; log {log_path}") from None
        finally:
            if proc.poll() is None:
                procs.signal_group(proc.pid, signal.SIGKILL)
                proc.wait(10)


def log_tail(path: Path, n: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def run_level(
    endpoints: dict[str, str],
    model: str,
    data: Path,
    mode: str,
    concurrency: int,
    s: BenchSettings,
    raw: Path,
    repeat: int = 0,
) -> tuple[dict[str, Any], list[RequestRecord]]:
    """One perf_analyzer run: its CSV and profile export in `raw`; the run's numbers and its measured requests."""
    from builder.serve.perf import perf_command, perf_env, read_perf_csv, read_profile_export

    stem = f"{mode}_c{concurrency}" + (f"_r{repeat + 1}" if s.repeats > 1 else "")
    csv, export, log = raw / f"{stem}.csv", raw / f"{stem}.export.json", raw / f"{stem}.log"
    cmd = perf_command(
        model,
        endpoints["grpc"],
        data,
        concurrency,
        measurement_ms=s.window_ms,
        stability_percentage=s.stability_percentage,
        max_trials=s.max_trials,
        csv=csv,
        profile_export=export,
        request_parameters=dict(REQUEST_PARAMETERS),
    )
    before = _model_stats(endpoints["http"], model)
    metrics_before = _scrape(endpoints)
    timeout = 120 + 3 * (s.max_trials + 1) * s.window_ms / 1000
    code = run_tool(cmd, perf_env(), log, timeout)
    after = _model_stats(endpoints["http"], model)
    server = _server_delta(endpoints, metrics_before)
    if code != 0 or not csv.is_file() or not export.is_file():
        raise BenchError(f"perf_analyzer failed ({mode}, concurrency {concurrency}, exit {code}):\n{log_tail(log)}")
    row = read_perf_csv(csv)[0]
    exp = read_profile_export(export)["experiments"][0]
    export.with_suffix(".json.gz").write_bytes(gzip.compress(export.read_bytes()))
    export.unlink()
    recs = records(exp)
    summary = summarize(recs, s.output_len, exp.get("window_boundaries") or ())
    rps = float(row["Inferences/Second"] or 0.0)
    failed = after["fail"] - before["fail"]
    return {
        "concurrency": concurrency,
        "mode": mode,
        "speculate": MODES[mode],
        "requests_per_s": rps,
        "output_tokens_per_s": rps * s.output_len,
        "responses_per_s": row.get("Response Throughput"),
        "pa_latency_p50_ms": (row.get("p50 latency") or 0) / 1000,
        "pa_latency_p99_ms": (row.get("p99 latency") or 0) / 1000,
        **summary,
        "failed_requests": failed,
        "errors": failed + (0 if summary["token_counts_ok"] else 1),
        "csv": f"raw/{csv.name}",
        "export": f"raw/{export.name}.gz",
        "log": f"raw/{log.name}",
        "command": cmd,
        "server": server,
    }, recs


def _scrape(endpoints: dict[str, str]):
    """The server's Prometheus metrics (spec_decoder's own counters), or None where the endpoint has none."""
    from builder.bench.serve_metrics import scrape

    url = endpoints.get("metrics")
    try:
        return scrape(url) if url else None
    except OSError:
        return None


def _server_delta(endpoints: dict[str, str], before) -> dict[str, Any] | None:
    """What spec_decoder counted over the run (`serve_metrics.server_delta`), after its exporter's next publish."""
    from builder.bench.serve_metrics import server_delta

    if before is None:
        return None
    time.sleep(0.3)  # the Python backend publishes its metrics every 0.25 s
    after = _scrape(endpoints)
    return None if after is None else server_delta(before, after)


def combine(runs: list[tuple[dict[str, Any], list[RequestRecord]]], output_len: int) -> dict[str, Any]:
    """One level and mode over its repeated runs: throughputs averaged, latency/TTFT/ITL/τ over all their
    requests together, failures summed; each run's throughput kept (`runs`) so the spread shows."""
    if len(runs) == 1:
        return runs[0][0]
    rows = [r for r, _ in runs]
    out = dict(rows[0])
    for key in (
        "requests_per_s",
        "output_tokens_per_s",
        "responses_per_s",
        "pa_latency_p50_ms",
        "pa_latency_p99_ms",
        "export_requests_per_s",
    ):
        vals = [r[key] for r in rows if r.get(key) is not None]
        out[key] = sum(vals) / len(vals) if vals else None
    out.update(summarize([x for _, recs in runs for x in recs], output_len))
    out["export_requests_per_s"] = sum(r.get("export_requests_per_s") or 0 for r in rows) / len(rows)
    out["failed_requests"] = sum(r["failed_requests"] for r in rows)
    out["errors"] = out["failed_requests"] + (0 if out["token_counts_ok"] else 1)
    out["runs"] = [
        {k: r[k] for k in ("output_tokens_per_s", "requests_per_s", "latency_p50_ms", "tau", "csv", "export")}
        for r in rows
    ]
    out["server"] = _sum_server([r.get("server") for r in rows])
    return out


def _sum_server(parts: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The server's figures over repeated runs: counts summed, τ and mean batch recomputed from the sums, step
    time weighted by steps, the queue state of the last run."""
    got = [p for p in parts if p]
    if len(got) <= 1:
        return got[0] if got else None
    counts = ("requests", "steps", "sequence_steps", "output_tokens", "drafted", "accepted")
    out: dict[str, Any] = {k: sum(p[k] for p in got) for k in counts}
    for table in ("ended", "errors"):
        out[table] = {}
        for p in got:
            for k, v in (p.get(table) or {}).items():
                out[table][k] = out[table].get(k, 0) + v
    seq, steps = out["sequence_steps"], out["steps"]
    out["tau"] = (out["accepted"] + seq) / seq if seq else None
    out["mean_batch"] = seq / steps if steps else None
    timed = [(p["step_ms_mean"], p["steps"]) for p in got if p.get("step_ms_mean") is not None and p["steps"]]
    out["step_ms_mean"] = sum(v * w for v, w in timed) / sum(w for _, w in timed) if timed else None
    per_request = [(p["request_tau_mean"], p["requests"]) for p in got if p.get("request_tau_mean") is not None]
    out["request_tau_mean"] = (
        sum(v * w for v, w in per_request) / sum(w for _, w in per_request)
        if per_request and sum(w for _, w in per_request)
        else None
    )
    out["queued_after"], out["active_after"] = got[-1].get("queued_after"), got[-1].get("active_after")
    return out
