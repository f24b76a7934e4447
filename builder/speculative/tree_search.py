"""Choose a static tree for a node budget from measured per-(depth, rank) draft accuracy.

Medusa's "mc_sim" construction: if the draft at depth d is right with its rank-r candidate with
probability a[d][r] (independently), the node for choice c = (r_1, …, r_n) is accepted with
probability P(c) = Π_d a[d][r_d], and the expected number of accepted draft tokens of a tree is the
sum of P over its nodes. A child never beats its parent (a ≤ 1), so the `num_nodes` most probable
choices are prefix-closed and maximise that sum: a best-first search finds them.

Step cost grows with the node count on a compute-bound device (the CPU from a handful of nodes, an
H100 only past ~64), so pick the budget from the measured step-cost curve, not a fixed 63.
"""

from __future__ import annotations

import heapq
from typing import Mapping, Sequence

Choice = tuple[int, ...]


def choice_probability(choice: Choice, accuracy: Sequence[Sequence[float]]) -> float:
    p = 1.0
    for depth, rank in enumerate(choice):
        p *= accuracy[depth][rank]
    return p


def expected_accepted(choices: Sequence[Choice], accuracy: Sequence[Sequence[float]]) -> float:
    """Expected accepted draft tokens per step (τ - 1) under the independence model."""
    return sum(choice_probability(tuple(c), accuracy) for c in choices)


def best_choices(
    accuracy: Sequence[Sequence[float]],  # [depths][ranks] probability that rank r is right at depth d
    num_nodes: int,
) -> list[Choice]:
    """The `num_nodes` choices with the highest acceptance probability, in node order."""
    depths, ranks = len(accuracy), len(accuracy[0]) if accuracy else 0
    if any(not 0.0 <= a <= 1.0 for row in accuracy for a in row):
        raise ValueError("accuracies must lie in [0, 1]")
    heap = [(-accuracy[0][r], (r,)) for r in range(ranks)] if depths else []
    heapq.heapify(heap)
    chosen: list[Choice] = []
    while heap and len(chosen) < num_nodes:
        neg_p, choice = heapq.heappop(heap)  # ties: the lexicographically smaller choice first
        chosen.append(choice)
        if len(choice) < depths:
            for r in range(ranks):
                heapq.heappush(heap, (neg_p * accuracy[len(choice)][r], (*choice, r)))
    return sorted(chosen, key=lambda c: (len(c), c))


def ranked_measured_choices(
    probability: Mapping[Choice, float],  # P(node c accepted in a step), measured per node
    num_nodes: int,
    max_depth: int | None = None,
) -> list[Choice]:
    """The `num_nodes` most often accepted choices (depth <= max_depth), best first.

    A node is accepted only when its parent is, so measured P never grows from parent to child; ties go
    to the shorter, then the lexicographically smaller choice, so the parent always precedes its child and
    every prefix of the ranking is prefix-closed (given every measured node's parent was measured too).
    Sum of P over a prefix of the ranking is then the most any prefix-closed tree of that size accepts.
    """
    pool = [c for c in probability if max_depth is None or len(c) <= max_depth]
    if any(len(c) > 1 and c[:-1] not in probability for c in pool):
        raise ValueError("every measured choice needs its parent measured too (a prefix-closed table)")
    return sorted(pool, key=lambda c: (-probability[c], len(c), c))[:num_nodes]
