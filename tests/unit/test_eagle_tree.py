"""EAGLE-1 static and EAGLE-2 dynamic trees against hand tables and brute-force enumeration."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from builder.speculative.eagle.tree import dynamic_tree, eagle_draft, grow_static_tree, static_tree

ROOT = 99


class Recorder:
    """An `expand` that serves canned top-k per call and records what it was asked."""

    def __init__(self, answers: list[tuple[list[list[int]], list[list[float]]]]) -> None:
        self.answers = answers
        self.calls: list[tuple[list[int], list[int]]] = []

    def __call__(self, tokens: torch.Tensor, parents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.calls.append((tokens.tolist(), parents.tolist()))
        toks, lps = self.answers[len(self.calls) - 1]
        return torch.tensor(toks), torch.tensor(lps)


# Hand-worked EAGLE-2 run: top_k = 2, K = 2, depth = 3.
#   level 1: root -> 1 (-0.1), 2 (-1.0)                            cands c0, c1; frontier c0, c1
#   level 2: 1 -> 3 (-0.2 => -0.3), 4 (-2.0 => -2.1)                 cands c2, c3
#            2 -> 5 (-0.05 => -1.05), 6 (-3.0 => -4.0)               cands c4, c5; frontier c2, c4
#   level 3: 3 -> 7 (-0.3 => -0.6), 8 (-0.4 => -0.7)                 cands c6, c7
#            5 -> 9 (-0.01 => -1.06), 10 (-5.0 => -6.05)             cands c8, c9
#   rank: c0 -0.1, c2 -0.3, c6 -0.6, c7 -0.7, c1 -1.0, c4 -1.05, c8 -1.06, c3 -2.1, c5 -4.0, c9 -6.05
HAND = [
    ([[1, 2]], [[-0.1, -1.0]]),
    ([[3, 4], [5, 6]], [[-0.2, -2.0], [-0.05, -3.0]]),
    ([[7, 8], [9, 10]], [[-0.3, -0.4], [-0.01, -5.0]]),
]


def test_dynamic_tree_hand_table_six_nodes() -> None:
    expand = Recorder(HAND)
    grown = dynamic_tree(ROOT, expand, depth=3, top_k=2, total_nodes=6)
    # What the draft model was asked: frontier tokens and their parents' rows in the previous call.
    assert expand.calls == [([ROOT], [-1]), ([1, 2], [0, 0]), ([3, 5], [0, 1])]
    # kept c0 c1 c2 c4 c6 c7 in generation order -> nodes 1..6
    assert grown.tokens.tolist() == [ROOT, 1, 2, 3, 5, 7, 8]
    assert grown.tree.parents.tolist() == [-1, 0, 0, 1, 2, 3, 3]
    assert grown.tree.depth.tolist() == [0, 1, 1, 2, 2, 3, 3]
    assert grown.tree.paths.tolist() == [[0, 2, 4, -1], [0, 1, 3, 5], [0, 1, 3, 6]]
    assert grown.scores.tolist() == pytest.approx([0, -0.1, -1.0, -0.3, -1.05, -0.6, -0.7])
    assert grown.logprobs.tolist() == pytest.approx([0, -0.1, -1.0, -0.2, -0.05, -0.3, -0.4])
    draft = eagle_draft(grown)
    assert draft.tokens.tolist() == grown.tokens.tolist() and draft.paths.tolist() == grown.tree.paths.tolist()


def test_dynamic_tree_hand_table_seven_nodes_reaches_second_frontier_row() -> None:
    grown = dynamic_tree(ROOT, Recorder(HAND), depth=3, top_k=2, total_nodes=7)
    # c8 (token 9, a child of the second frontier row c4 = node 4) joins; generation order
    # c0 c1 c2 c4 c6 c7 c8 -> nodes 1..7.
    assert grown.tokens.tolist() == [ROOT, 1, 2, 3, 5, 7, 8, 9]
    assert grown.tree.parents.tolist() == [-1, 0, 0, 1, 2, 3, 3, 4]


def test_dynamic_tree_budget_larger_than_candidates_keeps_all() -> None:
    grown = dynamic_tree(ROOT, Recorder(HAND), depth=3, top_k=2, total_nodes=100)
    assert grown.tree.num_nodes == 1 + 10


def test_dynamic_tree_rejects_bad_expand() -> None:
    with pytest.raises(ValueError, match="> 0"):
        dynamic_tree(ROOT, Recorder([([[1]], [[0.5]])]), depth=1, top_k=1, total_nodes=1)
    with pytest.raises(ValueError, match=r"\[F, K\]"):
        dynamic_tree(ROOT, Recorder([([[1, 2]], [[-0.5]])]), depth=1, top_k=1, total_nodes=1)


# ---- synthetic draft distribution: log q(. | prefix) is a fixed function of the token prefix ----

VOCAB = 7


def logq(prefix: tuple[int, ...]) -> torch.Tensor:  # [VOCAB] log-probs
    seed_value = 1
    for t in prefix:
        seed_value = (seed_value * 1_000_003 + t + 1) % (2**31 - 1)
    logits = torch.randn(VOCAB, generator=torch.Generator().manual_seed(seed_value)) * 2.0
    return torch.log_softmax(logits, dim=-1)


class SyntheticDraft:
    """An `expand` over `logq` that rebuilds each frontier node's prefix from frontier_parents."""

    def __init__(self, root: int, k: int) -> None:
        self.k = k
        self.prev: list[tuple[int, ...]] = []
        self.root = root

    def __call__(self, tokens: torch.Tensor, parents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows = []
        for tok, par in zip(tokens.tolist(), parents.tolist()):
            rows.append((tok,) if par == -1 else self.prev[par] + (tok,))
        self.prev = rows
        top = [torch.topk(logq(p), self.k) for p in rows]
        return torch.stack([t.indices for t in top]), torch.stack([t.values for t in top])


def brute_force_eagle2(root: int, depth: int, top_k: int, k: int, total: int) -> set[tuple[int, ...]]:
    """Enumerate every token path of the full k-ary tree, then apply EAGLE-2's rules by definition."""
    score: dict[tuple[int, ...], float] = {(): 0.0}
    for length in range(1, depth + 1):
        for path in itertools.product(range(VOCAB), repeat=length):
            if path[:-1] in score:
                lp = logq((root,) + path[:-1])
                if path[-1] in torch.topk(lp, k).indices.tolist():
                    score[path] = score[path[:-1]] + float(lp[path[-1]])
    candidates: set[tuple[int, ...]] = set()
    frontier: set[tuple[int, ...]] = {()}
    for length in range(1, depth + 1):
        level = [p for p in score if len(p) == length and p[:-1] in frontier]
        candidates |= set(level)
        frontier = set(sorted(level, key=lambda p: -score[p])[:top_k])
    return set(sorted(candidates, key=lambda p: -score[p])[:total])


def node_paths(grown) -> set[tuple[int, ...]]:  # token path (without root) of every non-root node
    out = set()
    for i in range(1, grown.tree.num_nodes):
        anc = [j for j in range(grown.tree.num_nodes) if grown.tree.mask[i, j]]
        anc.sort(key=lambda j: int(grown.tree.depth[j]))
        out.add(tuple(int(grown.tokens[j]) for j in anc[1:]))
    return out


@pytest.mark.parametrize(
    "depth,top_k,k,total",
    [(1, 3, 3, 2), (2, 2, 3, 5), (3, 2, 3, 8), (3, 3, 2, 10), (4, 2, 2, 9), (3, 4, 3, 40)],
)
def test_dynamic_tree_matches_brute_force(depth: int, top_k: int, k: int, total: int) -> None:
    root = 3
    grown = dynamic_tree(root, SyntheticDraft(root, k), depth=depth, top_k=top_k, total_nodes=total)
    expected = brute_force_eagle2(root, depth, top_k, k, total)
    assert node_paths(grown) == expected
    assert grown.tree.num_nodes == 1 + len(expected)
    # Scores are the cumulative log-probs of each node's path.
    for i in range(1, grown.tree.num_nodes):
        anc = [j for j in range(grown.tree.num_nodes) if grown.tree.mask[i, j]]
        assert float(grown.scores[i]) == pytest.approx(float(grown.logprobs[anc].sum()), abs=1e-5)


def test_dynamic_tree_without_pruning_is_full_tree() -> None:
    k = 3
    grown = dynamic_tree(0, SyntheticDraft(0, k), depth=2, top_k=k, total_nodes=k + k * k)
    assert np.bincount(grown.tree.depth).tolist() == [1, k, k * k]


def test_static_tree_grows_by_rank_of_parent() -> None:
    choices = [(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0)]
    tree = static_tree(choices)
    root = 5
    grown = grow_static_tree(tree, root, SyntheticDraft(root, 2))
    # Node i's token is the rank[i]-th most likely token after its parent's path (brute force).
    labels = [()] + sorted(choices, key=lambda c: (len(c), c))
    paths: dict[tuple[int, ...], tuple[int, ...]] = {(): (root,)}
    for i, c in enumerate(labels[1:], start=1):
        parent_tokens = paths[c[:-1]]
        lp = logq(parent_tokens)
        top = torch.topk(lp, 2)
        expected_token = int(top.indices[c[-1]])
        assert int(grown.tokens[i]) == expected_token
        assert float(grown.logprobs[i]) == pytest.approx(float(top.values[c[-1]]))
        paths[c] = parent_tokens + (expected_token,)
    assert grown.tokens[0] == root


def test_static_tree_expand_calls() -> None:
    tree = static_tree([(0,), (1,), (0, 0), (1, 0), (1, 1)])  # nodes: 1=(0) 2=(1) 3=(0,0) 4=(1,0) 5=(1,1)
    answers = [([[10, 11]], [[-0.1, -0.2]]), ([[20, 21], [30, 31]], [[-0.3, -0.4], [-0.5, -0.6]])]
    expand = Recorder(answers)
    grown = grow_static_tree(tree, ROOT, expand)
    assert expand.calls == [([ROOT], [-1]), ([10, 11], [0, 0])]
    assert grown.tokens.tolist() == [ROOT, 10, 11, 20, 30, 31]
    assert grown.scores.tolist() == pytest.approx([0, -0.1, -0.2, -0.4, -0.7, -0.8])


def test_static_tree_with_impossible_child_keeps_finite_ancestors() -> None:
    tree = static_tree([(0,), (1,), (0, 0)])
    answers = [([[10, 11]], [[-0.5, float("-inf")]]), ([[20]], [[-0.25]])]
    grown = grow_static_tree(tree, ROOT, Recorder(answers))
    assert grown.scores.tolist() == [0.0, -0.5, float("-inf"), -0.75]
    assert np.exp(grown.logprobs).tolist() == pytest.approx([1.0, 0.60653066, 0.0, 0.77880078])
    assert eagle_draft(grown).tokens.tolist() == [ROOT, 10, 11, 20]
