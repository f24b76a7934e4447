"""Random drafts and scenarios for engine tests (torch reference vs HF, ONNX Runtime vs the reference).

Nothing here computes an expected value with the engine under test: trees and tokens are random, or
follow an oracle's greedy choices so that drafts get accepted.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from builder.speculative.protocols import Draft
from builder.speculative.tree import tree_from_parents


def random_parents(rng: np.random.Generator, n: int) -> list[int]:
    """A random tree of n nodes in topological order (parents[i] < i), node 0 the root."""
    return [-1] + [int(rng.integers(0, i)) for i in range(1, n)]


def path_to(parents: list[int], node: int) -> list[int]:
    """Root-first chain of node indices from the root to `node`."""
    chain = [node]
    while parents[chain[-1]] >= 0:
        chain.append(parents[chain[-1]])
    return chain[::-1]


def draft_from(parents: list[int], tokens: list[int]) -> Draft:
    tree = tree_from_parents(parents)
    return Draft(np.asarray(tokens, dtype=np.int64), tree.mask, tree.depth, tree.paths)


def greedy_tree_draft(
    rng: np.random.Generator, n: int, vocab: int, root: int, greedy_after: Callable[[list[int]], int] | None
) -> Draft:
    """A random n-node tree with random tokens, where (when an oracle is given) one random root-to-leaf
    path carries the oracle's greedy continuation, so the step accepts part of the tree."""
    parents = random_parents(rng, n)
    tokens = [root] + [int(t) for t in rng.integers(0, vocab, n - 1)]
    if greedy_after is not None and n > 1:
        leaf = int(rng.integers(1, n))
        chain = path_to(parents, leaf)
        for k in range(1, len(chain)):
            tokens[chain[k]] = greedy_after([tokens[c] for c in chain[1:k]])
    return draft_from(parents, tokens)
