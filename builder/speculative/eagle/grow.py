"""EAGLE trees for a batch of sequences at once, level by level, in NumPy: the batched faces of
`builder.speculative.eagle_tree`'s one-sequence generators (`static_tree_steps`, `dynamic_tree_steps`: the
readable references, which the tests hold these to).

Every sequence's tree grows in lockstep — same level count, same frontier size F per level — so one draft-net
call serves a level of the whole batch and all bookkeeping is array code over [B, …], with no Python per node
or per sequence:

    grow = StaticTrees(tree, roots) | DynamicTrees(roots, depth=…, top_k=…, total_nodes=…)
    while not grow.done:
        tokens, parents = grow.frontier()     # [B, F] frontier tokens; [B, F] row of each one's parent in the
                                              # previous frontier (-1 on the first level: the root)
        grow.answer(topk_tokens, topk_logprobs)   # [B, F, K] each, best first
    drafts = grow.drafts()                    # one `Draft` per sequence

`ancestors(parents)` / `tree_arrays(parents, depth)` build the [B, T, T] ancestor masks and [B, P, W] paths of
B trees given by parent indices (the batched `tree_from_parents`). EAGLE-2's drafts keep a fixed shape for a
step: P = the batch's most leaves (padding rows are the root alone) and W = depth + 1 (-1 padded), so a batch of
them stacks without ragged copies (tree_verify's contract allows both paddings). P is not padded further to
total_nodes: the checks and the verdict tables cost in proportion to P (measured: EAGLE-2's engine host at B=1
grew by a third with P = total_nodes), and P <= total_nodes keeps every binding within the engine's profiles.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from builder.speculative.eagle_tree import _plan, checked_topk
from builder.speculative.engine import Draft
from builder.speculative.tree import Tree


@lru_cache(maxsize=64)
def _rows(b: int) -> np.ndarray:  # [B, 1] row indices: arr[_rows(b), idx] gathers idx [B, N] per row
    r = np.arange(b)[:, None]
    r.flags.writeable = False
    return r


def _frozen(*arrays: np.ndarray) -> None:
    for a in arrays:
        a.flags.writeable = False


class StaticTrees:
    """EAGLE-1 over B sequences: node i of the static tree takes rank `rank[i]` among its parent's draft top-k."""

    def __init__(self, tree: Tree, roots: np.ndarray) -> None:  # roots [B] int64
        if tree.rank is None:
            raise ValueError("a static EAGLE tree needs a tree built from choices (rank per node)")
        self.tree, self.plan = tree, _plan(tree)
        b = len(roots)
        self.tokens = np.zeros((b, tree.num_nodes), np.int64)  # [B, T]
        self.tokens[:, 0] = roots
        self.level = 0

    @property
    def done(self) -> bool:
        return self.level >= self.tree.max_depth

    def frontier(self) -> tuple[np.ndarray, np.ndarray]:
        nodes = self.plan.frontiers[self.level]  # [F] the same nodes in every tree
        parents = self.plan.frontier_parents[self.level]  # [F]
        return self.tokens[:, nodes], np.repeat(parents[None], len(self.tokens), axis=0)

    def answer(self, topk_tokens: np.ndarray, topk_logprobs: np.ndarray) -> None:
        d = self.level
        tok, _ = checked_topk(topk_tokens, topk_logprobs, (len(self.tokens), len(self.plan.frontiers[d])))
        rows, ranks = self.plan.child_rows[d], self.plan.child_ranks[d]
        if self.plan.max_ranks[d] >= tok.shape[2]:
            raise ValueError(f"the tree needs top-k rank {self.plan.max_ranks[d]}, expand gave K={tok.shape[2]}")
        self.tokens[:, self.plan.children[d]] = tok[:, rows, ranks]
        self.level += 1

    def drafts(self) -> list[Draft]:
        t = self.tree
        _frozen(self.tokens)
        return [Draft(row, t.mask, t.depth, t.paths) for row in self.tokens]


class DynamicTrees:
    """EAGLE-2 over B sequences (`dynamic_tree_steps` for one: expand the best `top_k` of the newest level by
    cumulative draft log-prob, `depth` levels, keep the best `total_nodes` candidates; ties to the lower index)."""

    def __init__(self, roots: np.ndarray, *, depth: int, top_k: int, total_nodes: int) -> None:
        if depth < 1 or top_k < 1 or total_nodes < 1:
            raise ValueError(f"need depth, top_k, total_nodes >= 1; got {depth}, {top_k}, {total_nodes}")
        b = len(roots)
        self.depth, self.top_k, self.total_nodes = depth, top_k, total_nodes
        self.roots = np.asarray(roots, np.int64)
        self.level = 0
        self.f_tokens = self.roots[:, None].copy()  # [B, F] frontier tokens
        self.f_parents = np.full((b, 1), -1, np.int64)  # [B, F] row in the previous frontier
        self.f_cand = np.full((b, 1), -1, np.int64)  # [B, F] candidate index (-1: the root)
        self.f_scores = np.zeros((b, 1), np.float32)  # [B, F] cumulative log-prob
        self.cands: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # per level: tokens, scores, parent [B, F*K]

    @property
    def done(self) -> bool:
        return self.level >= self.depth

    def frontier(self) -> tuple[np.ndarray, np.ndarray]:
        return self.f_tokens, self.f_parents

    def answer(self, topk_tokens: np.ndarray, topk_logprobs: np.ndarray) -> None:
        b, f = self.f_tokens.shape
        tok, lp = checked_topk(topk_tokens, topk_logprobs, (b, f))
        k = tok.shape[2]
        scores = (self.f_scores[:, :, None] + lp).reshape(b, f * k)  # [B, F*K] cumulative
        offset = sum(c[0].shape[1] for c in self.cands)
        self.cands.append((tok.reshape(b, f * k), scores, np.repeat(self.f_cand, k, axis=1)))
        self.level += 1
        if self.done:
            return
        best = np.argsort(-scores, axis=1, kind="stable")[:, : self.top_k]  # [B, F'] within this level
        bi = _rows(b)
        self.f_tokens = tok.reshape(b, f * k)[bi, best]
        self.f_parents, self.f_cand = best // k, offset + best
        self.f_scores = scores[bi, best]

    def drafts(self) -> list[Draft]:
        tokens, scores, parent = (np.concatenate(x, axis=1) for x in zip(*self.cands))  # [B, C] each
        b, c = scores.shape
        n = min(self.total_nodes, c)
        kept = np.sort(np.argsort(-scores, axis=1, kind="stable")[:, :n], axis=1)  # [B, n] generation order
        node_of = np.zeros((b, c + 1), np.int64)  # candidate index + 1 -> node (0: the root)
        bi = _rows(b)
        node_of[bi, kept + 1] = np.arange(1, n + 1)
        par_cand = parent[bi, kept]  # [B, n]
        chosen = np.zeros((b, c + 1), bool)
        chosen[:, 0] = True
        chosen[bi, kept + 1] = True
        if not chosen[bi, par_cand + 1].all():
            raise AssertionError("a candidate ranks above its parent: cumulative log-probs must not increase")
        parents = np.concatenate([np.full((b, 1), -1), node_of[bi, par_cand + 1]], axis=1)
        level = np.concatenate([np.full(x[0].shape[1], i + 1) for i, x in enumerate(self.cands)])  # [C] depth
        depth = np.concatenate([np.zeros((b, 1), np.int64), level[kept]], axis=1)  # [B, T]
        toks = np.concatenate([self.roots[:, None], tokens[bi, kept]], axis=1)  # [B, T]
        mask, paths = tree_arrays(parents, depth, None, self.depth + 1)
        _frozen(toks)  # (the per-step structure stays writeable: the checks cache read-only trees by id, which
        # suits static trees shared by every step, not trees that live one step)
        return [Draft(toks[i], mask[i], depth[i], paths[i]) for i in range(b)]


def ancestors(parents: np.ndarray, levels: int) -> np.ndarray:
    """[B, T, T] bool ancestor masks (a node and its ancestors) of B trees given by parents [B, T] (topological,
    -1 at the root), at most `levels` deep: one gather per level."""
    b, t = parents.shape
    eye = np.eye(t, dtype=bool)
    par, bi = np.maximum(parents, 0), _rows(b)  # [B, T] (the root's own row stands in for its parent)
    mask = np.broadcast_to(eye, (b, t, t)).copy()
    for _ in range(levels):  # after step j, every node holds its ancestors up to j levels up
        mask = mask[bi, par] | eye
    mask[:, 0] = eye[0]
    return mask


def tree_arrays(parents: np.ndarray, depth: np.ndarray, p: int | None, w: int) -> tuple[np.ndarray, np.ndarray]:
    """(mask [B, T, T] bool, paths [B, p, w] int32) of B trees: parents [B, T] topological (-1 at the root), depth
    [B, T]. Paths: one per leaf, leaves in node order, root first, -1 padded; rows past the leaves are the root
    alone; p >= the most leaves (None: the most leaves), w > the deepest node."""
    b, t = parents.shape
    mask = ancestors(parents, int(depth.max(initial=0)))
    has_child = np.zeros((b, t + 1), bool)  # column t: the root's parent (-1) lands there
    has_child[_rows(b), np.where(parents < 0, t, parents)] = True
    leaf = ~has_child[:, :t]  # [B, T]
    n_leaves = leaf.sum(axis=1)  # [B]
    p = int(n_leaves.max()) if p is None else p
    order = np.argsort(~leaf, axis=1, kind="stable")[:, :p]  # [B, p] leaves first, in node order
    nodes = np.arange(t)
    # node j lies on leaf l's path at position depth[j] iff j is an ancestor of l (or l itself)
    on_path = mask[_rows(b), order]  # [B, p, T]
    slot = np.where(on_path, depth[:, None, :], w)  # [B, p, T] position of node j on the path (w: not on it)
    paths = np.full((b, p, w + 1), -1, np.int32)
    bi, pi = np.arange(b)[:, None, None], np.arange(p)[None, :, None]
    paths[bi, pi, slot] = np.broadcast_to(nodes, slot.shape).astype(np.int32)  # one node per (path, depth)
    paths = paths[:, :, :w]
    real = np.arange(p)[None, :] < n_leaves[:, None]  # [B, p]
    paths[~real] = -1
    paths[:, :, 0] = 0
    return mask, np.ascontiguousarray(paths)
