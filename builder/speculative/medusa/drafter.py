"""Medusa drafter: head k's top-k at the newest accepted node fill depth k+1 of a static tree.

The heads run inside the engine (`Engine` built with Medusa heads: one fused GEMM in the exported
step graph, the `MedusaHeads` module in the torch reference), on the hidden state of each step's last
accepted node; the engine returns their top-k (`StepResult.medusa_topk`), so this drafter only
places tokens on the tree.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from builder.speculative.protocols import Draft, PrefillResult, StepResult, root_only
from builder.speculative.tree import Tree, medusa_draft, tree_from_parents


def truncate_tree(tree: Tree, nodes: int) -> Tree:
    """The tree's first `nodes` nodes (>= 1). Node order is topological, so they form a subtree."""
    if nodes >= tree.num_nodes:
        return tree
    sub = tree_from_parents(tree.parents[: max(nodes, 1)])
    cut = lambda a: None if a is None else _frozen(a[: max(nodes, 1)].copy())  # noqa: E731
    return Tree(sub.parents, sub.depth, sub.mask, sub.paths, head=cut(tree.head), rank=cut(tree.rank))


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


class MedusaDrafter:
    """Medusa drafts from the heads' top-k the engine returns, over a static tree; `Budgeted`
    (`builder.speculative.protocols`)."""

    def __init__(self, tree: Tree) -> None:
        if tree.head is None or tree.rank is None:
            raise ValueError("Medusa needs a tree built from choices")
        self.tree = tree
        self.max_nodes = tree.num_nodes
        self.top_k = int(tree.rank.max()) + 1  # ranks the engine's heads must return
        self.num_heads = tree.max_depth
        self._topk: dict[int, np.ndarray] = {}  # [H, K] per sequence
        self._tree = tree  # the tree in use (the budget applied)
        self._cut: dict[int, Tree] = {}  # truncated trees by node count (buffers computed once per shape)

    def set_budget(self, nodes: int | None) -> None:
        """Use at most `nodes` tree nodes per step, root included (1: root only; None: the whole tree)."""
        n = self.tree.num_nodes if nodes is None else max(1, min(int(nodes), self.tree.num_nodes))
        if n not in self._cut:
            self._cut[n] = truncate_tree(self.tree, n)
        self._tree = self._cut[n]

    def _take(self, topk: np.ndarray | None) -> np.ndarray:
        if topk is None:
            raise ValueError("the engine runs no Medusa heads (build it with the recipe's Medusa checkpoint)")
        h, k = topk.shape[-2:]
        if h < self.num_heads or k < self.top_k:
            raise ValueError(
                f"the engine's Medusa top-k is [{h}, {k}]; the tree needs [{self.num_heads}, {self.top_k}]"
            )
        return topk

    def start(self, seqs: Sequence[int], prompts: Sequence[Sequence[int]], prefill: PrefillResult) -> None:
        topk = self._take(prefill.medusa_topk)
        for i, s in enumerate(seqs):
            self._topk[s] = topk[i].copy()

    def propose(self, seqs: Sequence[int], roots: Sequence[int]) -> list[Draft]:
        if self._tree.num_nodes == 1:
            return [root_only(int(r)) for r in roots]
        return [medusa_draft(self._tree, int(r), self._topk[s]) for s, r in zip(seqs, roots)]

    def update(self, seqs: Sequence[int], drafts: Sequence[Draft], result: StepResult) -> None:
        topk = self._take(result.medusa_topk)
        for row, s in enumerate(seqs):
            self._topk[s] = topk[row].copy()  # engines may reuse their output buffers

    def release(self, seq: int) -> None:
        self._topk.pop(seq, None)
