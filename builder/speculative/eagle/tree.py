"""EAGLE draft trees: EAGLE-1 static trees and EAGLE-2 dynamic trees, as pure functions. NumPy.

EAGLE has one draft head (a one-layer draft model) applied autoregressively: expanding a node runs
the draft model on that node's token and yields the top-k (token, log-prob) of its children. The
part that runs the draft model stays outside. The tree algorithms are generators that *ask* for
expansions, level by level, so one batched draft-model call can serve the same level of many
sequences' trees:

    gen = dynamic_tree_steps(root_token, depth=…, top_k=…, total_nodes=…)
    request = next(gen)                 # (frontier_tokens [F] int64, frontier_parents [F] int64)
    request = gen.send((topk_tokens [F, K] int64, topk_logprobs [F, K] fp32))   # … until StopIteration
                                        # StopIteration.value is the GrownTree

    frontier_tokens   the tokens of the nodes to expand now (the *frontier*); the first request is
                      the root alone
    frontier_parents  for each frontier node, the row of its parent in the previous request's
                      frontier (-1 on the first request) — what a draft model needs to pick the
                      parent's hidden state and extend its own tree mask (EAGLE's `out_ids`)
    topk_tokens       children candidates per frontier node, best first
    topk_logprobs     their draft log-probabilities (<= 0)

`dynamic_tree(root, expand, …)` / `grow_static_tree(tree, root, expand)` drive the same generators
with a callable `expand(frontier_tokens, frontier_parents) -> (topk_tokens, topk_logprobs)`.

EAGLE-1 (`grow_static_tree`): the tree is fixed by choices (`builder.speculative.tree.tree_from_choices`);
node i takes rank `rank[i]` among its parent's top-k. Every depth's nodes that have children are
expanded in one request.

EAGLE-2 (`dynamic_tree`, after SafeAILab/EAGLE `eagle/model/cnets.py` `topK_genrate`): level 1 is
the root's top-k; then `depth - 1` times, the `top_k` candidates of the newest level with the highest
*cumulative* draft log-prob (the sum along the path from the root) are expanded, each into K
children. Finally all candidates of all levels are reranked by cumulative log-prob and the best
`total_nodes` are kept; since a child's cumulative log-prob never exceeds its parent's, the kept set
contains every kept node's ancestors (ties go to the earlier candidate, i.e. the parent, and the
selection checks it). Here `depth` counts draft levels: EAGLE's own `depth=d` argument gives
`d + 1` levels. Some settings grow one tree whatever the scores (`dynamic_as_static`: top_k 1 is a chain, one
level a star); the drafter grows those as EAGLE-1 grows that static tree.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Generator, Sequence

import numpy as np

from builder.speculative.protocols import Draft
from builder.speculative.tree import Tree, tree_draft, tree_from_choices, tree_from_parents

Choice = tuple[int, ...]
Frontier = tuple[np.ndarray, np.ndarray]  # tokens [F] int64, parent rows [F] int64
TopK = tuple[np.ndarray, np.ndarray]  # [F, K] int64, [F, K] fp32
Expand = Callable[[np.ndarray, np.ndarray], TopK]
TreeSteps = Generator[Frontier, TopK, "GrownTree"]


@dataclass(frozen=True)
class GrownTree:
    """A tree with its draft tokens and draft log-probs; node 0 is the root."""

    tree: Tree
    tokens: np.ndarray  # [T] int64
    logprobs: np.ndarray  # [T] fp32; log q(token | path to parent); root 0
    scores: np.ndarray  # [T] fp32; cumulative draft log-prob from the root; root 0


def eagle_draft(grown: GrownTree) -> Draft:
    """The step's Draft. A top-k tree is a deterministic draft (q = 1), as rejection mode requires."""
    return tree_draft(grown.tree, grown.tokens)


def static_tree(choices: Sequence[Sequence[int]]) -> Tree:
    """EAGLE-1 static tree from choices (same node order and buffers as a Medusa tree)."""
    return tree_from_choices(choices)


def checked_topk(topk_tokens: np.ndarray, topk_logprobs: np.ndarray, lead: tuple[int, ...]) -> TopK:
    """An expansion's arrays checked: (lead + [K] int64, lead + [K] fp32 log-probs <= 0, not NaN); `lead` is
    (F,) for one tree's frontier, (B, F) for a batch's."""
    tok, lp = np.asarray(topk_tokens), np.asarray(topk_logprobs)
    if tok.ndim != len(lead) + 1 or tok.shape[:-1] != lead or lp.shape != tok.shape:
        want = ", ".join(["B", "F", "K"][-len(lead) - 1 :])
        raise ValueError(
            f"expand returned {tuple(tok.shape)} / {tuple(lp.shape)} for {' x '.join(map(str, lead))} "
            f"frontier nodes; expected two [{want}] arrays"
        )
    lp = lp.astype(np.float32, copy=False)
    if not (lp <= 0).all():  # (NaN <= 0 is False too)
        raise ValueError("expand returned log-probs that are NaN or > 0")
    return tok.astype(np.int64, copy=False), lp


def _checked(answer: TopK, f: int) -> TopK:
    """Check one tree's expansion: ([F, K] int64, [F, K] fp32)."""
    return checked_topk(answer[0], answer[1], (f,))


def drive(gen: TreeSteps, expand: Expand) -> GrownTree:
    """Run a tree generator to the end with a callable expand."""
    try:
        tokens, parents = next(gen)
        while True:
            tokens, parents = gen.send(expand(tokens, parents))
    except StopIteration as stop:
        return stop.value


@dataclass(frozen=True)
class StaticPlan:
    """Per-depth expansion schedule of a static tree, computed once per tree."""

    frontiers: tuple[np.ndarray, ...]  # per depth d: nodes of depth d with children [F_d]
    frontier_parents: tuple[np.ndarray, ...]  # per depth: parent's row in the previous frontier (-1 at d=0)
    children: tuple[np.ndarray, ...]  # per depth: nodes of depth d+1
    child_rows: tuple[np.ndarray, ...]  # per depth: their parent's row in frontier d
    child_ranks: tuple[np.ndarray, ...]  # per depth: their rank
    max_ranks: tuple[int, ...]  # per depth: the largest of those ranks (-1: no children)


@lru_cache(maxsize=16)
def static_plan(tree: Tree) -> StaticPlan:
    assert tree.rank is not None
    parents, depth = tree.parents, tree.depth
    has_child = np.zeros(tree.num_nodes, dtype=bool)
    has_child[parents[1:]] = True
    fr, fp, ch, cr, rk = [], [], [], [], []
    row_of = np.full(tree.num_nodes, -1, dtype=np.int64)
    prev_row = row_of.copy()
    for d in range(tree.max_depth):
        frontier = np.flatnonzero((depth == d) & has_child)
        row_of[:] = -1
        row_of[frontier] = np.arange(len(frontier))
        fr.append(frontier)
        fp.append(np.where(frontier == 0, -1, prev_row[np.maximum(parents[frontier], 0)]))
        kids = np.flatnonzero(depth == d + 1)
        ch.append(kids)
        cr.append(row_of[parents[kids]])
        rk.append(tree.rank[kids])
        prev_row = row_of.copy()
    return StaticPlan(*(tuple(x) for x in (fr, fp, ch, cr, rk)), tuple(int(r.max()) if len(r) else -1 for r in rk))


def static_tree_steps(tree: Tree, root_token: int) -> TreeSteps:
    """EAGLE-1: fill a static tree depth by depth; node i = rank[i]-th child candidate of its parent."""
    if tree.rank is None:
        raise ValueError("grow_static_tree needs a tree built from choices (rank per node)")
    plan = static_plan(tree)
    tokens = np.zeros(tree.num_nodes, dtype=np.int64)  # [T]
    logprobs = np.zeros(tree.num_nodes, dtype=np.float32)  # [T]
    tokens[0] = root_token
    for d in range(tree.max_depth):
        frontier = plan.frontiers[d]
        topk_tokens, topk_lp = _checked((yield tokens[frontier], plan.frontier_parents[d]), len(frontier))
        rows, ranks = plan.child_rows[d], plan.child_ranks[d]
        if len(ranks) and int(ranks.max()) >= topk_tokens.shape[1]:
            raise ValueError(f"the tree needs top-k rank {int(ranks.max())}, expand gave K={topk_tokens.shape[1]}")
        tokens[plan.children[d]] = topk_tokens[rows, ranks]
        logprobs[plan.children[d]] = topk_lp[rows, ranks]
    scores = np.zeros(tree.num_nodes, dtype=np.float32)  # [T] cumulative; parents precede children
    for i in range(1, tree.num_nodes):
        scores[i] = scores[tree.parents[i]] + logprobs[i]
    return GrownTree(tree, tokens, logprobs, scores)


def grow_static_tree(tree: Tree, root_token: int, expand: Expand) -> GrownTree:
    return drive(static_tree_steps(tree, root_token), expand)


def rank_candidates(scores: np.ndarray) -> np.ndarray:  # scores [C] fp32
    """Candidate indices [C] by cumulative log-prob, best first; ties go to the lower index."""
    return np.argsort(-scores, kind="stable")


def dynamic_tree_steps(root_token: int, *, depth: int, top_k: int, total_nodes: int) -> TreeSteps:
    """EAGLE-2: expand the best `top_k` frontier per level for `depth` levels, keep `total_nodes`."""
    if depth < 1 or top_k < 1 or total_nodes < 1:
        raise ValueError(f"need depth, top_k, total_nodes >= 1; got {depth}, {top_k}, {total_nodes}")
    cand_tokens, cand_lp, cand_scores, cand_parent = [], [], [], []  # per level: [F*K] each
    f_tokens = np.array([root_token], dtype=np.int64)  # [F]
    f_parents = np.array([-1], dtype=np.int64)  # [F] row in previous frontier
    f_cand = np.array([-1], dtype=np.int64)  # [F] candidate index (-1 = root)
    f_scores = np.zeros(1, dtype=np.float32)  # [F]
    offset = 0
    for level in range(depth):
        topk_tokens, topk_lp = _checked((yield f_tokens, f_parents), len(f_tokens))  # [F, K]
        k = topk_tokens.shape[1]
        scores = (f_scores[:, None] + topk_lp).reshape(-1)  # [F*K] cumulative
        cand_tokens.append(topk_tokens.reshape(-1))
        cand_lp.append(topk_lp.reshape(-1))
        cand_scores.append(scores)
        cand_parent.append(np.repeat(f_cand, k))
        if level + 1 == depth:
            break
        best = rank_candidates(scores)[:top_k]  # [top_k] indices into this level
        f_tokens, f_parents = topk_tokens.reshape(-1)[best], best // k
        f_cand, f_scores = offset + best, scores[best]
        offset += len(scores)
    tokens, lps, scores, parent = (np.concatenate(x) for x in (cand_tokens, cand_lp, cand_scores, cand_parent))
    kept = _select(scores, parent, total_nodes)  # [T-1] candidate indices, generation order
    node_of = np.zeros(len(scores) + 1, dtype=np.int64)  # candidate index + 1 -> node (root: 0)
    node_of[kept + 1] = np.arange(1, len(kept) + 1)
    parents = np.concatenate([[-1], node_of[parent[kept] + 1]])
    return GrownTree(
        tree_from_parents(parents),
        np.concatenate([[root_token], tokens[kept]]).astype(np.int64),
        np.concatenate([[0.0], lps[kept]]).astype(np.float32),
        np.concatenate([[0.0], scores[kept]]).astype(np.float32),
    )


def dynamic_tree(root_token: int, expand: Expand, *, depth: int, top_k: int, total_nodes: int) -> GrownTree:
    return drive(dynamic_tree_steps(root_token, depth=depth, top_k=top_k, total_nodes=total_nodes), expand)


def dynamic_as_static(depth: int, top_k: int, total_nodes: int) -> Tree | None:
    """The static tree an EAGLE-2 setting grows whatever the draft's scores, or None where the scores shape it.

    With top_k children per expanded node (K = top_k: what `EagleDrafter` asks of its net, and the candidate count
    the recipe's check assumes), no level past `total_nodes` can hold a kept node (a node at level L keeps its L - 1
    ancestors), so `levels` = min(depth, total_nodes) and:

        top_k 1        each level is the best child of the previous one: the chain of `levels` nodes, rank 0 each
                       (kept: the best `levels` of a chain whose scores fall along it, ties to the parent)
        levels 1       the root's best min(top_k, total_nodes) children: the star of ranks 0, 1, …
        levels 2, all  every candidate kept (total_nodes >= top_k + top_k²): the full two-level top_k-ary tree

    Ties go to the lower candidate index in `dynamic_tree_steps`, i.e. to the lower rank of the same parent and to
    the parent before its child, so these trees are the dynamic ones node for node (nodes, order, paths). One
    `Tree` object per tree (cached): `EagleDrafter` caches its level masks per tree object."""
    if depth < 1 or top_k < 1 or total_nodes < 1:
        raise ValueError(f"need depth, top_k, total_nodes >= 1; got {depth}, {top_k}, {total_nodes}")
    levels = min(depth, total_nodes)
    if top_k == 1:
        return _fixed_tree(tuple((0,) * d for d in range(1, levels + 1)))
    if levels == 1:
        return _fixed_tree(tuple((r,) for r in range(min(top_k, total_nodes))))
    if levels == 2 and total_nodes >= top_k + top_k * top_k:
        return _fixed_tree(
            tuple((r,) for r in range(top_k)) + tuple((r, s) for r in range(top_k) for s in range(top_k))
        )
    return None


@lru_cache(maxsize=64)
def _fixed_tree(choices: tuple[Choice, ...]) -> Tree:
    return static_tree(choices)


def _select(scores: np.ndarray, parent: np.ndarray, budget: int) -> np.ndarray:
    """The best `budget` candidates whose parents are kept too, in generation (index) order.

    scores [C] fp32 cumulative log-probs; parent [C] int64 candidate index of the parent (-1 = root).
    """
    kept = rank_candidates(scores)[:budget]
    chosen = np.zeros(len(scores) + 1, dtype=bool)  # candidate index + 1; slot 0 = the root
    chosen[0] = True
    chosen[kept + 1] = True
    orphans = kept[~chosen[parent[kept] + 1]]
    if len(orphans):
        c = int(orphans[0])
        raise AssertionError(
            f"candidate {c} ranks above its parent {int(parent[c])}: cumulative log-probs must not increase"
        )
    return np.sort(kept)
