"""Regression gates: this run's measurements against a baseline run's JSON summary.

A baseline is another `trtspec ci --json` summary of the same recipe set (same matrix name, same entry
ids); anything else is refused up front with one line (exit 2), before anything is built. Entries are
matched by id (`recipe` or `recipe@variant`): `--set` values given on the command line do not change an
id, so a run with `--set speculative.tree=chain_4` is gated against the shipped tree's baseline.

Per entry, where both runs measured it (the thresholds are the current run's `Gates`):

* tau — the recipe's method: τ_now < τ_base · (1 - tau_drop) fails;
* speed — speed_ratio = method tokens/s ÷ plain tokens/s on the same engine in the same run:
  ratio_now < ratio_base · (1 - speed_ratio_drop) fails (absolute speeds are never compared);
* fp8_agreement — FP8 greedy agreement with fp32: agreement_now < agreement_base - fp8_agreement_drop fails.

A gate whose data is missing on either side (a needs-GPU entry, a check that failed) is `skipped`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from builder.ci.matrix import Gates, RunSpec
from builder.errors import UserError

KIND, FORMAT = "trtspec-ci", 1


def load_baseline(path: str | Path) -> dict[str, Any]:
    """A previous run's JSON summary; UserError when it is not one."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"cannot read the baseline: {exc.strerror}", location=str(path), field="--baseline") from None
    except ValueError as exc:
        raise UserError(f"the baseline is not JSON: {exc}", location=str(path), field="--baseline") from None
    if not isinstance(data, dict) or data.get("kind") != KIND or data.get("format") != FORMAT:
        raise UserError(
            f"not a trtspec ci summary of format {FORMAT} (written by `trtspec ci --json`)",
            location=str(path),
            field="--baseline",
        )
    if not isinstance(data.get("entries"), list) or not isinstance(data.get("recipe_set"), dict):
        raise UserError("a trtspec ci summary without entries or recipe_set", location=str(path), field="--baseline")
    return data


def recipe_set(spec: RunSpec) -> dict[str, Any]:
    """What makes two runs comparable: the matrix name and the sorted entry ids."""
    return {"name": spec.name, "entries": sorted(e.id for e in spec.entries)}


def check_same_set(baseline: dict[str, Any], spec: RunSpec, path: str | Path) -> None:
    """Refuse (exit 2, one line) a baseline from another recipe set."""
    theirs, ours = baseline["recipe_set"], recipe_set(spec)
    if theirs.get("name") != ours["name"]:
        raise UserError(
            f"the baseline is from recipe set {theirs.get('name')!r}, this run is {ours['name']!r}",
            location=str(path),
            field="--baseline",
        )
    a, b = set(theirs.get("entries") or ()), set(ours["entries"])
    if a != b:
        only_base, only_now = sorted(a - b), sorted(b - a)
        raise UserError(
            f"the baseline is from another recipe set: only in the baseline: {_few(only_base)}; "
            f"only in this run: {_few(only_now)}",
            location=str(path),
            field="--baseline",
        )


def _few(items: list[str], n: int = 3) -> str:
    return "none" if not items else ", ".join(items[:n]) + (f" (+{len(items) - n} more)" if len(items) > n else "")


def _check(entry: dict[str, Any], name: str, key: str) -> Any:
    """A passed check's measurement, else None."""
    c = (entry.get("checks") or {}).get(name) or {}
    return c.get(key) if c.get("status") == "passed" else None


def gate_entry(now: dict[str, Any], base: dict[str, Any] | None, gates: Gates) -> list[dict[str, Any]]:
    """The gate rows of one entry (JSON form of both runs' entries)."""
    rows = []
    specs = (
        ("tau", "acceptance", "tau", gates.tau_drop, True),
        ("speed", "acceptance", "speed_ratio", gates.speed_ratio_drop, True),
        ("fp8_agreement", "fp8_quality", "token_agreement", gates.fp8_agreement_drop, False),
    )
    for gate, check, key, drop, relative in specs:
        if check == "fp8_quality" and "fp8_quality" not in (now.get("checks") or {}):
            continue
        old = None if base is None else _check(base, check, key)
        new = _check(now, check, key)
        if old is None or new is None:
            why = "no baseline entry" if base is None else "not measured in both runs"
            rows.append({"gate": gate, "status": "skipped", "reason": why, "baseline": old, "now": new})
            continue
        limit = old * (1 - drop) if relative else old - drop
        ok = new >= limit
        change = (new / old - 1) if relative and old else (new - old)
        unit = f"{100 * change:+.2f} %" if relative else f"{100 * change:+.2f} points"
        rule = f"drop > {100 * drop:g} %" if relative else f"drop > {100 * drop:g} points"
        rows.append(
            {
                "gate": gate,
                "status": "passed" if ok else "failed",
                "baseline": old,
                "now": new,
                "limit": round(limit, 6),
                "change": round(change, 6),
                "reason": "" if ok else f"{gate} {old:g} → {new:g} ({unit}; fails at {rule})",
            }
        )
    return rows


def apply_gates(entries: list[dict[str, Any]], baseline: dict[str, Any], gates: Gates) -> None:
    """Add `gates` rows to every entry (JSON form) and fail the entries whose gates fail."""
    by_id = {e.get("id"): e for e in baseline["entries"] if isinstance(e, dict)}
    for entry in entries:
        entry["gates"] = gate_entry(entry, by_id.get(entry["id"]), gates)
        failed = [g["reason"] for g in entry["gates"] if g["status"] == "failed"]
        if failed and entry["status"] != "failed":
            entry["status"], entry["reason"] = "failed", "gate: " + "; ".join(failed)
