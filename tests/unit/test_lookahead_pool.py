"""Lookahead n-gram pool on hand-worked tiny sequences (table style of vLLM's test_ngram.py)."""

from __future__ import annotations

import pytest

from builder.speculative.lookahead.pool import NgramPool


@pytest.mark.parametrize(
    "ngram,tokens,expected",
    [
        # N=3: every 3-gram, keyed by its first token, tails oldest first
        (3, [1, 2, 3, 1, 2, 4], {1: [(2, 3), (2, 4)], 2: [(3, 1)], 3: [(1, 2)]}),
        # a repeated n-gram is stored once and moves to the newest end
        (2, [5, 6, 5, 7, 5, 6], {5: [(7,), (6,)], 6: [(5,)], 7: [(5,)]}),
        # too short for one n-gram
        (4, [1, 2, 3], {}),
        (4, [1, 2, 3, 4], {1: [(2, 3, 4)]}),
    ],
)
def test_insert_sequence(ngram: int, tokens: list[int], expected: dict[int, list[tuple[int, ...]]]) -> None:
    pool = NgramPool(ngram, max_per_key=8)
    pool.insert_sequence(tokens)
    assert {k: pool.tails(k) for k in pool.keys()} == expected
    assert len(pool) == sum(len(v) for v in expected.values())


def test_per_key_bound_drops_oldest_and_dedup_refreshes() -> None:
    pool = NgramPool(3, max_per_key=2)
    pool.insert((1, 2, 3))
    pool.insert((1, 4, 5))
    pool.insert((1, 2, 3))  # refresh: (2, 3) becomes newest
    assert pool.tails(1) == [(4, 5), (2, 3)]
    pool.insert((1, 6, 7))  # full: the oldest, (4, 5), leaves
    assert pool.tails(1) == [(2, 3), (6, 7)]
    assert (1, 6, 7) in pool and (1, 4, 5) not in pool


@pytest.mark.parametrize(
    "token,limit,expected",
    [
        (1, 3, [(2, 3), (4, 5), (6, 7)]),
        (1, 2, [(4, 5), (6, 7)]),  # the newest `limit`, oldest first
        (1, 0, []),
        (9, 2, []),  # unknown key
    ],
)
def test_verification_set(token: int, limit: int, expected: list[tuple[int, ...]]) -> None:
    pool = NgramPool(3, max_per_key=4)
    for g in [(1, 2, 3), (1, 4, 5), (1, 6, 7), (2, 1, 1)]:
        pool.insert(g)
    assert pool.verification_set(token, limit) == expected


def test_max_keys_drops_least_recently_touched_key() -> None:
    pool = NgramPool(2, max_per_key=2, max_keys=2)
    pool.insert((1, 10))
    pool.insert((2, 20))
    pool.insert((1, 11))  # touches key 1
    pool.insert((3, 30))  # key 2 is the stalest
    assert pool.keys() == [1, 3]
    assert pool.tails(1) == [(10,), (11,)]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        NgramPool(1, max_per_key=2)
    with pytest.raises(ValueError, match="length"):
        NgramPool(3, max_per_key=2).insert((1, 2))
