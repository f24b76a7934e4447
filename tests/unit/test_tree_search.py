"""best_choices against brute force over every prefix-closed tree of a small candidate space."""

from __future__ import annotations

import itertools
import random

import pytest

from builder.speculative.choices import check_choices
from builder.speculative.tree_search import best_choices, expected_accepted


def all_candidates(depths: int, ranks: int) -> list[tuple[int, ...]]:
    return [c for d in range(1, depths + 1) for c in itertools.product(range(ranks), repeat=d)]


def brute_force_best(accuracy, n: int) -> float:
    cands = all_candidates(len(accuracy), len(accuracy[0]))
    best = 0.0
    for subset in itertools.combinations(cands, n):
        if not check_choices(list(subset), None):  # prefix-closed, no duplicates
            best = max(best, expected_accepted(subset, accuracy))
    return best


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("n", [1, 3, 5])
def test_best_choices_is_optimal(seed, n):
    rng = random.Random(seed)
    accuracy = [sorted((rng.random() for _ in range(2)), reverse=True) for _ in range(3)]  # 3 depths × 2 ranks
    chosen = best_choices(accuracy, n)
    assert len(chosen) == n and check_choices(chosen, None) == []
    assert expected_accepted(chosen, accuracy) == pytest.approx(brute_force_best(accuracy, n))


def test_hand_worked_example():
    # depth 0: rank0 .8, rank1 .1; depth 1: rank0 .5, rank1 .2
    # P: (0)=.8 (0,0)=.4 (0,1)=.16 (1)=.1 (1,0)=.05 → the best 3 are (0), (0,0), (0,1)
    assert best_choices([[0.8, 0.1], [0.5, 0.2]], 3) == [(0,), (0, 0), (0, 1)]
    assert expected_accepted([(0,), (0, 0), (0, 1)], [[0.8, 0.1], [0.5, 0.2]]) == pytest.approx(1.36)


def test_budget_larger_than_space_returns_everything():
    assert len(best_choices([[0.5, 0.5]], 10)) == 2
