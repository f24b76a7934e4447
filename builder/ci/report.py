"""What a `trtspec ci` run writes: the JSON summary (also the next run's `--baseline`), JUnit XML and a
markdown table for a CI job summary.

JUnit: one `<testcase>` per entry × check, `classname` = the entry id, `name` = build, lossless,
acceptance, fp8_quality (FP8 recipes) and one per gate (with a baseline); a needs-GPU entry's build and
engine checks are `<skipped>` with the reason, a failure is `<failure message=…>` with the reason.
Every file is written to a temporary name beside its destination and renamed into place.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import builder
from builder.ci.gates import FORMAT, KIND
from builder.timing import markdown_table

MIB = 2**20


def summary(
    spec_set: dict[str, Any],
    entries: list[dict[str, Any]],
    *,
    started: str,
    wall_s: float,
    cache_dir: str,
    gates: dict[str, Any],
    checks: dict[str, Any],
    baseline: str | None,
) -> dict[str, Any]:
    """The JSON summary (the next run's --baseline); `publish` is filled in after publishing."""
    counts = {s: sum(e["status"] == s for e in entries) for s in ("passed", "failed", "needs_gpu")}
    host = {"machine": platform.platform(), "cpus": os.cpu_count(), "commit": os.environ.get("GITHUB_SHA")}
    return {
        "kind": KIND,
        "format": FORMAT,
        "trtspec": builder.__version__,
        "recipe_set": spec_set,
        "started": started,
        "wall_s": round(wall_s, 3),
        "host": host,
        "cache_dir": cache_dir,
        "gates_settings": gates,
        "checks_settings": checks,
        "baseline": baseline,
        "counts": counts,
        "entries": entries,
        "publish": None,
    }


def write_atomic(path: str | Path, text: str) -> None:
    """`text` at `path`, via a temporary file in the same folder and a rename (never half-written)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def to_json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2) + "\n"


def _cases(entry: dict[str, Any]) -> list[tuple[str, str, str, float]]:
    """(name, status, message, seconds) per JUnit test case of one entry."""
    build_status = {"needs_gpu": "skipped"}.get(entry["status"], "passed")
    build_msg = entry["reason"] if entry["status"] == "needs_gpu" else ""
    if entry["status"] == "failed" and not entry["checks"]:  # failed before any check ran: validation or a stage
        build_status, build_msg = "failed", entry["reason"]
    cases = [("build", build_status, build_msg, entry["build_s"])]
    for name, c in entry["checks"].items():
        cases.append((name, c["status"], c["reason"], c.get("seconds") or 0.0))
    for g in entry["gates"]:
        cases.append((f"gate {g['gate']}", g["status"], g["reason"], 0.0))
    return cases


def junit(doc: dict[str, Any]) -> str:
    suite_name = f"trtspec ci ({doc['recipe_set']['name'] or 'recipes'})"
    root = ET.Element("testsuites", name="trtspec ci")
    suite = ET.SubElement(root, "testsuite", name=suite_name, timestamp=doc["started"])
    tests = failures = skipped = 0
    for e in doc["entries"]:
        for name, status, message, seconds in _cases(e):
            case = ET.SubElement(suite, "testcase", classname=e["id"], name=name, time=f"{seconds:.3f}")
            tests += 1
            if status == "failed":
                failures += 1
                ET.SubElement(case, "failure", message=message[:1000]).text = message
            elif status == "skipped":
                skipped += 1
                ET.SubElement(case, "skipped", message=message[:1000])
    if doc.get("publish") and doc["publish"].get("error"):
        case = ET.SubElement(suite, "testcase", classname="publish", name="publish", time="0.000")
        ET.SubElement(case, "failure", message=doc["publish"]["error"][:1000]).text = doc["publish"]["error"]
        tests, failures = tests + 1, failures + 1
    for el in (root, suite):
        el.set("tests", str(tests))
        el.set("failures", str(failures))
        el.set("errors", "0")
        el.set("skipped", str(skipped))
        el.set("time", f"{doc['wall_s']:.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _num(value: Any, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def _pct(fraction: Any) -> str:
    return "–" if fraction is None else f"{100 * fraction:.1f} %"


MARK = {"passed": "✓", "failed": "✗", "skipped": "·"}
STATUS = {"passed": "✅ passed", "failed": "❌ failed", "needs_gpu": "⏭️ needs GPU"}
COLUMNS = (
    "entry",
    "status",
    "stages built",
    "stages cached",
    "time (build + checks)",
    "engine",
    "checks",
    "τ (method)",
    "tokens/CPU-s (× plain)",
    "FP8 Δppl",
    "FP8 agreement",
    "gates",
)


def _row(e: dict[str, Any]) -> list[str]:
    built = ", ".join(s["stage"] for s in e["stages"] if s["status"] == "built") or "–"
    cached = ", ".join(s["stage"] for s in e["stages"] if s["status"] == "cached") or "–"
    size = next((s["bytes"] for s in e["stages"] if s["stage"] == "engine"), None)
    checks_s = sum(c.get("seconds") or 0.0 for c in e["checks"].values())
    acc, fp8 = e["checks"].get("acceptance", {}), e["checks"].get("fp8_quality", {})
    tau = "–" if acc.get("tau") is None else f"{acc['tau']:.2f} ({acc['method']})"
    tps = ((acc.get("rows") or {}).get("method") or {}).get("tokens_per_cpu_s")
    speed = "–" if tps is None else f"{tps:.0f} ({_num(acc.get('speed_ratio'), '.2f')}×)"
    checks = " ".join(f"{k} {MARK[c['status']]}" for k, c in e["checks"].items()) or "–"
    gates = ", ".join(f"{g['gate']} {MARK[g['status']]}" for g in e["gates"]) or "–"
    cells = [
        f"`{e['id']}`",
        STATUS[e["status"]],
        built,
        cached,
        f"{e['build_s']:.1f} + {checks_s:.1f} s",
        "–" if size is None else f"{size / MIB:.1f} MiB",
        checks,
        tau,
        speed,
        _num(fp8.get("delta_ppl"), "+.3f"),
        _pct(fp8.get("token_agreement")),
        gates,
    ]
    return [_cell(c) for c in cells]


def _publish_line(pub: dict[str, Any]) -> str:
    if pub.get("error"):
        return f"**Published** to `{pub['target']}`: failed: {_cell(pub['error'])}"
    return (
        f"**Published** to `{pub['target']}`: {pub['stages']} stages, {pub['uploaded']} files uploaded "
        f"({pub['uploaded_bytes'] / MIB:.1f} MiB), {pub['skipped']} already there; index `{pub['index']}`"
    )


def markdown(doc: dict[str, Any]) -> str:
    c = doc["counts"]
    name = doc["recipe_set"]["name"] or "recipes named on the command line"
    base = f"baseline `{doc['baseline']}`" if doc["baseline"] else "no baseline"
    lines = [
        f"## trtspec ci: {name}",
        "",
        f"{c['passed']} passed, {c['failed']} failed, {c['needs_gpu']} need a GPU host · {doc['wall_s']:.1f} s · "
        f"trtspec {doc['trtspec']} · {base}",
        "",
        *markdown_table(COLUMNS, [_row(e) for e in doc["entries"]]),
    ]
    failed = [e for e in doc["entries"] if e["status"] == "failed"]
    if failed:
        lines += ["", "**Failed**", ""] + [f"- `{_cell(e['id'])}`: {_cell(e['reason'])}" for e in failed]
    gpu = [e for e in doc["entries"] if e["status"] == "needs_gpu"]
    if gpu:
        lines += ["", "**Needs a GPU host** (built and cached up to the stage named)", ""]
        lines += [f"- `{_cell(e['id'])}`: stopped at {e['stopped_at']}" for e in gpu]
    if doc.get("publish"):
        lines += ["", _publish_line(doc["publish"])]
    return "\n".join(lines) + "\n"
