"""The decode benchmark's report over fixtures: ratios per fixture, one table with a fixture column, and the
memory-bound fixture's per-method speedups beside the seed articles' (the README table's source).

Ratios are within a fixture, never across: each row's tokens/s over the fixture's reference row (wall) —
ours plain (`trtspec-ort none`), HF greedy, ORT GenAI greedy and n-gram — and its tokens per CPU-second
over ours plain's (`cpu_vs_ours_plain`: the robust ratio on a shared machine, where other processes
take wall time but not this process's CPU time). A ratio whose reference row is absent or skipped is None.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from builder.timing import markdown_table

OURS_PLAIN = "trtspec-ort none"
REFS = {
    "vs_ours_plain": OURS_PLAIN,
    "vs_hf_greedy": "hf greedy",
    "vs_ortgenai_greedy": "ortgenai greedy",
    "vs_ortgenai_ngram": "ortgenai n-gram",
}
# The seed articles' measured speedups over plain decoding (Llama 3 70B, 8×H100), by speculative.method.
SEEDS = {"eagle": 2.45, "medusa": 1.93, "lookahead": 1.44}
SEED_SOURCE = "seed articles (Llama 3 70B, 8×H100)"
SEED_NAMES = {"eagle": "EAGLE", "medusa": "Medusa", "lookahead": "Lookahead"}
MEMORY_BOUND_X_LLC = 4.0  # a fixture whose step reads ≥ 4× the last-level cache (regime.json "budget")


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """The ratios of the module docstring, in place, over one fixture's rows."""
    timed = [r for r in rows if "tokens_per_s" in r]
    for key, ref_key in REFS.items():
        ref = next((r for r in timed if r.get("key") == ref_key), None)
        for r in timed:
            r[key] = _ratio(r["tokens_per_s"], ref["tokens_per_s"]) if ref else None
    plain = next((r for r in timed if r.get("key") == OURS_PLAIN), None)
    for r in timed:
        cpu, ref = r.get("tokens_per_cpu_s"), plain and plain.get("tokens_per_cpu_s")
        r["cpu_vs_ours_plain"] = _ratio(cpu, ref) if cpu and ref else None


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


def memory_bound(checkpoint: str | Path) -> bool:
    """Whether the fixture's regime.json (beside its checkpoint) says a step reads ≥ 4× the last-level cache."""
    try:
        budget = json.loads((Path(checkpoint).parent / "regime.json").read_text())["budget"]
    except (OSError, ValueError, KeyError):
        return False
    return float(budget.get("target_x_llc", 0)) >= MEMORY_BOUND_X_LLC


def combine(reports: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One report over several fixtures' `bench_decode` reports: rows tagged with their fixture, ratios per
    fixture, and the seed comparison of every memory-bound fixture."""
    first = reports[0]
    settings = {
        k: first[k]
        for k in ("prompts", "max_new_tokens", "threads", "torch_threads", "machine", "cpus", "versions")
        if k in first
    }
    fixtures, rows, seeds = [], [], {}
    for rep in reports:
        name = rep["fixture"]
        fixture_rows = [{"fixture": name, **r} for r in rep["rows"]]
        add_ratios(fixture_rows)
        bound = memory_bound(rep["checkpoint"])
        fixtures.append(
            {"fixture": name, "recipe": rep["recipe"], "checkpoint": rep["checkpoint"], "memory_bound": bound}
        )
        rows += fixture_rows
        if bound:
            seeds[name] = seed_rows(fixture_rows)
    return {
        "benchmark": "decode",
        **settings,
        "fixtures": fixtures,
        "rows": rows,
        "seed_source": SEED_SOURCE,
        "seed_speedups": SEEDS,
        "seed_comparison": seeds,
    }


def seed_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Our measured speedups per method (default and tuned trees) beside the seed articles', in the seeds'
    order (EAGLE, Medusa, Lookahead), then n-gram speculation (not in the seed articles), from one fixture's rows
    with ratios."""
    ours = [r for r in rows if r.get("spec_method") in (*SEEDS, "ngram") and "tokens_per_s" in r]
    ours.sort(key=lambda r: -SEEDS.get(r["spec_method"], 0.0))  # stable: row order within a method
    return [
        {
            "method": r["method"],
            "tuned": bool(r.get("tuned")),
            "setting": r.get("setting"),
            "speedup_cpu": r.get("cpu_vs_ours_plain"),
            "speedup_wall": r.get("vs_ours_plain"),
            "tau": r.get("tau"),
            "vs_ortgenai_ngram": r.get("vs_ortgenai_ngram"),
            "matches_hf": r.get("matches_hf"),
            "seed": (
                f"{SEED_NAMES[r['spec_method']]} {SEEDS[r['spec_method']]:.2f}×"
                if r["spec_method"] in SEEDS
                else "– (not measured there)"
            ),
        }
        for r in ours
    ]


# -- text -------------------------------------------------------------------------------------------


def _f(x: Any, fmt: str, suffix: str = "") -> str:
    return "–" if x is None else f"{x:{fmt}}{suffix}"


HEADER = (
    "fixture",
    "method",
    "tokens/s",
    "vs ours plain",
    "vs ORT GenAI greedy",
    "vs ORT GenAI n-gram",
    "tokens/CPU-s",
    "CPU-s ratio vs ours plain",
    "first token ms",
    "µs/token after",
    "τ",
    "draft / target ms per step",
    "verify ms/step (est.)",
    "cpu/wall",
    "busy threads",
    "matches HF",
)


def table(report: dict[str, Any]) -> str:
    """The one table: every fixture's rows, a fixture column, the ratios of the module docstring."""
    names = ", ".join(f["fixture"] + (" (memory-bound)" if f["memory_bound"] else "") for f in report["fixtures"])
    out = [
        f"decode benchmark on {names} — {report['prompts']} prompts × {report['max_new_tokens']} new tokens, "
        f"batch 1, {report['threads']} thread(s) per row (trtspec-ort: 1 ORT thread), stop tokens off; every "
        "row checked token for token against HF greedy; ratios within each fixture",
        "verify ms/step is an ESTIMATE: a standalone decomposed TreeVerify on [1, T, V] logits with the "
        "method's last drafted tree, 1 ORT thread, mean of 200 calls minus an empty call",
        "",
        *markdown_table(HEADER, [_row(r) for r in report["rows"]]),
    ]
    return "\n".join(out)


def _label(r: dict[str, Any]) -> str:
    """A row's method with its tuned setting, if any."""
    return r["method"] + (f" [{r['setting']}]" if r.get("setting") else "")


def _row(r: dict[str, Any]) -> list[str]:
    method = _label(r)
    if "skipped" in r:
        return [r["fixture"], method, f"skipped ({r['skipped']})"] + [""] * (len(HEADER) - 3)
    ms = f"{_f(r.get('draft_ms_per_step'), '.3f')} / {_f(r.get('target_ms_per_step'), '.3f')}"
    return [
        r["fixture"],
        method,
        f"{r['tokens_per_s']:.1f}",
        _f(r.get("vs_ours_plain"), ".2f", "×"),
        _f(r.get("vs_ortgenai_greedy"), ".2f", "×"),
        _f(r.get("vs_ortgenai_ngram"), ".2f", "×"),
        _f(r.get("tokens_per_cpu_s"), ".1f"),
        _f(r.get("cpu_vs_ours_plain"), ".2f", "×"),
        _f(r.get("first_token_ms"), ".2f"),
        _f(r.get("decode_us_per_token"), ".1f"),
        _f(r["tau"], ".2f"),
        ms if "draft_ms_per_step" in r else "–",
        _f(r.get("verify_ms_per_step_est"), ".3f"),
        _f(r.get("cpu_per_wall"), ".2f"),
        _f(r.get("busy_threads"), "d"),
        "yes" if r["matches_hf"] else f"**NO** (prompt {r['first_mismatch_prompt']})",
    ]


SEED_HEADER = (
    "method",
    "ours vs ours plain (tokens/CPU-s)",
    "ours vs ours plain (wall)",
    "τ",
    "vs ORT GenAI n-gram",
    "matches HF",
    "seed articles' speedup",
)


def seed_table(report: dict[str, Any]) -> str:
    """Per memory-bound fixture: our speedup over ours plain per method beside the seed articles'."""
    if not report["seed_comparison"]:
        return "(no memory-bound fixture in this run: no comparison with the seed articles)"
    out = []
    for name, rows in report["seed_comparison"].items():
        out += [
            f"Speedup over ours plain on the memory-bound fixture {name} (this CPU, batch 1, "
            f"{report['prompts']} prompts × {report['max_new_tokens']}) beside the {SEED_SOURCE}",
            "",
            *markdown_table(
                SEED_HEADER,
                [
                    (
                        _label(r),
                        _f(r["speedup_cpu"], ".2f", "×"),
                        _f(r["speedup_wall"], ".2f", "×"),
                        _f(r["tau"], ".2f"),
                        _f(r["vs_ortgenai_ngram"], ".2f", "×"),
                        "yes" if r["matches_hf"] else "**NO**",
                        r["seed"],
                    )
                    for r in rows
                ],
            ),
            "",
        ]
    return "\n".join(out).rstrip()


def markdown(report: dict[str, Any]) -> str:
    return f"{table(report)}\n\n{seed_table(report)}\n"


def write(report: dict[str, Any], json_path: Path, md_path: Path | None = None) -> None:
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(report, indent=2) + "\n")
    if md_path is not None:
        md_path.parent.mkdir(parents=True, exist_ok=True)
        md_path.write_text(markdown(report))
