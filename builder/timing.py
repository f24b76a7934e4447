"""How trtspec times things and reports them: the measuring loops, the interleaved order, the markdown table.

One copy of each, for the product's measurements (the engine stage's step curve, `trtspec tune`'s measured
rows, `trtspec ci`, `trtspec bench`) and the development benchmarks (`devtools.bench`, scripts/bench_*.py).

* `timed(fn)`: one call's wall seconds and its result (`time.perf_counter`, the highest-resolution clock).
* `repeat(fn, n, warmup=, before=)`: the seconds of each of n calls after `warmup` untimed ones; `before`
  runs untimed before every call (a cache flush, a fresh sequence, the next input from the last result).
* `median_ms(fn, seconds, …)`: the median of as many calls as fit in a time budget, sized by a first call.
* `alternate(calls, runs)`: several calls timed one by one in turn, so a drifting machine weighs on each alike.
* `rotated(items, i)`: the i-th round's order of interleaved rows: rotated by one per round, for the same reason
  (benchmark rows prompt by prompt, `trtspec tune`'s plain / current / tuned, `trtspec bench`'s two modes).
* `markdown_table(header, rows, align)`: a table's lines, cells as the caller formatted them.
* `isotonic(row)`: the non-decreasing fit of a measured row (pool adjacent violators).

Nothing here imports beyond the standard library: `import builder` stays light.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar

T = TypeVar("T")


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    """(wall seconds of one call of fn(), its result)."""
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def repeat(
    fn: Callable[[], Any], repeats: int, *, warmup: int = 0, before: Callable[[], Any] | None = None
) -> list[float]:
    """Wall seconds of each of `repeats` calls of fn(), after `warmup` calls that are made the same way but not
    kept; `before()` runs untimed before every call (warm-up calls included)."""
    times = []
    for i in range(warmup + repeats):
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return times


def median_ms(
    fn: Callable[[], Any],
    seconds: float,
    *,
    min_repeats: int,
    max_repeats: int,
    before: Callable[[], Any] | None = None,
) -> float:
    """Median ms of fn() over as many calls as fit in `seconds` (by the first call's time, clamped to
    [min_repeats, max_repeats]), after that first call as a warm-up; `before()` runs untimed before every call."""
    if before is not None:
        before()
    first, _ = timed(fn)
    reps = int(min(max_repeats, max(min_repeats, seconds / max(first, 1e-6))))
    return 1e3 * statistics.median(repeat(fn, reps, before=before))


def alternate(
    calls: Mapping[str, Callable[[], Any]], runs: int, before: Mapping[str, Callable[[], Any]] | None = None
) -> dict[str, list[float]]:
    """Wall seconds of each call in each of `runs` runs, the calls taking turns one by one (in `calls`' order);
    `before[name]()` runs untimed before each call of `name`."""
    times: dict[str, list[float]] = {k: [] for k in calls}
    before = before or {}
    for _ in range(runs):
        for k, fn in calls.items():
            if k in before:
                before[k]()
            times[k].append(timed(fn)[0])
    return times


def rotated(items: Sequence[T], index: int) -> list[T]:
    """`items` in the order of round `index` of an interleaved measurement: rotated left by `index` (two items:
    as given on even rounds, swapped on odd ones), so no item always runs first."""
    n = len(items)
    return [*items[index % n :], *items[: index % n]] if n else []


SEPARATORS = {"": "---", "l": "---", "r": "---:", "c": ":---:"}


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]], align: Sequence[str] = ()) -> list[str]:
    """The lines of a markdown table: `| a | b |` rows under the header and its separator `|---|---|`.

    `align` has one letter per column ("l" or "" = `---`, "r" = `---:`, "c" = `:---:`; missing = `---`). Cells
    are written as given (str() of each; the caller formats numbers and escapes `|`), so an empty cell is `|  |`.
    """
    marks = [SEPARATORS[align[i]] if i < len(align) else "---" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "|" + "".join(m + "|" for m in marks)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def isotonic(row: Mapping[int, float]) -> dict[int, float]:
    """The non-decreasing fit of a measured row closest in squared error (pool adjacent violators): a step over
    more nodes never costs less, and a bigger draft budget never accepts less, so a dip is measurement noise and
    is averaged with its neighbours (the step curve, `builder.tune.curve`; the draft budget table,
    `builder.engines.draft_budget`)."""
    xs = sorted(row)
    blocks: list[list[float]] = []  # [sum, count] per pooled block
    for x in xs:
        blocks.append([row[x], 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, n = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += n
    out = [v / n for v, n in blocks for _ in range(int(n))]
    return dict(zip(xs, out))
