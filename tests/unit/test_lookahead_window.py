"""Lookahead window and step layout: hand-worked tables, TensorRT-LLM's position-id mask rule, sizes."""

from __future__ import annotations

import itertools

import pytest
import torch

from builder.speculative.lookahead.window import Window, advance_window, init_window, step_layout


def draft_len(w: int, n: int, g: int) -> int:
    """TensorRT-LLM's max_draft_len, written out independently of the code under test."""
    return (n - 2 if n > 1 else 0) + (w - 1 + g) * (n - 1)


def attends(mask: torch.Tensor) -> list[list[int]]:
    return [[j for j in range(mask.shape[1]) if mask[i, j]] for i in range(mask.shape[0])]


# W=3, N=3, warm-up (1 level, no prefill since N-2-1 = 0). Root 1, one verification tail (5, 6).
#   node token depth attends         role
#   0    1     0     0               root
#   1    10    1     0 1             column 0, level 0
#   2    11    2     0 1 2           column 1, level 0 (sees column 0's level 0)
#   3    12    3     0 1 2 3         column 2, level 0
#   4    5     1     0 4             verification branch
#   5    6     2     0 4 5
def test_warmup_layout_hand_table() -> None:
    window = Window(((10,), (11,), (12,)), (), 3)
    layout = step_layout(window, 1, [(5, 6)])
    d = layout.draft
    assert d.tokens.tolist() == [1, 10, 11, 12, 5, 6]
    assert d.depth.tolist() == [0, 1, 2, 3, 1, 2]
    assert attends(d.mask) == [[0], [0, 1], [0, 1, 2], [0, 1, 2, 3], [0, 4], [0, 4, 5]]
    assert layout.window_nodes == ((1,), (2,), (3,))
    assert d.paths.tolist() == [[0, 4, 5]]
    # The target said 101, 102, 103 at the window nodes: each column gains a level, no n-grams yet.
    target = [0, 101, 102, 103, 0, 0]
    new, ngrams = advance_window(window, layout, target)
    assert new == Window(((10, 101), (11, 102), (12, 103)), (), 3) and new.full
    assert ngrams == []


# The same window one step later (full). Root 2, no verification set.
#   node token depth attends     role
#   0    2     0     0           root = column 0, level 0
#   1    101   1     0 1         column 0, level 1
#   2    11    1     0 2         column 1, level 0
#   3    102   2     0 2 3       column 1, level 1
#   4    12    2     0 2 4       column 2, level 0 (sees column 1's level 0)
#   5    103   3     0 2 4 5     column 2, level 1
def test_full_layout_and_update_hand_table() -> None:
    window = Window(((10, 101), (11, 102), (12, 103)), (), 3)
    layout = step_layout(window, 2, [])
    d = layout.draft
    assert d.tokens.tolist() == [2, 101, 11, 102, 12, 103]
    assert d.depth.tolist() == [0, 1, 1, 2, 2, 3]
    assert attends(d.mask) == [[0], [0, 1], [0, 2], [0, 2, 3], [0, 2, 4], [0, 2, 4, 5]]
    assert layout.window_nodes == ((0, 1), (2, 3), (4, 5))
    assert d.paths.tolist() == [[0, -1, -1]]  # nothing to verify: the step emits the bonus token
    target = [0, 201, 0, 203, 0, 205]
    new, ngrams = advance_window(window, layout, target)
    # Column 0's n-gram starts with the root (LADE); each column keeps its last N-1 tokens.
    assert ngrams == [(2, 101, 201), (11, 102, 203), (12, 103, 205)]
    assert new == Window(((101, 201), (102, 203), (103, 205)), (), 3)


# W=2, N=4 warm-up with one level: prefill chain of N-2-1 = 1 filler before column 0.
#   node token depth attends   role
#   0    1     0     0         root
#   1    7     1     0 1       prefill
#   2    10    2     0 1 2     column 0, level 0
#   3    11    3     0 1 2 3   column 1, level 0
def test_prefill_chain_hand_table() -> None:
    window = Window(((10,), (11,)), (7,), 4)
    layout = step_layout(window, 1, [])
    assert layout.draft.depth.tolist() == [0, 1, 2, 3]
    assert attends(layout.draft.mask) == [[0], [0, 1], [0, 1, 2], [0, 1, 2, 3]]
    new, _ = advance_window(window, layout, [0, 0, 20, 21])
    assert new == Window(((10, 20), (11, 21)), (), 4)
    layout2 = step_layout(new, 1, [])  # 2 levels, no prefill: column c level l at depth 1 + c + l
    assert layout2.draft.depth.tolist() == [0, 1, 2, 2, 3]


def trtllm_pos_ids_to_mask(depth: list[int]) -> list[list[int]]:
    """TensorRT-LLM's posIdsToMask rule over the draft nodes (root implicit), written from its description:
    walking nodes in order, pop the stack while the new position is <= the top's; attend the stack."""
    rows = [[0]]
    stack: list[tuple[int, int]] = []
    for i in range(1, len(depth)):
        while stack and depth[i] <= stack[-1][1]:
            stack.pop()
        assert not stack or depth[i] == stack[-1][1] + 1
        stack.append((i, depth[i]))
        rows.append([0] + [node for node, _ in stack])
    return rows


@pytest.mark.parametrize("w,n,g", [(1, 2, 1), (3, 2, 2), (4, 3, 2), (5, 4, 3), (3, 5, 2), (2, 6, 0)])
def test_mask_equals_position_id_rule_through_warmup(w: int, n: int, g: int) -> None:
    window = init_window(list(range(50, 60)), w, n, seed=1)
    tails = [tuple(range(100 * (k + 1), 100 * (k + 1) + n - 1)) for k in range(g)]
    for _ in range(n + 1):  # warm-up steps, then full steps
        layout = step_layout(window, 1, tails)
        d = layout.draft
        assert attends(d.mask) == trtllm_pos_ids_to_mask(d.depth.tolist())
        # every node sees exactly one token per depth 0..depth (a well-formed causal context)
        for i, row in enumerate(attends(d.mask)):
            assert sorted(int(d.depth[j]) for j in row) == list(range(int(d.depth[i]) + 1))
        size = d.tokens.shape[0]
        assert size <= draft_len(w, n, g) + 1
        if window.full:
            assert size == draft_len(w, n, g) + 1
        window, _ = advance_window(window, layout, list(range(size)))
    assert window.full


@pytest.mark.parametrize("w,n,g", list(itertools.product([1, 2, 5], [2, 3, 5], [0, 1, 4])))
def test_full_step_size_is_formula_plus_root(w: int, n: int, g: int) -> None:
    window = Window(tuple(tuple(range(n - 1)) for _ in range(w)), (), n)
    tails = [tuple([9] * (n - 1)) for _ in range(g)]
    layout = step_layout(window, 1, tails)
    assert layout.draft.tokens.shape[0] == draft_len(w, n, g) + 1
    assert layout.draft.paths.shape == (max(g, 1), n)
    assert (layout.draft.paths[:, 0] == 0).all()


def test_init_window_is_seeded_and_drawn_from_prompt() -> None:
    a = init_window([3, 4, 5], 4, 5, seed=3)
    assert a == init_window([3, 4, 5], 4, 5, seed=3)
    assert a.filled == 1 and a.width == 4 and len(a.prefill) == 2
    assert set(t for col in a.columns for t in col) | set(a.prefill) <= {3, 4, 5}


def test_invalid_window_and_tail() -> None:
    with pytest.raises(ValueError, match="prefill"):
        Window(((1,),), (), 4)
    with pytest.raises(ValueError, match="N-1"):
        step_layout(Window(((1, 2),), (), 3), 0, [(1,)])
