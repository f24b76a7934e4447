"""One step's drafts as padded batch arrays, checked as a batch: what an engine's host side fills its graph
inputs from. NumPy; words as in the glossary (`builder.speculative`).

`DraftBatch.of(drafts, vocab_size, previous)` stacks the drafts' tokens, masks, depths and paths into
[B, T], [B, T, T], [B, T] and [B, P, W] arrays (T, P, W the largest of the batch; a padding node attends
itself only, sits at depth 0 and is on no path; a padding path is the root alone) and checks them with the
same rules as `builder.speculative.protocols.check_draft` — vectorised over the batch, so a step costs a fixed
number of NumPy calls whatever its size (`check_trees` is tested against `check_draft` on the same cases).

The structure (masks, depths, paths) usually repeats: static trees and Lookahead layouts share read-only
arrays between drafts and steps, and n-gram chains of each length are one read-only structure. When every
draft's arrays are the very objects of `previous` (same order, read-only) — or of a batch in `cache`, the
caller's batches of recent structures (keyed by those arrays' ids, so n-gram chains whose length changes every
step still find theirs) — that batch itself is returned with the new tokens (`DraftBatch.same_structure` tells
the engine that its graph inputs may already hold the rest). Drafts sharing one read-only tree are checked once per tree
(`check_draft`'s cache); others (e.g. EAGLE-2's per-step trees) in one batched check per shape. A batch of one
draft uses the draft's own arrays as [1, ...] views.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import numpy as np

from builder.speculative.protocols import Draft, check_tree, check_trees

TreeKey = tuple[int, int, int]  # ids of (mask, depth, paths)
StructureCache = dict[tuple[TreeKey, ...], "DraftBatch"]  # recent reusable batches by their drafts' keys
CACHED_STRUCTURES = 64  # a StructureCache holds at most this many batches (then starts again)


@lru_cache(maxsize=64)
def _eye(t: int) -> np.ndarray:
    eye: np.ndarray = np.eye(t, dtype=bool)
    eye.flags.writeable = False
    return eye


@dataclass
class DraftBatch:
    """B drafts as padded arrays (module docstring); the structure arrays are shared, never written."""

    tokens: np.ndarray  # [B, T] int64, 0 at padding nodes
    mask: np.ndarray  # [B, T, T] bool
    depth: np.ndarray  # [B, T] int64
    paths: np.ndarray  # [B, P, W] int32
    nodes: np.ndarray  # [B] int64 each draft's node count
    num_paths: np.ndarray  # [B] int64 each draft's path count
    widths: np.ndarray  # [B] int64 each draft's width (D+1)
    pad: np.ndarray  # [B, T] bool: node index >= the draft's node count
    trees: tuple[tuple[np.ndarray, np.ndarray, np.ndarray], ...]  # per draft (mask, depth, paths), kept alive
    keys: list[TreeKey]  # their ids (valid while `trees` keeps them alive)
    reusable: bool  # every structure array read-only: a later batch may reuse this structure by identity
    uniform: bool  # every draft has T nodes
    same_structure: bool = False  # the structure is `previous`'s (set by `of`)

    @property
    def size(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def t(self) -> int:
        return int(self.tokens.shape[1])

    @property
    def p(self) -> int:
        return int(self.paths.shape[1])

    @property
    def w(self) -> int:
        return int(self.paths.shape[2])

    @classmethod
    def of(
        cls,
        drafts: Sequence[Draft],
        vocab_size: int,
        previous: "DraftBatch | None" = None,
        cache: "StructureCache | None" = None,
    ) -> "DraftBatch":
        """The batch of `drafts`, checked; `previous`'s structure, or one in `cache`, when the drafts share it
        (module docstring). A new reusable structure is added to `cache`."""
        if not drafts:
            raise ValueError("a step needs at least one draft")
        keys = [(id(d.mask), id(d.depth), id(d.paths)) for d in drafts]
        if cache is not None and (previous is None or keys != previous.keys):
            previous = cache.get(tuple(keys))
        if previous is not None and previous.reusable and keys == previous.keys:  # (previous keeps those ids alive)
            batch = previous  # the same structure: only the tokens are new
            batch.tokens = _stack_tokens(drafts, previous.nodes, previous.t, previous.uniform)
            batch.same_structure = True
        else:
            batch = _structure(drafts, keys)
            if cache is not None and batch.reusable:
                if len(cache) >= CACHED_STRUCTURES:
                    cache.clear()
                cache[tuple(keys)] = batch
        tokens = batch.tokens
        if tokens.size == 1:  # a plain step: one scalar
            bad = not 0 <= int(tokens[0, 0]) < vocab_size
        else:  # one reduction: a negative id reads as huge
            bad = int(tokens.view(np.uint64).max()) >= vocab_size
        if bad:
            raise ValueError(f"draft token ids must lie in [0, {vocab_size})")
        return batch


def _stack_tokens(drafts: Sequence[Draft], nodes: np.ndarray, t: int, uniform: bool) -> np.ndarray:  # -> [B, T]
    """The drafts' tokens (int64), 0-padded to T; each must be an int64 [n] array of its draft's node count."""
    toks = [d.tokens for d in drafts]
    if any(a.dtype != np.int64 or a.ndim != 1 for a in toks):
        bad = next(a for a in toks if a.dtype != np.int64 or a.ndim != 1)
        raise ValueError(f"tokens must be a non-empty int64 [T] array, got {bad.dtype} {bad.shape}")
    if uniform:
        if len(toks) == 1 and toks[0].shape[0] == t:
            return toks[0][None]  # [1, T] view
        try:
            return np.stack(toks)
        except ValueError:
            pass  # a length differs from the structure's: said below
    lens = np.fromiter((a.shape[0] for a in toks), np.int64, len(toks))
    if (lens != nodes).any():
        raise ValueError(f"tokens of {lens.tolist()} nodes for trees of {nodes.tolist()} nodes")
    out = np.zeros((len(toks), t), np.int64)
    for i, a in enumerate(toks):  # ragged drafts: one row each
        out[i, : a.shape[0]] = a
    return out


def _structure(drafts: Sequence[Draft], keys: list[TreeKey]) -> DraftBatch:
    """Stack and check the drafts' structure (no previous batch to reuse)."""
    b = len(drafts)
    nodes = np.fromiter((d.tokens.shape[0] if d.tokens.ndim == 1 else 0 for d in drafts), np.int64, b)
    if (nodes < 1).any():
        bad = drafts[int(np.flatnonzero(nodes < 1)[0])].tokens
        raise ValueError(f"tokens must be a non-empty int64 [T] array, got {bad.dtype} {bad.shape}")
    t = int(nodes.max())
    uniform = bool((nodes == t).all())
    tokens = _stack_tokens(drafts, nodes, t, uniform)
    trees = tuple((d.mask, d.depth, d.paths) for d in drafts)
    shapes = [(int(n), d.paths.shape) for n, d in zip(nodes.tolist(), drafts)]
    if any(len(s[1]) != 2 for s in shapes):
        bad = drafts[next(i for i, s in enumerate(shapes) if len(s[1]) != 2)].paths
        raise ValueError(f"paths must be a non-empty int32 [P, D+1] array, got {bad.dtype} {list(bad.shape)}")
    p, w = max(s[1][0] for s in shapes), max(s[1][1] for s in shapes)
    if b == 1:  # one draft: its own arrays as [1, ...] views (nothing to pad), checked as `check_draft` does
        check_tree(drafts[0])
        mask, depth, paths = drafts[0].mask[None], drafts[0].depth[None], drafts[0].paths[None]
    else:
        mask, depth, paths = _stacked(drafts, keys, shapes, t, p, w)
    num_paths = np.array([s[1][0] for s in shapes], np.int64)  # [B]
    widths = np.array([s[1][1] for s in shapes], np.int64)  # [B]
    pad = np.arange(t)[None, :] >= nodes[:, None]  # [B, T]
    reusable = all(not (a.flags.writeable or bb.flags.writeable or c.flags.writeable) for a, bb, c in trees)
    for a in (mask, depth, paths, nodes, num_paths, widths, pad):
        a.flags.writeable = False
    return DraftBatch(tokens, mask, depth, paths, nodes, num_paths, widths, pad, trees, keys, reusable, uniform)


def _stacked(
    drafts: Sequence[Draft], keys: list[TreeKey], shapes: list[tuple[int, tuple[int, ...]]], t: int, p: int, w: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The drafts' (mask [B, T, T], depth [B, T], paths [B, P, W]) padded and checked: one check per shared
    tree, one batched check per shape of distinct trees."""
    b, trees = len(drafts), [(d.mask, d.depth, d.paths) for d in drafts]
    mask = np.broadcast_to(_eye(t), (b, t, t)).copy()  # [B, T, T]
    depth = np.zeros((b, t), np.int64)  # [B, T]
    paths = np.full((b, p, w), -1, np.int32)  # [B, P, W]
    paths[:, :, 0] = 0
    groups: dict[tuple[int, tuple[int, ...]], list[int]] = {}
    for i, shape in enumerate(shapes):
        groups.setdefault(shape, []).append(i)
    for (n, (pp, ww)), members in groups.items():  # a fixed number of NumPy calls per shape
        rows = np.asarray(members)
        first = drafts[members[0]]
        if all(keys[i] == keys[members[0]] for i in members):  # one shared tree: checked once (cached if read-only)
            check_tree(first)
            m, dep, pa = first.mask, first.depth, first.paths
        else:  # distinct trees of one shape: read-only ones (Lookahead layouts) by `check_tree`'s cache, the
            m, dep, pa = (np.stack([trees[i][j] for i in members]) for j in range(3))  # rest in one batched check
            distinct = list({keys[i]: i for i in members}.values())
            fresh = [i for i in distinct if any(a.flags.writeable for a in trees[i])]
            for i in distinct:
                if i not in fresh:
                    check_tree(drafts[i])
            if fresh:
                check_trees(*(np.stack([trees[i][j] for i in fresh]) for j in range(3)))
        mask[rows, :n, :n] = m
        depth[rows, :n] = dep
        paths[rows, :pp, :ww] = pa
    return mask, depth, paths
