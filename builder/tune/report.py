"""The `trtspec tune` report as text: the pick beside the current setting, predicted and measured speedups."""

from __future__ import annotations

from typing import Any

from builder.timing import markdown_table

_SETTING_KEYS = (
    "depth",
    "top_k",
    "total_nodes",
    "window",
    "ngram",
    "verification_set",
    "max_draft",
    "max_match",
    "min_match",
    "candidates",
    "shared_pool",
)


def describe(row: dict[str, Any]) -> str:
    """A setting in one phrase: a tree's size and depth, EAGLE-2's or Lookahead's numbers."""
    if "choices" in row:
        choices = row["choices"]
        return f"{len(choices)}-node tree, depth {max((len(c) for c in choices), default=0)}"
    parts = [f"{k}={row[k]}" for k in _SETTING_KEYS if k in row]
    return ", ".join(parts) or ("speculation off" if row.get("off") else "–")


def markdown(report: dict[str, Any]) -> str:
    if "note" in report and "pick" not in report:
        return f"{report['recipe']}: {report['note']}"
    cost, cal = report["cost"], report["calibration"]
    gpu = cost["about"].get("gpu")
    what = "measured on this host" if cost["source"] == "measured" else f"PREDICTED: roofline of {gpu}"
    lines = [
        f"{report['recipe']} ({report['method']}): cost {what}, plain step {cost['plain_ms']:.4g} ms, trees up to "
        f"{cost['max_nodes']} nodes; acceptance from {cal['prompts']} calibration prompts ({cal['source']}) × "
        f"{cal['max_new_tokens']} tokens",
        "",
    ]
    measured = {r["row"]: r for r in report.get("measured", {}).get("rows", [])}
    rows = []
    for name, key in (("current", "current"), ("tuned (pick)", "pick")):
        r, m = report[key], measured.get("current" if key == "current" else "tuned")
        got = (f"{m['speedup']:.2f}×", f"{m['tau']:.2f}") if m else ("–", "–")
        what = describe(r)
        b1 = report.get("tuned_batch1", r) if key == "pick" else r
        if b1["nodes"] != r["nodes"]:  # the pick's own draft schedule cuts it at batch 1
            what += f"; its schedule at batch 1: {'off' if b1['nodes'] == 1 else str(b1['nodes']) + ' nodes'}"
            r = b1
        rows.append(
            (f"{name}: {what}", r["nodes"], f"{r['tau']:.2f}", f"{r['cost_ms']:.4g}", f"{r['speedup']:.2f}×", *got)
        )
    if "plain" in measured:
        plain = f"1.00× ({measured['plain']['tokens_per_s']:.0f} tok/s)"
        rows.append(("plain", 1, "1.00", f"{cost['plain_ms']:.4g}", "1.00×", plain, "1.00"))
    header = ("setting", "nodes", "E[τ]", "c ms/step", "predicted × plain", "measured × plain", "measured τ")
    lines += markdown_table(header, rows)
    sched = report["draft_schedule"] or "[] (the full draft at every batch size)"
    note = f" ({report['draft_schedule_note']})" if "draft_schedule_note" in report else ""
    lines += ["", f"draft schedule [[max_batch, max_nodes], …]: {sched}{note}"]
    m = report.get("measured", {})
    if "rows" in m:
        lines.append(
            f"measured: {m['prompts']}, {m['max_new_tokens']} new tokens, {m['threads']} thread(s), one run "
            f"(rows alternating); tokens equal across rows: {m['tokens_equal']}"
        )
    elif "note" in m:
        lines.append(f"measured: {m['note']}")
    return "\n".join(lines)
