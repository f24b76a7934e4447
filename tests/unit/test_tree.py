"""Tree buffers (builder.speculative.tree) against hand-worked tables and brute force."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from builder.speculative.protocols import Draft
from builder.speculative.tree import (
    fill_tokens,
    medusa_draft,
    pack_mask,
    sort_choices,
    tree_draft,
    tree_from_choices,
    tree_from_parents,
    unpack_mask,
)

TREES = Path(__file__).resolve().parents[2] / "builder" / "speculative" / "trees"


def preset(name: str) -> list[tuple[int, ...]]:
    return [tuple(c) for c in json.loads((TREES / f"{name}.json").read_text())["choices"]]


# A tiny tree, worked by hand. Input order is shuffled on purpose.
#   node: choice     parent depth head rank
#   0     root       -1     0     -1   -1
#   1     (0,)        0     1      0    0
#   2     (1,)        0     1      0    1
#   3     (0,0)       1     2      1    0
#   4     (0,1)       1     2      1    1
#   5     (1,0)       2     2      1    0
#   6     (0,0,0)     3     3      2    0
TINY = [(0, 1), (1,), (0, 0, 0), (0,), (1, 0), (0, 0)]
TINY_PARENTS = [-1, 0, 0, 1, 1, 2, 3]
TINY_DEPTH = [0, 1, 1, 2, 2, 2, 3]
TINY_HEAD = [-1, 0, 0, 1, 1, 1, 2]
TINY_RANK = [-1, 0, 1, 0, 1, 0, 0]
TINY_ATTENDS = [{0}, {0, 1}, {0, 2}, {0, 1, 3}, {0, 1, 4}, {0, 2, 5}, {0, 1, 3, 6}]
TINY_PATHS = [[0, 1, 4, -1], [0, 2, 5, -1], [0, 1, 3, 6]]  # one per leaf (4, 5, 6), node order
TINY_PACKED = [1, 0b11, 0b101, 0b1011, 0b10011, 0b100101, 0b1001011]


def test_tiny_tree_matches_hand_table() -> None:
    tree = tree_from_choices(TINY)
    assert sort_choices(TINY) == [(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0)]
    assert tree.parents.tolist() == TINY_PARENTS
    assert tree.depth.tolist() == TINY_DEPTH
    assert tree.head is not None and tree.head.tolist() == TINY_HEAD
    assert tree.rank is not None and tree.rank.tolist() == TINY_RANK
    expected_mask = [[j in row for j in range(7)] for row in TINY_ATTENDS]
    assert tree.mask.tolist() == expected_mask
    assert tree.mask.dtype == bool
    assert tree.paths.tolist() == TINY_PATHS
    assert pack_mask(tree.mask).tolist() == [[v] for v in TINY_PACKED]


def test_tiny_tree_tokens_probs_and_draft() -> None:
    tree = tree_from_choices(TINY)
    topk = np.array([[10, 11], [20, 21], [30, 31]])  # [H=3, K=2]
    tokens = fill_tokens(tree, 7, topk)
    assert tokens.tolist() == [7, 10, 11, 20, 21, 20, 30]
    draft = tree_draft(tree, tokens)
    assert isinstance(draft, Draft)
    assert draft.tokens.dtype == np.int64 and draft.paths.tolist() == TINY_PATHS
    assert draft.mask is tree.mask and draft.depth is tree.depth  # shared, not copied
    assert not draft.mask.flags.writeable  # a shared tree buffer cannot be edited by accident
    same = medusa_draft(tree, 7, topk)
    assert np.array_equal(same.tokens, draft.tokens)
    with pytest.raises(ValueError, match="needs 3 heads"):
        fill_tokens(tree, 7, topk[:2])
    with pytest.raises(ValueError, match="tokens shape"):
        tree_draft(tree, tokens[:3])


def test_chain_4_preset() -> None:
    tree = tree_from_choices(preset("chain_4"))
    assert tree.parents.tolist() == [-1, 0, 1, 2, 3]
    assert tree.depth.tolist() == [0, 1, 2, 3, 4]
    assert tree.paths.tolist() == [[0, 1, 2, 3, 4]]
    assert np.array_equal(tree.mask, np.tril(np.ones((5, 5), dtype=bool)))


def test_mc_sim_7b_63_against_independent_counts() -> None:
    choices = preset("mc_sim_7b_63")
    assert len(choices) == 63 and len(set(choices)) == 63
    tree = tree_from_choices(choices)
    assert tree.num_nodes == 64  # incl. root
    by_depth = Counter(len(c) for c in choices)
    assert by_depth == {1: 10, 2: 28, 3: 23, 4: 2}
    assert np.bincount(tree.depth).tolist() == [1, 10, 28, 23, 2]
    leaves = [c for c in choices if not any(len(d) > len(c) and d[: len(c)] == c for d in choices)]
    assert tree.paths.shape == (len(leaves), 5) == (42, 5)
    # Each path is the chain of prefixes of one leaf choice; every leaf appears once.
    ordered = sort_choices(choices)
    choice_of = {i + 1: c for i, c in enumerate(ordered)}
    seen = set()
    for row in tree.paths.tolist():
        nodes = [n for n in row if n >= 0]
        assert nodes[0] == 0 and row[len(nodes) :] == [-1] * (5 - len(nodes))
        leaf = choice_of[nodes[-1]]
        assert [choice_of[n] for n in nodes[1:]] == [leaf[:d] for d in range(1, len(leaf) + 1)]
        seen.add(leaf)
    assert seen == set(leaves)
    # Node i attends node j iff choice j is a prefix of choice i (the root is everyone's prefix).
    for i in range(1, 64):
        for j in range(1, 64):
            ci, cj = choice_of[i], choice_of[j]
            assert bool(tree.mask[i, j]) == (ci[: len(cj)] == cj)
    assert tree.mask[:, 0].all()
    assert (tree.head[1:] == np.array([len(c) - 1 for c in ordered])).all()


@pytest.mark.parametrize("name", ["vicuna_7b_stage2", "vicuna_7b_stage1", "vicuna_13b_stage1", "zephyr_stage2"])
def test_other_presets_build(name: str) -> None:
    tree = tree_from_choices(preset(name))
    assert tree.num_nodes == 64
    assert (tree.mask.sum(axis=1) == tree.depth + 1).all()


def test_invalid_choices_and_parents() -> None:
    with pytest.raises(ValueError, match="lacks its prefix"):
        tree_from_choices([(0,), (1, 0)])
    with pytest.raises(ValueError, match="duplicate"):
        tree_from_choices([(0,), (0,)])
    with pytest.raises(ValueError, match="negative top-k rank"):
        tree_from_choices([(-1,)])
    with pytest.raises(ValueError, match="topological"):
        tree_from_parents([-1, 2, 0])
    with pytest.raises(ValueError, match="root"):
        tree_from_parents([0, 0])


def brute_ancestors(parents: list[int], i: int) -> set[int]:
    out = {i}
    while parents[i] != -1:
        i = parents[i]
        out.add(i)
    return out


@st.composite
def random_parents(draw: st.DrawFn) -> list[int]:
    n = draw(st.integers(1, 40))
    return [-1] + [draw(st.integers(0, i - 1)) for i in range(1, n)]


@seed(20240601)
@settings(max_examples=60, deadline=None, derandomize=True)
@given(random_parents())
def test_random_trees_against_brute_force(parents: list[int]) -> None:
    tree = tree_from_parents(parents)
    t = len(parents)
    for i in range(t):
        anc = brute_ancestors(parents, i)
        assert {j for j in range(t) if tree.mask[i, j]} == anc
        assert int(tree.depth[i]) == len(anc) - 1
    leaves = [i for i in range(t) if i not in parents[1:]]
    assert tree.paths.shape == (len(leaves), int(tree.depth.max()) + 1)
    for row, leaf in zip(tree.paths.tolist(), leaves):
        nodes = [n for n in row if n >= 0]
        assert nodes == sorted(brute_ancestors(parents, leaf), key=lambda n: int(tree.depth[n]))
        assert all(parents[b] == a for a, b in zip(nodes, nodes[1:]))


@st.composite
def random_choices(draw: st.DrawFn) -> list[tuple[int, ...]]:
    """A prefix-closed set of choices, built by growing random children."""
    chosen: list[tuple[int, ...]] = []
    frontier: list[tuple[int, ...]] = [()]
    for _ in range(draw(st.integers(1, 25))):
        parent = draw(st.sampled_from(frontier))
        if len(parent) >= 4:
            continue
        child = parent + (draw(st.integers(0, 5)),)
        if child not in chosen:
            chosen.append(child)
            frontier.append(child)
    return chosen


@seed(7)
@settings(max_examples=40, deadline=None, derandomize=True)
@given(random_choices())
def test_random_choices_mask_is_prefix_relation(choices: list[tuple[int, ...]]) -> None:
    tree = tree_from_choices(choices)
    labels = [()] + sort_choices(choices)
    for i, ci in enumerate(labels):
        for j, cj in enumerate(labels):
            assert bool(tree.mask[i, j]) == (ci[: len(cj)] == cj)


def brute_pack(mask: np.ndarray) -> list[list[int]]:
    t, cols = mask.shape
    rows = []
    for i in range(t):
        words = []
        for w in range((cols + 31) // 32):
            value = 0
            for b in range(32):
                j = 32 * w + b
                if j < cols and bool(mask[i, j]):
                    value |= 1 << b
            words.append(value - (1 << 32) if value >= 1 << 31 else value)
        rows.append(words)
    return rows


@pytest.mark.parametrize("t", [1, 5, 31, 32, 33, 64, 65, 100])
def test_pack_mask_against_bit_loop(t: int) -> None:
    mask = np.random.default_rng(t).random((t, t)) < 0.6
    packed = pack_mask(mask)
    assert packed.dtype == np.int32 and packed.shape == (t, (t + 31) // 32)
    assert packed.tolist() == brute_pack(mask)
    assert np.array_equal(unpack_mask(packed, t), mask)


def test_pack_mask_sign_bit_and_padding() -> None:
    mask = np.zeros((2, 40), dtype=bool)
    mask[0, 31] = True  # bit 31 of word 0 -> INT32_MIN
    mask[1, 32] = True  # bit 0 of word 1
    assert pack_mask(mask).tolist() == [[-(2**31), 0], [0, 1]]
    assert pack_mask(mask, words=3).tolist() == [[-(2**31), 0, 0], [0, 1, 0]]
    with pytest.raises(ValueError, match="need 2"):
        pack_mask(mask, words=1)
