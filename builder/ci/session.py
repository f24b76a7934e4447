"""One `trtspec ci` run: every entry in order, then the gates, then publishing; the JSON summary.

Problems with the run's own inputs (the matrix, the baseline's recipe set, the publish target) are
UserErrors raised by the caller before anything is built. Problems of an entry are that entry's status;
a publish that fails half-way (the target was reachable at the start) is recorded in the summary, and the
index, written last, still names only what was completely uploaded before.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from builder.ci.gates import apply_gates, recipe_set
from builder.ci.matrix import RunSpec
from builder.ci.publish import Target, publish
from builder.ci.report import summary
from builder.ci.runner import run_entry
from builder.errors import UserError

Progress = Callable[[str, str], None]  # (entry id, message)


def run(
    spec: RunSpec,
    cache_dir: Path,
    *,
    baseline: dict[str, Any] | None = None,
    baseline_path: str | None = None,
    target: Target | None = None,
    progress: Progress = lambda _e, _m: None,
) -> dict[str, Any]:
    """Build and check every entry, gate against `baseline`, publish to `target`; the summary document."""
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    entries: list[dict[str, Any]] = []
    memo: dict[str, Any] = {}
    for entry in spec.entries:
        progress(entry.id, "start")
        res = run_entry(entry, cache_dir, spec.checks, _say(progress, entry.id), memo)
        entries.append(res.as_json())
        progress(entry.id, f"{res.status}{': ' + res.reason if res.reason else ''} ({time.perf_counter() - t0:.1f} s)")
    if baseline is not None:
        apply_gates(entries, baseline, spec.gates)
    doc = summary(
        recipe_set(spec),
        entries,
        started=started,
        wall_s=time.perf_counter() - t0,
        cache_dir=str(cache_dir),
        gates=spec.gates.model_dump(),
        checks=spec.checks.model_dump(),
        baseline=baseline_path,
    )
    if target is not None:
        try:
            doc["publish"] = publish(target, entries, say=lambda m: progress("publish", m))
        except (UserError, OSError) as exc:
            doc["publish"] = {"target": target.uri, "error": str(exc).splitlines()[0]}
        except Exception as exc:  # an object store's own error types
            doc["publish"] = {"target": target.uri, "error": f"{type(exc).__name__}: {exc}"}
    doc["wall_s"] = round(time.perf_counter() - t0, 3)
    return doc


def _say(progress: Progress, entry: str) -> Callable[[str], None]:
    return lambda message: progress(entry, message)


def exit_code(doc: dict[str, Any]) -> int:
    """0: every entry passed or needs a GPU host; 1: an entry failed (build, check or gate) or publishing did."""
    failed = doc["counts"]["failed"] > 0 or bool((doc.get("publish") or {}).get("error"))
    return 1 if failed else 0
