"""Lookahead's Jacobi window and the step layout (root + window + verification set).

Vocabulary as in `builder.speculative`: *window* (W columns × N-1 levels), *ngram* (length N),
*verification set* (at most G pool n-grams that start with the root token).

The window. Column c holds guessed tokens at levels 0..N-2; the token at (column c, level l) sits
at depth c + l (root = depth 0), so a column is a chain of consecutive positions and, once full, an
n-gram candidate: its level-0 token followed by its N-2 higher levels and the target's output at
its top level. Column 0's level-0 slot *is* the root. A token at (c, l) attends the root, the
level-0 tokens of columns 1..c-1 and its own column's levels 0..l — so it sees exactly one token
at each depth 0..c+l (a plausible context), yet the window is not a tree: level-0 tokens are shared
by all later columns. That is why `Draft.mask` is explicit. This is the layout of
hao-ai-lab/LookaheadDecoding (`lade/models/modeling_llama.py`, `j_make_causal_mask_multilevel`) and
of TensorRT-LLM (`cpp/tensorrt_llm/layers/lookaheadAlgorithm.cpp`, whose `posIdsToMask` derives the
same mask from the position ids); node order here is TensorRT-LLM's, column by column.

Warm-up (TensorRT-LLM's scheme): the window starts with one level of tokens copied from the prompt
and gains one level per step (new level = the target's outputs at the current top level) until it
has N-1 levels. Meanwhile a chain of N-2-f filler tokens (f = levels present, "prefills" in
TensorRT-LLM) sits between the root and column 0, so column c, level l is at depth (N-1-f) + c + l
and every step moves the window one position closer to the root. Once full, each step shifts every
column down one level (its level 0 leaves as the n-gram's first token, the target's output at its top
level enters) — after the root advanced by one token. Like both references (LADE's default
ALWAYS_FWD_ONE), the window moves by one position per step however many tokens were accepted.

Size. With a full window and G verification n-grams the step has
    T = 1 + (N-2) + (W-1)(N-1) + G(N-1)
nodes: the root, column 0 (levels 1..N-2; level 0 is the root), columns 1..W-1 (N-1 levels each) and
G chains of N-1 tokens. So T - 1 equals TensorRT-LLM's
`max_draft_len = (N-2 if N>1 else 0) + (W-1+G)*(N-1)`. During warm-up with f levels the window part
is (N-2-f) + f*W <= (N-2) + (W-1)(N-1), and with fewer than G pool matches T is smaller still.

Paths cover only the verification branches: [0, v1, ..., v_{N-1}] per n-gram; with no n-gram the
single path [0, -1, ...] verifies nothing and the step emits the bonus token only. Unlike
TensorRT-LLM's `treeEncode`, branches that share a prefix are not merged.

Harvesting: a full window's column c yields the n-gram (token at (c,0), levels 1..N-2, target output
at (c, N-2)); for column 0 the first token is the root — as in LADE's `update_token_map`. (TensorRT-LLM
keys column 0 by the target's output at the root instead, one position off; we follow LADE.)
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import numpy as np

from builder.speculative.lookahead.pool import Ngram
from builder.speculative.protocols import Draft


@dataclass(frozen=True)
class Window:
    """The Jacobi window: `columns[c][l]` = token at column c, level l (W columns, f levels each)."""

    columns: tuple[tuple[int, ...], ...]  # [W][f]; when full, columns[0][0] is the root's slot (unused)
    prefill: tuple[int, ...]  # [N-2-f] filler chain before column 0 during warm-up; empty once full
    ngram: int  # N

    def __post_init__(self) -> None:
        f = self.filled
        if self.ngram < 2 or not self.columns or not 1 <= f <= self.ngram - 1:
            raise ValueError(f"window needs N >= 2, W >= 1 and 1..N-1 levels; got N={self.ngram}, levels={f}")
        if any(len(col) != f for col in self.columns):
            raise ValueError("all window columns need the same number of levels")
        if len(self.prefill) != max(self.ngram - 2 - f, 0):
            raise ValueError(f"{f} levels need {max(self.ngram - 2 - f, 0)} prefill tokens, got {len(self.prefill)}")

    @property
    def width(self) -> int:
        return len(self.columns)

    @property
    def filled(self) -> int:
        return len(self.columns[0]) if self.columns else 0

    @property
    def full(self) -> bool:
        return self.filled == self.ngram - 1


def init_window(prompt_ids: Sequence[int], window: int, ngram: int, seed: int = 0) -> Window:
    """A fresh window: one level of tokens drawn from the prompt (seeded), plus warm-up fillers."""
    if not prompt_ids:
        raise ValueError("init_window needs a non-empty prompt to draw initial guesses from")
    rng = random.Random(seed)
    pick = lambda: int(rng.choice(prompt_ids))  # noqa: E731
    columns = tuple((pick(),) for _ in range(window))
    return Window(columns, tuple(pick() for _ in range(max(ngram - 3, 0))), ngram)


@dataclass(frozen=True)
class StepLayout:
    """One Lookahead step's nodes, and where the window and verification set sit among them."""

    draft: Draft
    window_nodes: tuple[tuple[int, ...], ...]  # [W][f] node of each window cell (root's slot -> 0)
    verification_nodes: tuple[tuple[int, ...], ...]  # [G'][N-1] nodes of each verification branch


def step_layout(window: Window, root_token: int, verification: Sequence[Sequence[int]]) -> StepLayout:
    """Nodes, explicit mask, depths and paths for root + prefill + window + verification set.

    verification: at most G n-gram tails (N-1 tokens each) that follow the root token. The mask,
    depths and paths depend only on the layout's shape, so they are built once per shape (read-only,
    shared by every draft of that shape); each step only lays out its tokens.
    """
    n = window.ngram
    for tail in verification:
        if len(tail) != n - 1:
            raise ValueError(f"verification n-gram tail {list(tail)} needs N-1 = {n - 1} tokens")
    shape = _shape(n, window.full, len(window.prefill), window.width, window.filled, len(verification))
    tokens = [int(root_token), *window.prefill]
    for c, column in enumerate(window.columns):
        tokens.extend(column[1:] if window.full and c == 0 else column)  # column 0, level 0 is the root
    for tail in verification:
        tokens.extend(tail)
    draft = Draft(np.array(tokens, dtype=np.int64), shape.mask, shape.depth, shape.paths)
    return StepLayout(draft, shape.window_nodes, shape.verification_nodes)


@dataclass(frozen=True)
class _Shape:
    mask: np.ndarray  # [T, T] bool, read-only
    depth: np.ndarray  # [T] int64, read-only
    paths: np.ndarray  # [P, N] int32, read-only
    window_nodes: tuple[tuple[int, ...], ...]
    verification_nodes: tuple[tuple[int, ...], ...]


@lru_cache(maxsize=512)
def _shape(n: int, full: bool, n_prefill: int, width: int, filled: int, n_branches: int) -> _Shape:
    """The node structure of a step layout (nodes are added in the order `step_layout` lays out tokens)."""
    depth, attends = [0], [[0]]

    def add(d: int, context: list[int]) -> int:
        node = len(depth)
        depth.append(d)
        attends.append(context + [node])
        return node

    shared = [0]  # root + prefill chain: attended by every window node
    for k in range(n_prefill):
        shared.append(add(k + 1, list(shared)))
    offset = 0 if full else n_prefill + 1
    level0: list[int] = []  # level-0 nodes of the columns placed so far
    window_nodes = []
    for c in range(width):
        own: list[int] = []
        for l in range(filled):
            if full and c == 0 and l == 0:
                own.append(0)  # the root's slot
                continue
            own.append(add(offset + c + l, shared + level0 + [x for x in own if x != 0]))
        if own[0] != 0:
            level0.append(own[0])
        window_nodes.append(tuple(own))
    branches = []
    for _ in range(n_branches):
        chain: list[int] = []
        for j in range(n - 1):
            chain.append(add(j + 1, [0] + chain))
        branches.append(tuple(chain))
    mask, depth_a, paths = _arrays(depth, attends, branches, n)
    return _Shape(mask, depth_a, paths, tuple(window_nodes), tuple(branches))


def _arrays(
    depth: list[int], attends: list[list[int]], branches: list[tuple[int, ...]], n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Read-only mask [T, T], depths [T] and paths [P, N] (the verification branches) of a layout."""
    t = len(depth)
    mask = np.zeros((t, t), dtype=bool)  # [T, T]
    for i, row in enumerate(attends):
        mask[i, row] = True
    rows = [[0, *b] for b in branches] or [[0]]
    paths = np.full((len(rows), n), -1, dtype=np.int32)  # [P, N]: D = N-1
    for r, row in enumerate(rows):
        paths[r, : len(row)] = row
    depth_a = np.array(depth, dtype=np.int64)
    for a in (mask, depth_a, paths):
        a.flags.writeable = False
    return mask, depth_a, paths


def advance_window(window: Window, layout: StepLayout, target_tokens: Sequence[int]) -> tuple[Window, list[Ngram]]:
    """The next step's window and the n-grams harvested from this one.

    target_tokens: [T] the target's output token at every node of `layout` (greedy: argmax).
    Warm-up: each column gains the output at its top level as a new level; nothing is harvested.
    Full: each column yields (its N-1 tokens + the output at its top) and keeps the last N-1.
    """
    node_tokens = layout.draft.tokens.tolist()
    outputs = [int(target_tokens[nodes[-1]]) for nodes in layout.window_nodes]  # [W]
    if not window.full:
        columns = tuple(col + (out,) for col, out in zip(window.columns, outputs))
        return Window(columns, window.prefill[1:], window.ngram), []
    ngrams = [tuple(node_tokens[x] for x in nodes) + (out,) for nodes, out in zip(layout.window_nodes, outputs)]
    return Window(tuple(g[1:] for g in ngrams), (), window.ngram), ngrams
