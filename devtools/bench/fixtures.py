"""The decode benchmark over several fixtures in one run (`scripts/bench_decode.py tiny-llama3 regime-llama3`).

Recipes are grouped by their target checkpoint, in order of first appearance: each group is one fixture,
benchmarked by `decode.bench_decode` (its first recipe gives plain decoding and Lookahead), optionally
with tuned rows (`tuned`: tuned here, or overlays read from a folder); the reports are combined into one
(`decode_table.combine`: a fixture column, ratios per fixture, the seed comparison).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from builder.recipe.loader import LoadedRecipe, load_recipe
from devtools.bench.decode import DEFAULT_ROWS, bench_decode
from devtools.bench.decode_table import combine
from devtools.bench.tuned import read_overlays, tune_overlays


@dataclass
class Tuning:
    """Tuned rows: `prompts` > 0 tunes each method recipe now and writes the overlays under `folder`;
    `prompts` 0 reads the overlays already there."""

    folder: Path
    prompts: int = 8  # calibration prompts per method (tune's Options.prompts)
    max_new: int = 32  # calibration tokens per prompt (tune's Options.max_new_tokens; its cost grows with it)
    say: Callable[[str], None] = field(default=lambda _m: None)


def group_recipes(paths: Sequence[str | Path]) -> list[list[LoadedRecipe]]:
    """The recipes loaded and grouped by target checkpoint (one group per fixture), first appearance first."""
    from builder.recipe.resolve import parse_checkpoint

    groups: dict[str, list[LoadedRecipe]] = {}
    for p in paths:
        rec = load_recipe(p)
        ref = parse_checkpoint(rec.recipe.model.checkpoint, rec.dir_of(("model", "checkpoint")))
        key = str(Path(ref.local).resolve()) if ref.local else ref.text
        group = groups.setdefault(key, [])
        if all(Path(r.path).resolve() != Path(rec.path).resolve() for r in group):
            group.append(rec)
    return list(groups.values())


def bench_fixtures(
    groups: Sequence[list[LoadedRecipe]],
    num_prompts: int,
    max_new: int,
    rows: Sequence[str] = DEFAULT_ROWS,
    threads: int = 1,
    lookup: int = 10,
    llama_cpp_src: str | None = None,
    tuning: Tuning | None = None,
) -> dict[str, Any]:
    """`bench_decode` per fixture group (tuned rows with `tuning`), combined into one report."""
    reports = []
    if "ours" not in rows:
        tuning = None  # tuned rows are our engines' rows
    for group in groups:
        tuned = []
        if tuning is not None and tuning.prompts > 0:
            tuned = tune_overlays(group, tuning.folder, tuning.prompts, tuning.max_new, threads, tuning.say)
        elif tuning is not None:
            tuned = read_overlays(group, tuning.folder)
        reports.append(
            bench_decode(
                group,
                num_prompts,
                max_new,
                rows=rows,
                threads=threads,
                lookup=lookup,
                llama_cpp_src=llama_cpp_src,
                tuned=tuned,
            )
        )
    report = combine(reports)
    if tuning is not None:
        report["tuning"] = {
            "folder": str(tuning.folder),
            "calibration_prompts": tuning.prompts or None,
            "calibration_max_new_tokens": tuning.max_new if tuning.prompts else None,
        }
    return report
