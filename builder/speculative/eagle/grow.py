"""EAGLE trees for a batch of sequences at once, level by level, in NumPy: the batched faces of
`builder.speculative.eagle.tree`'s one-sequence generators (`static_tree_steps`, `dynamic_tree_steps`: the
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

EAGLE-2's drafts come from the candidates' chains (`DynamicTrees`: each candidate's ancestor at every level),
so a tree's mask, depths and paths are gathers and one scatter, not walks up parent links. They keep a fixed
shape for a step: P = the batch's most leaves (padding rows are the root alone) and W = depth + 1 (-1 padded),
so a batch of them stacks without ragged copies (tree_verify's contract allows both paddings). P is not padded
further to total_nodes: the checks and the verdict tables cost in proportion to P (measured: EAGLE-2's engine
host at B=1 grew by a third with P = total_nodes), and P <= total_nodes keeps every binding within the engine's
profiles.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from builder.speculative.eagle.tree import static_plan
from builder.speculative.protocols import Draft
from builder.speculative.tree import Tree


@lru_cache(maxsize=64)
def row_index(b: int) -> np.ndarray:  # [B, 1] row indices: arr[row_index(b), idx] gathers idx [B, N] per row
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
        self.tree, self.plan = tree, static_plan(tree)
        b = len(roots)
        self.tokens = np.zeros((b, tree.num_nodes), np.int64)  # [B, T]
        self.tokens[:, 0] = roots
        self.level = 0

    @property
    def done(self) -> bool:
        return self.level >= self.tree.max_depth

    def frontier(self) -> tuple[np.ndarray, np.ndarray]:
        parents = self.plan.frontier_parents[self.level]  # [F]
        return self.frontier_tokens(), np.repeat(parents[None], len(self.tokens), axis=0)

    def frontier_tokens(self) -> np.ndarray:
        """`frontier()`'s tokens alone [B, F] (a static tree's parents are the plan's, the same in every row)."""
        return self.tokens[:, self.plan.frontiers[self.level]]  # the same nodes in every tree

    def answer(self, topk_tokens: np.ndarray, topk_logprobs: np.ndarray) -> None:
        d = self.level
        tok, lp = _topk_arrays(topk_tokens, topk_logprobs, len(self.tokens), len(self.plan.frontiers[d]))
        if not lp.max() <= 0:  # (a NaN maximum fails too; one NumPy call: after a session call each costs ~10+ µs)
            raise ValueError("expand returned log-probs that are NaN or > 0")
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
    cumulative draft log-prob, `depth` levels, keep the best `total_nodes` candidates; ties to the lower index).

    Candidates live in [B, C] buffers, level after level (C: every level's F x K, known once the first answer
    gives K), each with its *chain* — the candidate index of its ancestor at every level, itself at its own,
    -1 below ([B, C, depth]) — so `drafts` reads every kept node's path straight from the chains: no parent
    walks. Scores are kept negated (an ascending stable argsort ranks best first, ties to the lower index). The
    answers' log-probs are checked (<= 0, not NaN) once, in `drafts`, over all levels; with them <= 0 a child
    never outscores its parent, so every kept node's ancestors are kept.

    The buffers and their per-level views are a `_Workspace`, taken from `workspaces` (the caller's dict, kept
    across steps: `EagleDrafter` passes its own) or made for this tree. After a session call this code runs
    with cold caches, where a NumPy call costs ~10-40 µs instead of ~1 (measured on the AMD EPYC: 64 MiB
    streamed between calls), so a level is 8 calls on ready views, a tree's arrays ~30.
    """

    def __init__(
        self,
        roots: np.ndarray,
        *,
        depth: int,
        top_k: int,
        total_nodes: int,
        workspaces: dict[tuple[int, ...], "_Workspace"] | None = None,
    ) -> None:
        if depth < 1 or top_k < 1 or total_nodes < 1:
            raise ValueError(f"need depth, top_k, total_nodes >= 1; got {depth}, {top_k}, {total_nodes}")
        self.depth, self.top_k, self.total_nodes = depth, top_k, total_nodes
        self.roots = np.asarray(roots, np.int64)
        self.level = 0
        self.f_tokens = self.roots[:, None]  # [B, F] frontier tokens (the root's row: a view)
        self.f_parents = _minus_ones(len(self.roots))  # [B, F] row in the previous frontier (-1: the root)
        self._f_neg: np.ndarray | None = None  # [B, F, 1] negated cumulative log-prob (None: the root, 0)
        self._f_chain = _minus_ones(1)  # [B, F, 1, depth] the frontier's chains (unused at the root)
        self._workspaces = {} if workspaces is None else workspaces
        self._ws: _Workspace | None = None  # from the first answer (it gives K)

    @property
    def done(self) -> bool:
        return self.level >= self.depth

    def frontier(self) -> tuple[np.ndarray, np.ndarray]:
        return self.f_tokens, self.f_parents

    def answer(self, topk_tokens: np.ndarray, topk_logprobs: np.ndarray) -> None:
        b, f = self.f_tokens.shape
        tok, lp = _topk_arrays(topk_tokens, topk_logprobs, b, f)
        k = tok.shape[2]
        ws = self._ws
        if ws is None:
            key = (b, self.depth, self.top_k, k)
            ws = self._workspaces.get(key)
            if ws is None:
                if len(self._workspaces) >= 16:  # a few shapes at most (batch sizes, budgets)
                    self._workspaces.clear()
                ws = self._workspaces[key] = _Workspace(*key)
            self._ws = ws
        elif k != ws.k:
            raise ValueError(f"expand returned K={k} after K={ws.k} on an earlier level")
        d = self.level
        lv = ws.levels[d]
        if self._f_neg is None:
            np.negative(lp, out=lv.neg)
        else:
            np.subtract(self._f_neg, lp, out=lv.neg)
        lv.lp[...] = lp
        lv.tok[...] = tok
        if d:  # the ancestors (levels < d) are the parent's chain; level d is the candidate's own index
            lv.ancestors[...] = self._f_chain
        self.level = d + 1
        if d + 1 >= self.depth:
            return
        best = np.argsort(lv.neg_flat, axis=1, kind="stable")[:, : self.top_k]  # [B, F'] this level
        bi = row_index(b)
        self.f_tokens = lv.tok_flat[bi, best]
        self.f_parents = best // k
        self._f_neg = lv.neg_flat[bi, best][:, :, None]
        self._f_chain = lv.chain_flat[bi, best][:, :, None, : d + 1]

    def drafts(self) -> list[Draft]:
        ws = self._ws
        if ws is None or not self.done:
            raise ValueError("drafts() before the last level's answer")
        c = ws.c
        if not (ws.lp <= 0).all():  # (NaN <= 0 is False too)
            raise ValueError("expand returned log-probs that are NaN or > 0")
        b = len(self.roots)
        n = min(self.total_nodes, c)
        t = n + 1
        bi = row_index(b)
        kept = np.sort(np.argsort(ws.neg, axis=1, kind="stable")[:, :n], axis=1)  # [B, n] by index
        ws.node_of[bi, kept] = _arange32(1, t)  # candidate -> node (only the kept slots are read below)
        nodes = ws.nodes(t)  # [B, T, W] each node's path from the root (-1 padded; the root's row is set)
        nodes[:, 1:, 1:] = ws.node_of[bi[:, :, None], ws.chain[bi, kept]]  # (kept: ancestors too, see above)
        depth = np.concatenate([_zeros(b), ws.depth_of[kept]], axis=1)  # [B, T]
        mask = np.zeros((b, t, t + 1), bool)  # column T takes the -1 padding
        mask[bi[:, :, None], _arange(0, t)[None, :, None], nodes] = True
        mask = np.ascontiguousarray(mask[:, :, :t])  # [B, T, T]: node i attends its path
        leaf = mask.sum(axis=1) == 1  # [B, T] no node's path holds node j but its own
        if b == 1:
            paths = nodes[:, np.flatnonzero(leaf[0])]  # [1, P, W]
        else:
            n_leaves = leaf.sum(axis=1)  # [B]
            p = int(n_leaves.max())
            order = np.argsort(~leaf, axis=1, kind="stable")[:, :p]  # [B, p] leaves first, in node order
            paths = nodes[bi, order]  # [B, p, W]
            if p > int(n_leaves.min()):  # rows past a tree's leaves: the root alone
                paths[_arange(0, p)[None, :] >= n_leaves[:, None], 1:] = -1
        toks = np.concatenate([self.roots[:, None], ws.tok[bi, kept]], axis=1)  # [B, T]
        _frozen(toks)  # (the per-step structure stays writeable: the checks cache read-only trees by id, which
        # suits static trees shared by every step, not trees that live one step)
        return [Draft(toks[i], mask[i], depth[i], paths[i]) for i in range(b)]


class _Level:
    """One level's views into a `_Workspace`'s buffers: [B, F, K] for the answer, [B, F*K] to rank and gather."""

    def __init__(self, ws: "_Workspace", off: int, f: int, level: int) -> None:
        b, k, end = ws.b, ws.k, off + f * ws.k
        self.neg_flat, self.tok_flat, self.chain_flat = ws.neg[:, off:end], ws.tok[:, off:end], ws.chain[:, off:end]
        self.neg = self.neg_flat.reshape(b, f, k)  # (a [B, F*K] slice of a [B, C] buffer reshapes as a view)
        self.tok = self.tok_flat.reshape(b, f, k)
        self.lp = ws.lp[:, off:end].reshape(b, f, k)
        self.ancestors = self.chain_flat.reshape(b, f, k, ws.depth)[..., :level]  # [B, F, K, level]


class _Workspace:
    """A `DynamicTrees`' buffers for one (B, depth, top_k, K), kept by its owner (`EagleDrafter`) and reused
    every step — with each level's views made once, a level's answer is NumPy calls on ready views: [B, C]
    tokens, own log-probs, negated cumulative scores, and [B, C, depth] chains whose own-level index is filled
    in here, once (each level's answer rewrites its candidates' ancestors, the columns below)."""

    def __init__(self, b: int, depth: int, top_k: int, k: int) -> None:
        self.b, self.depth, self.k = b, depth, k
        sizes, f = [], 1
        for _ in range(depth):  # level sizes: F x K candidates, the next F = min(top_k, F x K)
            sizes.append(f)
            f = min(top_k, f * k)
        self.c = c = k * sum(sizes)
        self.tok = np.empty((b, c), np.int64)
        self.lp = np.empty((b, c), np.float32)
        self.neg = np.empty((b, c), np.float32)
        self.chain = np.full((b, c, depth), -1, np.int64)
        self.depth_of = np.empty(c, np.int64)  # [C] each candidate's depth in a tree (its level + 1)
        self.levels, off = [], 0
        for level, f in enumerate(sizes):
            self.chain[:, off : off + f * k, level] = np.arange(off, off + f * k)
            self.depth_of[off : off + f * k] = level + 1
            self.levels.append(_Level(self, off, f, level))
            off += f * k
        self.node_of = np.full((b, c + 1), -1, np.int32)  # candidate -> its node in `drafts` (slot c = -1: none)
        self._nodes: dict[int, np.ndarray] = {}

    def nodes(self, t: int) -> np.ndarray:
        """A [B, T, W] int32 buffer of T-node trees' node paths with the root's row (0, -1, ...) and column 0 set."""
        a = self._nodes.get(t)
        if a is None:
            a = self._nodes[t] = np.full((self.b, t, self.depth + 1), -1, np.int32)
            a[:, :, 0] = 0
        return a


def _topk_arrays(topk_tokens: np.ndarray, topk_logprobs: np.ndarray, b: int, f: int) -> tuple[np.ndarray, np.ndarray]:
    """An expansion's ([B, F, K] int64, [B, F, K] fp32) with their shapes checked (`checked_topk`'s rules; the
    log-probs' values are checked by the caller)."""
    tok, lp = topk_tokens, topk_logprobs
    if not (isinstance(tok, np.ndarray) and isinstance(lp, np.ndarray)):
        tok, lp = np.asarray(tok), np.asarray(lp)
    if tok.ndim != 3 or tok.shape[:2] != (b, f) or lp.shape != tok.shape:
        raise ValueError(
            f"expand returned {tuple(tok.shape)} / {tuple(lp.shape)} for {b} x {f} frontier nodes; "
            "expected two [B, F, K] arrays"
        )
    if tok.dtype is not _I64:
        tok = tok.astype(np.int64)
    if lp.dtype is not _F32:
        lp = lp.astype(np.float32)
    return tok, lp


_I64, _F32 = np.dtype(np.int64), np.dtype(np.float32)


@lru_cache(maxsize=256)
def _arange32(lo: int, hi: int) -> np.ndarray:  # [hi - lo] int32 (read-only)
    a = np.arange(lo, hi, dtype=np.int32)
    a.flags.writeable = False
    return a


@lru_cache(maxsize=64)
def _zeros(b: int) -> np.ndarray:  # [B, 1] int64 0 (read-only)
    a = np.zeros((b, 1), np.int64)
    a.flags.writeable = False
    return a


@lru_cache(maxsize=64)
def _minus_ones(b: int) -> np.ndarray:  # [B, 1] int64 -1 (read-only)
    a = np.full((b, 1), -1, np.int64)
    a.flags.writeable = False
    return a


@lru_cache(maxsize=256)
def _arange(lo: int, hi: int) -> np.ndarray:  # [hi - lo] int64 (read-only)
    a = np.arange(lo, hi)
    a.flags.writeable = False
    return a
