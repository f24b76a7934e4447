"""`trtspec bench` outputs from its results: bench.json, bench.csv, PNG plots, report.md, the printed table.

    write_outputs(folder, results)     # into a folder the caller renames into place (atomic)

Ratios are always speculative / baseline at the same concurrency, computed here from the levels'
numbers (`comparison`), so report.md and the JSON can be checked against each other. Where a level carries
the server's own view (`server`: `builder.bench.serve_metrics.server_delta` of two scrapes of Triton's
metrics port around the perf_analyzer run), report.md shows it beside perf_analyzer's figures.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from builder.timing import markdown_table

CSV_COLUMNS = (
    "concurrency",
    "mode",
    "output_tokens_per_s",
    "requests_per_s",
    "latency_p50_ms",
    "latency_p99_ms",
    "ttft_p50_ms",
    "ttft_mean_ms",
    "itl_mean_ms",
    "tau",
    "responses_per_request",
    "measured_requests",
    "token_counts_ok",
    "failed_requests",
    "errors",
    "pa_latency_p50_ms",
    "export_requests_per_s",
    "csv",
)
PLOTS = {  # file -> (title, y label, [(metric, label suffix)])
    "throughput.png": ("Output tokens/s vs concurrency", "output tokens/s", [("output_tokens_per_s", "")]),
    "latency.png": ("Request latency", "ms", [("latency_p50_ms", " p50"), ("latency_p99_ms", " p99")]),
    "ttft.png": ("Time to first token", "ms", [("ttft_p50_ms", " p50"), ("ttft_mean_ms", " mean")]),
    "itl.png": ("Inter-token latency (mean per token after the first response)", "ms", [("itl_mean_ms", "")]),
    "tau.png": ("τ: tokens per target step", "tokens / step", [("tau", "")]),
}


def level(results: dict[str, Any], concurrency: int, mode: str) -> dict[str, Any]:
    for r in results["levels"]:
        if r["concurrency"] == concurrency and r["mode"] == mode:
            return r
    raise KeyError((concurrency, mode))


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def comparison(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Per concurrency: both modes' key numbers and the ratios speculative / baseline."""
    out = []
    for c in results["settings"]["concurrency"]:
        s, b = level(results, c, "speculative"), level(results, c, "baseline")
        out.append(
            {
                "concurrency": c,
                "spec_tokens_per_s": s["output_tokens_per_s"],
                "base_tokens_per_s": b["output_tokens_per_s"],
                "throughput_ratio": _ratio(s["output_tokens_per_s"], b["output_tokens_per_s"]),
                "spec_latency_p50_ms": s["latency_p50_ms"],
                "base_latency_p50_ms": b["latency_p50_ms"],
                "latency_p50_ratio": _ratio(s["latency_p50_ms"], b["latency_p50_ms"]),
                "spec_latency_p99_ms": s["latency_p99_ms"],
                "base_latency_p99_ms": b["latency_p99_ms"],
                "spec_ttft_p50_ms": s["ttft_p50_ms"],
                "base_ttft_p50_ms": b["ttft_p50_ms"],
                "ttft_ratio": _ratio(s["ttft_p50_ms"], b["ttft_p50_ms"]),
                "spec_itl_ms": s["itl_mean_ms"],
                "base_itl_ms": b["itl_mean_ms"],
                "itl_ratio": _ratio(s["itl_mean_ms"], b["itl_mean_ms"]),
                "spec_tau": s["tau"],
                "base_tau": b["tau"],
                "draft_budget": s.get("draft_budget"),
            }
        )
    return out


def _f(v: Any, digits: int = 1) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def table_lines(results: dict[str, Any]) -> list[str]:
    """The markdown comparison table (also what the command prints)."""
    header = (
        "conc.",
        "tokens/s spec",
        "tokens/s base",
        "**spec/base**",
        "p50 ms spec / base",
        "p99 ms spec / base",
        "TTFT p50 ms spec / base",
        "ITL ms spec / base",
        "τ spec / base",
        "draft nodes",
    )
    rows = [
        (
            r["concurrency"],
            _f(r["spec_tokens_per_s"]),
            _f(r["base_tokens_per_s"]),
            f"**{_f(r['throughput_ratio'], 2)}×**",
            f"{_f(r['spec_latency_p50_ms'])} / {_f(r['base_latency_p50_ms'])}",
            f"{_f(r['spec_latency_p99_ms'])} / {_f(r['base_latency_p99_ms'])}",
            f"{_f(r['spec_ttft_p50_ms'])} / {_f(r['base_ttft_p50_ms'])}",
            f"{_f(r['spec_itl_ms'], 3)} / {_f(r['base_itl_ms'], 3)}",
            f"{_f(r['spec_tau'], 2)} / {_f(r['base_tau'], 2)}",
            "–" if r.get("draft_budget") is None else str(r["draft_budget"]),
        )
        for r in comparison(results)
    ]
    return markdown_table(header, rows, "r" * len(header))


def _detail_lines(results: dict[str, Any]) -> list[str]:
    header = (
        "conc.",
        "mode",
        "req/s",
        "tokens/s",
        "tokens/s per run",
        "measured requests",
        "tokens ok",
        "failed",
        "perf_analyzer p50 ms",
        "export req/s",
        "responses / request",
        "CSV",
    )
    rows = [
        (
            r["concurrency"],
            r["mode"],
            _f(r["requests_per_s"], 2),
            _f(r["output_tokens_per_s"]),
            ", ".join(_f(x["output_tokens_per_s"]) for x in r.get("runs") or [r]),
            r["measured_requests"],
            "yes" if r["token_counts_ok"] else "NO " + str(r["wrong_token_counts"]),
            r["failed_requests"],
            _f(r["pa_latency_p50_ms"]),
            _f(r.get("export_requests_per_s"), 2),
            _f(r["responses_per_request"]),
            f"`{r['csv']}`",
        )
        for r in results["levels"]
    ]
    return markdown_table(header, rows, "rlrrlrlrrrrl")


def server_lines(results: dict[str, Any]) -> list[str]:
    """The server's own counters per run (spec_decoder's Triton metrics), when the levels carry them."""
    rows = [r for r in results["levels"] if r.get("server")]
    if not rows:
        return []
    lines = [
        "",
        "## the server's view (spec_decoder's Triton metrics over each run)",
        "",
        "Requests and tokens counted by spec_decoder itself over the whole perf_analyzer run (its warm-up included); τ over "
        "all its steps = (accepted + sequence steps) / sequence steps; mean batch = sequences per target step; "
        "step = mean wall time of a batched step (draft + target + commit).",
        "",
    ]
    header = (
        "conc.",
        "mode",
        "requests",
        "output tokens",
        "target steps",
        "mean batch",
        "step ms",
        "τ (server)",
        "τ (perf_analyzer's requests)",
        "errors",
    )
    cells = [
        (
            r["concurrency"],
            r["mode"],
            int(v["requests"]),
            int(v["output_tokens"]),
            int(v["steps"]),
            _f(v.get("mean_batch"), 2),
            _f(v.get("step_ms_mean"), 2),
            _f(v.get("tau"), 2),
            _f(r.get("tau"), 2),
            ", ".join(f"{k} {int(n)}" for k, n in (v.get("errors") or {}).items() if n) or "0",
        )
        for r, v in ((r, r["server"]) for r in rows)
    ]
    return lines + markdown_table(header, cells, "rlrrrrrrrl")


def _genai_lines(results: dict[str, Any]) -> list[str]:
    rows = results.get("genai_perf") or []
    if not rows:
        return []
    lines = [
        "",
        "## genai-perf (same server, same prompts, HTTP generate_stream)",
        "",
        "genai-perf counts output tokens by re-tokenizing the streamed text, so its token numbers can "
        "differ slightly from spec_decoder's counts above.",
        "",
    ]
    header = (
        "conc.",
        "mode",
        "output tokens/s",
        "req/s",
        "request latency p50 / p99 ms",
        "TTFT p50 ms",
        "ITL mean ms",
        "output len mean",
    )
    cells = [
        (
            g["concurrency"],
            g["mode"],
            _f(g.get("output_token_throughput")),
            _f(g.get("request_throughput"), 2),
            f"{_f(g.get('request_latency_p50_ms'))} / {_f(g.get('request_latency_p99_ms'))}",
            _f(g.get("ttft_p50_ms")),
            _f(g.get("itl_mean_ms"), 3),
            _f(g.get("output_sequence_length")),
        )
        for g in rows
    ]
    return lines + markdown_table(header, cells, "rlrrrrrr")


def _busy_lines(m: dict[str, Any]) -> list[str]:
    busy = [(when, p) for when in ("before", "after") for p in m.get(f"busy_{when}") or []]
    if not busy:
        return []
    return [
        "",
        "**Other processes were busy on this machine** (their CPU time competes with the server and the "
        "client; both modes share the disturbance, since they alternate, but absolute numbers are lower): "
        + "; ".join(f"{when}: {p['name']} (pid {p['pid']}, {p['cpu_percent']} % CPU)" for when, p in busy)
        + ".",
    ]


def report_md(results: dict[str, Any], title: str) -> str:
    s, m, v = results["settings"], results["machine"], results["versions"]
    p = results["prompts"]
    probes = results["probes"]
    lines = [
        f"# trtspec bench: {title}",
        "",
        f"Model `{results['model']}` served by tritonserver {v.get('tritonserver')} on loopback; perf_analyzer "
        f"(gRPC streaming, time windows of {s['window_ms']} ms, stability {s['stability_percentage']} %, at most "
        f"{s['max_trials']} windows; {s.get('repeats', 1)} run(s) per level and mode, throughputs averaged). Both modes run on the same engine in the same server: `speculative` = the "
        "recipe's drafter, `baseline` = the per-request input `speculate: false` (plain decoding). The modes "
        "alternate per concurrency level. Every request sets the request parameter `ignore_eos`, so it generates "
        f"exactly {s['output_len']} tokens (checked on every measured request: spec_decoder's `output_tokens`), and "
        "output tokens/s = requests/s × output_len.",
        "",
        f"Engine: {results.get('engine', {}).get('label') or '?'} drafter, max batch "
        f"{results.get('engine', {}).get('max_batch_size')}; draft budget per step: "
        + (
            f"the pinned schedule {results['draft_schedule']}"
            if results.get("draft_schedule")
            else 'the engine\'s measured rule (column "draft nodes": tree nodes per sequence, root included, at '
            "that concurrency; 1 = no draft)"
        )
        + (f"; recipe overrides {' '.join(results['overrides'])}" if results.get("overrides") else "")
        + ". "
        f"Prompts: {p['count']} from `{s['prompt_source']}`, {p['tokens_min']}–{p['tokens_max']} tokens "
        f"(asked {s['input_len']}); output_len {s['output_len']}. Machine: {m.get('cpu') or m.get('platform')}, "
        f"{m.get('cpus_usable')} usable CPUs, load average {', '.join(f'{x:.2f}' for x in m.get('loadavg', []))} "
        "before the run.",
        *_busy_lines(m),
        "",
        "## speculative vs baseline",
        "",
        *table_lines(results),
        "",
        "spec/base = output tokens/s ratio. Latency = last streamed response − send (perf_analyzer's own p50, in "
        "the table below, agrees); TTFT = first response − send; "
        "ITL = (last − first response) / tokens after the first response, averaged over requests; τ = tokens per "
        "target step from spec_decoder's counters (Σ(accepted + steps) / Σ steps over the measured requests).",
        "",
        f"Probe requests before the sweep: τ speculative {_f(probes.get('speculative', {}).get('tau'), 2)}, "
        f"baseline {_f(probes.get('baseline', {}).get('tau'), 2)}; token counts "
        f"{'all = output_len' if all(x.get('token_counts_ok') for x in probes.values()) else 'WRONG'}.",
        "",
        "## every run",
        "",
        *_detail_lines(results),
        *server_lines(results),
        *_genai_lines(results),
        "",
        "## plots",
        "",
        *[f"![{t}]({name})" for name, (t, _, _) in PLOTS.items()],
        "",
        "Raw perf_analyzer CSVs, profile exports (gzipped) and logs are in `raw/`; all numbers in `bench.json`.",
    ]
    return "\n".join(lines) + "\n"


def write_csv(path: Path, results: dict[str, Any]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(CSV_COLUMNS), extrasaction="ignore")
        w.writeheader()
        for r in results["levels"]:
            w.writerow({k: r.get(k) for k in CSV_COLUMNS})


def write_plots(folder: Path, results: dict[str, Any]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = results["settings"]["concurrency"]
    written = []
    for name, (title, ylabel, series) in PLOTS.items():
        fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
        for mode, style in (("speculative", "-o"), ("baseline", "--s")):
            for metric, suffix in series:
                got = [level(results, c, mode).get(metric) for c in levels]
                ys = [float("nan") if y is None else float(y) for y in got]
                ax.plot(levels, ys, style, label=f"{mode}{suffix}")
        ax.set_title(title)
        ax.set_xlabel("concurrency")
        ax.set_ylabel(ylabel)
        ax.set_xticks(levels)
        ax.grid(True, alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(folder / name)
        plt.close(fig)
        written.append(name)
    return written


def write_outputs(folder: Path, results: dict[str, Any], title: str) -> None:
    """bench.json (with the comparison), bench.csv, the plots and report.md into `folder`."""
    results["comparison"] = comparison(results)
    results["plots"] = write_plots(folder, results)
    (folder / "bench.json").write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
    write_csv(folder / "bench.csv", results)
    (folder / "report.md").write_text(report_md(results, title), encoding="utf-8")
