"""EAGLE draft trees: EAGLE-1 static trees and EAGLE-2 dynamic trees, as pure functions.

EAGLE has one draft head (a one-layer draft model) applied autoregressively: expanding a node runs
the draft model on that node's token and yields the top-k (token, log-prob) of its children. The
part that runs the draft model stays outside; these functions take a callable

    expand(frontier_tokens, frontier_parents) -> (topk_tokens, topk_logprobs)
        frontier_tokens  [F] int64   the tokens of the nodes to expand now (the *frontier*)
        frontier_parents [F] int64   for each frontier node, the row of its parent in the previous
                                     call's frontier (-1 on the first call, whose frontier is the
                                     root alone) — what a draft model needs to pick the parent's
                                     hidden state and extend its own tree mask (EAGLE's `out_ids`)
        topk_tokens      [F, K] int64  children candidates per frontier node, best first
        topk_logprobs    [F, K] fp32   their draft log-probabilities (<= 0)

EAGLE-1 (`grow_static_tree`): the tree is fixed by choices (`builder.speculative.tree.tree_from_choices`);
node i takes rank `rank[i]` among its parent's top-k. Every depth's nodes that have children are
expanded in one call.

EAGLE-2 (`dynamic_tree`, after SafeAILab/EAGLE `eagle/model/cnets.py` `topK_genrate`): level 1 is
the root's top-k; then `depth - 1` times, the `top_k` candidates of the newest level with the highest
*cumulative* draft log-prob (the sum along the path from the root) are expanded, each into K
children. Finally all candidates of all levels are reranked by cumulative log-prob and the best
`total_nodes` are kept; since a child's cumulative log-prob never exceeds its parent's, the kept set
contains every kept node's ancestors (ties go to the earlier candidate, i.e. the parent, and the
selection checks it). Here `depth` counts draft levels: EAGLE's own `depth=d` argument gives
`d + 1` levels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from builder.speculative.engine import Draft
from builder.speculative.tree import Tree, tree_draft, tree_from_choices, tree_from_parents

Expand = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class GrownTree:
    """A tree with its draft tokens and draft log-probs; node 0 is the root."""

    tree: Tree
    tokens: torch.Tensor  # [T] int64
    logprobs: torch.Tensor  # [T] fp32; log q(token | path to parent); root 0
    scores: torch.Tensor  # [T] fp32; cumulative draft log-prob from the root; root 0


def eagle_draft(grown: GrownTree) -> Draft:
    """The step's Draft. A top-k tree is a deterministic draft, so q = 1 (draft_probs None): passing
    the draft softmax would make rejection mode inexact (see `builder.speculative.verify`)."""
    return tree_draft(grown.tree, grown.tokens)


def static_tree(choices: Sequence[Sequence[int]]) -> Tree:
    """EAGLE-1 static tree from choices (same node order and buffers as a Medusa tree)."""
    return tree_from_choices(choices)


def _call_expand(expand: Expand, tokens: torch.Tensor, parents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Run `expand` and check its shapes and log-probs: ([F, K] int64, [F, K] fp32)."""
    topk_tokens, topk_logprobs = expand(tokens, parents)
    f = int(tokens.shape[0])
    if topk_tokens.dim() != 2 or topk_tokens.shape[0] != f or topk_logprobs.shape != topk_tokens.shape:
        raise ValueError(
            f"expand returned {tuple(topk_tokens.shape)} / {tuple(topk_logprobs.shape)} for {f} frontier nodes; "
            "expected two [F, K] tensors"
        )
    lp = topk_logprobs.to(torch.float32)
    if torch.isnan(lp).any() or (lp > 0).any():
        raise ValueError("expand returned log-probs that are NaN or > 0")
    return topk_tokens.to(torch.int64), lp


def grow_static_tree(tree: Tree, root_token: int, expand: Expand) -> GrownTree:
    """EAGLE-1: fill a static tree depth by depth; node i = rank[i]-th child candidate of its parent."""
    if tree.rank is None:
        raise ValueError("grow_static_tree needs a tree built from choices (rank per node)")
    t = tree.num_nodes
    tokens = torch.zeros(t, dtype=torch.int64)  # [T]
    logprobs = torch.zeros(t, dtype=torch.float32)  # [T]
    tokens[0] = int(root_token)
    parents, depth = tree.parents.tolist(), tree.depth.tolist()
    inner = set(parents[1:])  # nodes with children
    prev_row_of: dict[int, int] = {0: -1}  # frontier node -> its row in the call that expanded it
    for d in range(tree.max_depth):
        frontier = [i for i in range(t) if depth[i] == d and i in inner]
        row_of = {node: r for r, node in enumerate(frontier)}
        f_parents = torch.tensor([prev_row_of[parents[n]] if n else -1 for n in frontier], dtype=torch.int64)
        topk_tokens, topk_lp = _call_expand(expand, tokens[frontier], f_parents)
        for child in range(1, t):
            if depth[child] == d + 1:
                row, rank = row_of[parents[child]], int(tree.rank[child])
                if rank >= topk_tokens.shape[1]:
                    raise ValueError(f"node {child} needs top-k rank {rank}, expand gave K={topk_tokens.shape[1]}")
                tokens[child], logprobs[child] = topk_tokens[row, rank], topk_lp[row, rank]
        prev_row_of = row_of
    scores = torch.zeros(t, dtype=torch.float32)  # [T] cumulative; parents precede children
    for i in range(1, t):
        scores[i] = scores[parents[i]] + logprobs[i]
    return GrownTree(tree, tokens, logprobs, scores)


def rank_candidates(scores: torch.Tensor) -> torch.Tensor:  # scores [C] fp32
    """Candidate indices [C] by cumulative log-prob, best first; ties go to the lower index."""
    return torch.sort(-scores, stable=True).indices


def dynamic_tree(root_token: int, expand: Expand, *, depth: int, top_k: int, total_nodes: int) -> GrownTree:
    """EAGLE-2: expand the best `top_k` frontier per level for `depth` levels, keep `total_nodes`."""
    if depth < 1 or top_k < 1 or total_nodes < 1:
        raise ValueError(f"need depth, top_k, total_nodes >= 1; got {depth}, {top_k}, {total_nodes}")
    cand_tokens, cand_lp, cand_scores, cand_parent = [], [], [], []  # per level: [F*K] each
    f_tokens = torch.tensor([int(root_token)], dtype=torch.int64)  # [F]
    f_parents = torch.tensor([-1], dtype=torch.int64)  # [F] row in previous frontier
    f_cand = torch.tensor([-1], dtype=torch.int64)  # [F] candidate index (-1 = root)
    f_scores = torch.zeros(1, dtype=torch.float32)  # [F]
    offset = 0
    for level in range(depth):
        topk_tokens, topk_lp = _call_expand(expand, f_tokens, f_parents)  # [F, K]
        k = int(topk_tokens.shape[1])
        scores = (f_scores[:, None] + topk_lp).flatten()  # [F*K] cumulative
        cand_tokens.append(topk_tokens.flatten())
        cand_lp.append(topk_lp.flatten())
        cand_scores.append(scores)
        cand_parent.append(f_cand.repeat_interleave(k))
        if level + 1 == depth:
            break
        best = rank_candidates(scores)[:top_k]  # [top_k] indices into this level
        f_tokens, f_parents = topk_tokens.flatten()[best], best // k
        f_cand, f_scores = offset + best, scores[best]
        offset += int(scores.shape[0])
    tokens, lps, scores, parent = (torch.cat(x) for x in (cand_tokens, cand_lp, cand_scores, cand_parent))
    kept = _select(scores, parent, total_nodes)  # [T-1] candidate indices, generation order
    node_of = {int(c): i + 1 for i, c in enumerate(kept)}
    parents = [-1] + [node_of.get(int(parent[c]), 0) for c in kept]
    zero_i, zero_f = torch.zeros(1, dtype=torch.int64), torch.zeros(1, dtype=torch.float32)
    return GrownTree(
        tree_from_parents(parents),
        torch.cat([zero_i + int(root_token), tokens[kept]]),
        torch.cat([zero_f, lps[kept]]),
        torch.cat([zero_f, scores[kept]]),
    )


def _select(scores: torch.Tensor, parent: torch.Tensor, budget: int) -> torch.Tensor:
    """The best `budget` candidates whose parents are kept too, in generation (index) order.

    scores [C] fp32 cumulative log-probs; parent [C] int64 candidate index of the parent (-1 = root).
    """
    kept: list[int] = []
    kept_set: set[int] = set()
    for c in rank_candidates(scores).tolist():
        if len(kept) == budget:
            break
        p = int(parent[c])
        if p != -1 and p not in kept_set:
            raise AssertionError(f"candidate {c} ranks above its parent {p}: cumulative log-probs must not increase")
        kept.append(c)
        kept_set.add(c)
    return torch.tensor(sorted(kept), dtype=torch.int64)
