"""Tree buffers for one step: node order, parents, depth, ancestor mask, paths, packed mask. NumPy.

Words as in the glossary (`builder.speculative`): a *tree* of *nodes*, node 0 is the *root* (the
newest emitted token), a *path* is a root-to-leaf chain of node indices padded with -1.

Two ways in:

* `tree_from_choices(choices)` — a static Medusa / EAGLE-1 tree. Each choice is a tuple of top-k
  ranks, one per depth. Nodes are the choices sorted by (depth, lexicographic), after the root, as
  in Medusa's `generate_medusa_buffers`. The node for choice `c` is proposed by Medusa head
  `len(c) - 1` at top-k rank `c[-1]` (EAGLE-1: rank `c[-1]` among its parent's draft top-k).
* `tree_from_parents(parents)` — any tree given by a parent index per node (EAGLE-2's dynamic tree).

A `Tree` is computed once per tree shape; its arrays are shared (read-only) by every `Draft` made
from it. Tokens are not part of a `Tree`: `fill_tokens` puts a root token and per-head top-k
candidates on the nodes, and `tree_draft` makes the `Draft` the engine step consumes.

The TensorRT-LLM packed mask (`pack_mask`) stores row i of the [T, T] mask as ceil(T/32) int32
words: bit (j % 32) of word (j // 32) is set when node i attends node j (least significant bit first;
a set bit 31 makes the word negative, two's complement). Checked against TensorRT-LLM's
`getPackedMask` kernel (`cpp/tensorrt_llm/kernels/speculativeDecoding/explicitDraftTokensKernels.cu`:
column 0 is written to the last character of a bit string read most-significant-first, so it lands
in bit 0) and its Python reference in the unit test `test_convert_mask_to_packed_mask`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from builder.speculative.choices import check_choices
from builder.speculative.protocols import Draft

Choice = tuple[int, ...]


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


@dataclass(frozen=True, eq=False)  # identity equality: trees are cached per object
class Tree:
    """The shape of one step's draft; node 0 is the root. Nodes are in topological order."""

    parents: np.ndarray  # [T] int64; parent node index, -1 for the root
    depth: np.ndarray  # [T] int64; root 0 (the node's position offset)
    mask: np.ndarray  # [T, T] bool; mask[i, j]: j is i or an ancestor of i
    paths: np.ndarray  # [P, D+1] int32; one row per leaf, root-first, -1 padded
    head: np.ndarray | None = None  # [T] int64; Medusa head proposing node i (= depth-1); root -1
    rank: np.ndarray | None = None  # [T] int64; top-k rank of node i's token; root -1

    @property
    def num_nodes(self) -> int:
        return int(self.parents.shape[0])

    @property
    def max_depth(self) -> int:
        return int(self.depth.max())


def sort_choices(choices: Sequence[Sequence[int]]) -> list[Choice]:
    """Choices in node order: by depth, then lexicographically (Medusa's order)."""
    return sorted((tuple(int(r) for r in c) for c in choices), key=lambda c: (len(c), c))


def tree_from_choices(choices: Sequence[Sequence[int]]) -> Tree:
    """Tree buffers for a static tree given as choices (node i+1 = i-th choice in node order).

    Raises ValueError on an empty choice, a negative rank, a duplicate or a missing prefix.
    """
    ordered = sort_choices(choices)
    problems = check_choices(ordered, num_heads=None)
    if problems:
        raise ValueError("; ".join(problems))
    node_of = {c: i + 1 for i, c in enumerate(ordered)}
    parents = [-1] + [node_of[c[:-1]] if len(c) > 1 else 0 for c in ordered]
    tree = tree_from_parents(parents)
    head = _frozen(np.array([-1] + [len(c) - 1 for c in ordered], dtype=np.int64))  # [T]
    rank = _frozen(np.array([-1] + [c[-1] for c in ordered], dtype=np.int64))  # [T]
    return Tree(tree.parents, tree.depth, tree.mask, tree.paths, head=head, rank=rank)


def tree_from_parents(parents: Sequence[int] | np.ndarray) -> Tree:
    """Tree buffers from a parent index per node: parents[0] == -1, 0 <= parents[i] < i otherwise."""
    par = np.asarray(parents, dtype=np.int64)  # [T]
    if par.ndim != 1 or len(par) == 0 or par[0] != -1:
        raise ValueError("parents[0] must be -1 (node 0 is the root)")
    idx = np.arange(len(par))
    bad = np.flatnonzero((par[1:] < 0) | (par[1:] >= idx[1:])) + 1
    if len(bad):
        i = int(bad[0])
        raise ValueError(f"parents[{i}] = {int(par[i])}: need 0 <= parent < {i} (topological node order)")
    mask = ancestor_mask(par)
    depth = mask.sum(axis=1) - 1  # [T] number of strict ancestors
    return Tree(_frozen(par), _frozen(depth), _frozen(mask), _frozen(leaf_paths(par, depth)))


def ancestor_mask(parents: np.ndarray) -> np.ndarray:  # parents [T] int64, topological
    """[T, T] bool: mask[i, j] when j == i or j is an ancestor of i."""
    t = len(parents)
    mask = np.eye(t, dtype=bool)  # [T, T]
    for i in range(1, t):
        mask[i] |= mask[parents[i]]
    return mask


def leaf_paths(parents: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """[P, D+1] int32: one root-first path per leaf, leaves in node order, -1 padded."""
    # parents [T] int64, depth [T] int64
    t = len(parents)
    has_child = np.zeros(t, dtype=bool)
    has_child[parents[1:]] = True
    leaves = np.flatnonzero(~has_child)
    paths = np.full((len(leaves), int(depth.max()) + 1), -1, dtype=np.int32)  # [P, D+1]
    for row, leaf in enumerate(leaves.tolist()):
        node = leaf
        while node != -1:
            paths[row, depth[node]] = node
            node = parents[node]
    return paths


def pack_mask(mask: np.ndarray, words: int | None = None) -> np.ndarray:  # mask [T, C] bool
    """TensorRT-LLM packed mask [T, words] int32: bit j%32 of word j//32 <=> mask[i, j].

    words defaults to ceil(C/32); pass a larger value to pad to an engine's fixed width.
    """
    t, cols = mask.shape
    need = (cols + 31) // 32
    words = need if words is None else words
    if words < need:
        raise ValueError(f"{cols} mask columns need {need} int32 words, got words={words}")
    padded = np.zeros((t, words * 32), dtype=np.int64)  # [T, words*32]
    padded[:, :cols] = mask
    weights = np.left_shift(np.int64(1), np.arange(32, dtype=np.int64))  # [32]
    packed = (padded.reshape(t, words, 32) * weights).sum(axis=-1)  # [T, words] in [0, 2**32)
    return packed.astype(np.uint32).view(np.int32)  # two's complement int32


def unpack_mask(packed: np.ndarray, num_nodes: int) -> np.ndarray:
    """Inverse of `pack_mask`: packed [T, W] int32 -> [T, num_nodes] bool."""
    t, words = packed.shape
    bits = (packed.astype(np.int64)[..., None] >> np.arange(32)) & 1  # [T, words, 32]
    return bits.reshape(t, words * 32)[:, :num_nodes].astype(bool)


def fill_tokens(tree: Tree, root_token: int, topk_tokens: np.ndarray) -> np.ndarray:
    """Node tokens [T] int64 for a Medusa tree.

    topk_tokens: [H, K] int — each Medusa head's top-k token ids at the root (rank order).
    Node i gets topk_tokens[head[i], rank[i]]; the root gets root_token.
    """
    if tree.head is None or tree.rank is None:
        raise ValueError("fill_tokens needs a tree built from choices (head and rank per node)")
    h, k = topk_tokens.shape
    if tree.max_depth > h or int(tree.rank.max()) >= k:
        raise ValueError(
            f"topk_tokens is [{h}, {k}] but the tree needs {tree.max_depth} heads × {int(tree.rank.max()) + 1} ranks"
        )
    tokens = np.empty(tree.num_nodes, dtype=np.int64)  # [T]
    tokens[0] = root_token
    tokens[1:] = topk_tokens[tree.head[1:], tree.rank[1:]]
    return tokens


def tree_draft(tree: Tree, tokens: np.ndarray) -> Draft:
    """The step's `Draft` for a tree: tokens [T] int64; the tree's arrays are shared, not copied.

    A top-k tree is a deterministic draft (q = 1), as tree_verify's rejection mode requires.
    """
    if tokens.shape != (tree.num_nodes,):
        raise ValueError(f"tokens shape {tuple(tokens.shape)} != ({tree.num_nodes},)")
    return Draft(tokens=tokens.astype(np.int64, copy=False), mask=tree.mask, depth=tree.depth, paths=tree.paths)


def medusa_draft(
    tree: Tree,
    root_token: int,
    topk_tokens: np.ndarray,  # [H, K] int per-head top-k token ids at the root
) -> Draft:
    """A Medusa step's Draft: `fill_tokens` on a choices tree, then `tree_draft`."""
    return tree_draft(tree, fill_tokens(tree, root_token, topk_tokens))
