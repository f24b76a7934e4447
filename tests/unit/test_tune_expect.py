"""E[τ] of a static tree (1 + Σ P(c)) against a simulation of greedy verification, and the tree helpers.

The simulation draws the target's continuation as a rank path (the rank of the true token among the
drafter's candidates at each depth) from a Markov model — depths are NOT independent — and lets a step
accept the longest prefix of that path that the tree holds (greedy verification: at most one sibling
matches). P(c) comes from the model analytically, not from the simulated paths, so the formula and the
simulation are independent computations; they must agree within the Monte-Carlo error.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from builder.speculative.tree import sort_choices
from builder.tune.acceptance import calibration_choices
from builder.tune.expect import expected_tau, level_widths, truncated, truncated_tau

RANKS, DEPTH = 3, 4
MISS = 3  # state "no candidate matched": the path ends
FIRST = np.array([0.6, 0.2, 0.1, 0.1])  # P(rank 0, 1, 2, miss) at depth 1
AFTER = np.array(
    [
        [0.7, 0.1, 0.05, 0.15],  # after a rank-0 hit
        [0.3, 0.2, 0.1, 0.4],  # after a rank-1 hit
        [0.2, 0.1, 0.1, 0.6],
    ]
)  # after a rank-2 hit


def analytic_p(choice: tuple[int, ...]) -> float:
    p = FIRST[choice[0]]
    for prev, r in zip(choice, choice[1:]):
        p *= AFTER[prev, r]
    return float(p)


def simulate(tree: list[tuple[int, ...]], steps: int, seed: int) -> np.ndarray:
    """Accepted draft tokens per simulated step."""
    rng = np.random.default_rng(seed)
    nodes = set(tree)
    out = np.zeros(steps)
    for i in range(steps):
        path: tuple[int, ...] = ()
        probs = FIRST
        while len(path) < DEPTH:
            r = int(rng.choice(4, p=probs))
            if r == MISS or path + (r,) not in nodes:
                break
            path += (r,)
            probs = AFTER[r]
        out[i] = len(path)
    return out


ALL = [c for d in range(1, DEPTH + 1) for c in itertools.product(range(RANKS), repeat=d)]
TREES = {
    "chain": [(0,), (0, 0), (0, 0, 0), (0, 0, 0, 0)],
    "wide": [(0,), (1,), (2,), (0, 0), (0, 1), (1, 0)],
    "mc-like": sort_choices(calibration_choices(DEPTH, RANKS, 12)),
}


@pytest.mark.parametrize("name", sorted(TREES))
def test_expected_tau_equals_simulation(name):
    tree = TREES[name]
    prob = {c: analytic_p(c) for c in ALL}
    accepted = simulate(tree, 20_000, seed=len(name))
    want = 1 + accepted.mean()
    err = accepted.std(ddof=1) / np.sqrt(len(accepted))
    assert abs(expected_tau(tree, prob) - want) < 4 * err  # 4 standard errors: fails by chance ~6e-5 of runs


def test_truncation_keeps_node_order():
    tree = [(1,), (0, 0), (0,), (0, 1)]  # node order: (0,), (1,), (0, 0), (0, 1)
    assert truncated(tree, 3) == [(0,), (1,)] and truncated(tree, 1) == [] and truncated(tree, 9) == sort_choices(tree)
    prob = {(0,): 0.5, (1,): 0.2, (0, 0): 0.3, (0, 1): 0.1}
    assert truncated_tau(tree, prob, 4) == pytest.approx(1 + 0.5 + 0.2 + 0.3)


def test_level_widths_count_nodes_with_children():
    # depth 1: (0) and (1) have children; depth 2: (0, 0) has one; (0, 1) is a leaf
    assert level_widths([(0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0)]) == [2, 1]
    assert level_widths([(0,), (1,)]) == []


def test_calibration_tree_is_prefix_closed_and_best_first():
    tree = calibration_choices(4, 3, 20)
    assert len(tree) == 20 and all(c[:-1] in set(tree) for c in tree if len(c) > 1)
    assert (0,) in tree and (0, 0, 0, 0) in tree and max(len(c) for c in tree) <= 4
