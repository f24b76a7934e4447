"""Tuned overlays for the decode benchmark: `trtspec tune` per method recipe of a fixture, or overlays on disk.

    tune_overlays   runs `builder.tune.run.tune` (the library behind `trtspec tune RECIPE --write FILE`) on
                    every recipe of a fixture that has a draft to tune (Lookahead, Medusa, EAGLE-1, EAGLE-2),
                    with small calibration counts, and writes DIR/<recipe stem>.yaml (the validated overlay,
                    `extends:` the recipe) and DIR/<recipe stem>.tune.json (the tune report)
    read_overlays   the same files written earlier (`scripts/bench_decode.py --tuned-dir DIR`)

The measured speedup of `trtspec tune` is skipped (measure_prompts 0): the benchmark measures the tuned
rows itself, beside the default trees. A recipe whose tuning or overlay fails gives a `Tuned` with the
reason (`skipped`), which the benchmark prints as a skipped row, never an exception.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from builder.recipe.loader import LoadedRecipe


@dataclass
class Tuned:
    """One tuned method of a fixture: the overlay (loaded) or why there is none."""

    base: Path  # the tuned recipe
    overlay: Path
    spec_method: str  # speculative.method: lookahead, medusa, eagle
    method: str  # row label: lookahead, medusa, eagle-1, eagle-2
    recipe: LoadedRecipe | None = None
    setting: str | None = None  # the pick in one phrase (builder.tune.report.describe)
    predicted: float | None = None  # tune's predicted speedup over plain
    skipped: str | None = None


_LABELS = {
    "lookahead": "lookahead",
    "medusa": "medusa",
    "eagle1": "eagle-1",
    "eagle2": "eagle-2",
    "eagle3": "eagle-3",
    "ngram": "ngram",
}


def tunable(loaded: list[LoadedRecipe]) -> list[LoadedRecipe]:
    """The recipes with a draft to tune, each recipe file once: two recipes of one method (a float32 and an int8
    draft, two vocabularies) are tuned each, as their rows are benched each (their overlays: one per file stem)."""
    from builder.tune.run import method_key

    out, seen = [], set()
    for rec in loaded:
        path = Path(rec.path).resolve()
        if method_key(rec) in _LABELS and path not in seen:
            out.append(rec)
            seen.add(path)
    return out


def overlay_path(folder: Path, rec: LoadedRecipe) -> Path:
    return Path(folder) / f"{Path(rec.path).stem}.yaml"


def tune_overlays(
    loaded: list[LoadedRecipe],
    folder: Path,
    prompts: int,
    max_new: int,
    threads: int = 1,
    say: Callable[[str], None] = lambda _m: None,
) -> list[Tuned]:
    """Tune every method recipe of `loaded`, write its overlay and report under `folder`, return them read."""
    from builder.stages.decoders import cache_dir
    from builder.tune.overlay import write_overlay
    from builder.tune.report import describe
    from builder.tune.run import Options, tune

    out = []
    for rec in tunable(loaded):
        path = overlay_path(folder, rec)
        opts = Options(
            prompts=prompts,
            max_new_tokens=max_new,
            measure_prompts=0,
            cache=cache_dir(),
            threads=threads,
            say=lambda m, n=path.stem: say(f"tune {n}: {m}"),
        )
        try:
            report = tune(rec, opts)
            header = (
                f"trtspec tune {rec.path} (scripts/bench_decode.py --tuned, {prompts} calibration prompts × "
                f"{max_new}): {describe(report['pick'])}, predicted {report['pick']['speedup']:.2f}x plain"
            )
            write_overlay(rec, report["overlay"], path, header)
            path.with_suffix(".tune.json").write_text(json.dumps(report, indent=2) + "\n")
        except Exception as e:  # noqa: BLE001 - the row says why; the other methods still run
            out.append(_missing(rec, path, f"trtspec tune failed: {type(e).__name__}: {e}"))
            continue
        out.append(read_overlay(rec, folder))
    return out


def read_overlays(loaded: list[LoadedRecipe], folder: Path) -> list[Tuned]:
    """The overlays `tune_overlays` wrote under `folder`, one per method recipe of `loaded`."""
    return [read_overlay(rec, folder) for rec in tunable(loaded)]


def read_overlay(rec: LoadedRecipe, folder: Path) -> Tuned:
    """The overlay of `rec` under `folder`, validated, with the pick from its tune report when there is one."""
    from builder.tune.overlay import checked
    from builder.tune.report import describe
    from builder.tune.run import method_key

    path = overlay_path(folder, rec)
    if not path.is_file():
        return _missing(rec, path, f"no tuned overlay {path} (scripts/bench_decode.py --tuned writes it)")
    try:
        loaded = checked(path)
    except Exception as e:  # noqa: BLE001 - an invalid overlay is a skipped row with the reason
        return _missing(rec, path, f"invalid overlay {path}: {type(e).__name__}: {e}")
    if method_key(loaded) != method_key(rec):
        return _missing(rec, path, f"{path} is {method_key(loaded)}, not {method_key(rec)}")
    report = _report(path.with_suffix(".tune.json"))
    pick = report.get("pick") or {}
    return Tuned(
        Path(rec.path),
        path,
        rec.recipe.speculative.method,
        _LABELS[method_key(rec)],
        loaded,
        describe(pick) if pick else None,
        pick.get("speedup"),
    )


def _report(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _missing(rec: LoadedRecipe, path: Path, reason: str) -> Tuned:
    from builder.tune.run import method_key

    return Tuned(Path(rec.path), path, rec.recipe.speculative.method, _LABELS[method_key(rec)], skipped=reason)
