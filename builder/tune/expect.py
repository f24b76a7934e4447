"""E[τ] of a static tree from per-node acceptance probabilities — exact, by linearity of expectation.

Under greedy verification a step accepts the nodes of its tree that lie on the target's own continuation
(at most one sibling can equal the target's token), and those nodes form a chain from the root. So the
accepted draft tokens of a step are Σ_{c∈tree} 1[c accepted], and

    E[τ] = 1 + Σ_{c ∈ tree} P(c accepted)          (the 1 is the bonus token)

for any prefix-closed set of choices, whatever the dependence between depths. P(c) is measured per node
(`builder.tune.acceptance.NodeStats`); `builder.speculative.tree_search` gives it under the independence
model (P(c) = Π_d a[d][c_d]) from per-depth/per-rank tables. A node budget (`triton.draft_schedule`) keeps
a static tree's first n nodes in node order (`builder.speculative.medusa.drafter.truncate_tree`):
`truncated_tau` scores exactly that subtree.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from builder.speculative.tree import sort_choices

Choice = tuple[int, ...]


def expected_tau(choices: Sequence[Choice], probability: Mapping[Choice, float]) -> float:
    """1 + Σ P(c) over the tree's choices; a choice without a measured P counts 0 (never accepted seen)."""
    return 1.0 + sum(probability.get(tuple(c), 0.0) for c in choices)


def truncated(choices: Sequence[Choice], nodes: int) -> list[Choice]:
    """The choices a budget of `nodes` tree nodes (root included) keeps: the first nodes - 1 in node order."""
    return sort_choices(choices)[: max(nodes - 1, 0)]


def truncated_tau(choices: Sequence[Choice], probability: Mapping[Choice, float], nodes: int) -> float:
    return expected_tau(truncated(choices, nodes), probability)


def level_widths(choices: Sequence[Choice]) -> list[int]:
    """Nodes with children per depth 1..D-1: the frontier of each EAGLE-1 expand call (depth 0, the root,
    is answered by the draft's extend call)."""
    parents = {tuple(c[:-1]) for c in choices if len(c) > 1}
    depth = max((len(c) for c in choices), default=0)
    return [sum(1 for p in parents if len(p) == d) for d in range(1, depth)]
