"""builder.timing: the measuring loops, the interleaved order and the markdown table every report shares.

Oracles: call logs written out by hand (which calls run, in which order, which are timed), a Latin-square
property for the interleaved order (over n rounds every row runs once at every position), a sleep that must not
be counted (20 ms untimed before each call, each call itself ~0), and tables written out by hand.
"""

from __future__ import annotations

import time

import pytest

from builder.timing import alternate, markdown_table, median_ms, repeat, rotated, timed


def test_timed_returns_the_result_and_counts_the_call():
    seconds, out = timed(lambda: (time.sleep(0.02), 7)[1])
    assert out == 7 and seconds >= 0.02


def test_repeat_keeps_only_the_calls_after_the_warm_up_and_runs_before_untimed():
    calls: list[str] = []
    times = repeat(lambda: calls.append("fn"), 3, warmup=2, before=lambda: (calls.append("before"), time.sleep(0.02)))
    assert calls == ["before", "fn"] * 5  # before runs ahead of every call, warm-up calls included
    assert len(times) == 3
    assert max(times) < 0.01  # the 20 ms slept in `before` are in no figure


def test_repeat_times_each_call():
    times = repeat(lambda: time.sleep(0.01), 2)
    assert len(times) == 2 and min(times) >= 0.01


@pytest.mark.parametrize(
    "first_s, seconds, fewest, most",
    [
        (0.0, 0.05, 9, 9),  # a call of ~0 s: as many as fit, clamped to max_repeats
        (0.02, 0.0, 3, 3),  # no budget: min_repeats
        (0.02, 0.1, 4, 5),  # 0.1 s / 0.02 s = 5 calls, 4 when the sleep overshoots (int() rounds down)
    ],
)
def test_median_ms_sizes_the_repeats_by_the_first_call(first_s, seconds, fewest, most):
    calls: list[str] = []

    def fn():
        calls.append("fn")
        if calls.count("fn") == 1:  # only the warm-up is slow: it alone sizes the count
            time.sleep(first_s)

    ms = median_ms(fn, seconds, min_repeats=3, max_repeats=9, before=lambda: calls.append("before"))
    fns = [c for c in calls if c == "fn"]
    assert fewest <= len(fns) - 1 <= most  # the timed calls after the warm-up
    assert calls[::2] == ["before"] * len(fns) and calls[1::2] == ["fn"] * len(fns)
    assert ms < 5  # the median of the fast calls, not the slow warm-up


def test_alternate_takes_turns_and_runs_each_before_untimed():
    calls: list[str] = []
    times = alternate(
        {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
        3,
        before={"b": lambda: (calls.append("flush"), time.sleep(0.02))},
    )
    assert calls == ["a", "flush", "b"] * 3
    assert {k: len(v) for k, v in times.items()} == {"a": 3, "b": 3}
    assert max(times["b"]) < 0.01  # the flush is not in b's figure


def test_rotated_by_hand_and_as_a_latin_square():
    assert rotated("abc", 0) == ["a", "b", "c"]
    assert rotated("abc", 1) == ["b", "c", "a"]
    assert rotated("abc", 5) == ["c", "a", "b"]
    assert [rotated(["plain", "method"], i) for i in range(3)] == [
        ["plain", "method"],
        ["method", "plain"],  # two rows: swapped on odd rounds
        ["plain", "method"],
    ]
    assert rotated([], 3) == [] and rotated(["x"], 7) == ["x"]
    for n in range(1, 6):
        rounds = [rotated(list(range(n)), i) for i in range(n)]
        for pos in range(n):  # over n rounds every item runs once at every position
            assert sorted(r[pos] for r in rounds) == list(range(n))


def test_markdown_table_by_hand():
    assert markdown_table(("a", "b"), [(1, "x"), ("", None)]) == ["| a | b |", "|---|---|", "| 1 | x |", "|  | None |"]
    assert markdown_table(("n", "mode", "ok"), [], "rlc") == ["| n | mode | ok |", "|---:|---|:---:|"]
    assert markdown_table(("a", "b", "c"), [], "r") == ["| a | b | c |", "|---:|---|---|"]  # missing: `---`
