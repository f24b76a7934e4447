"""Tree buffers for one step: node order, parents, depth, ancestor mask, paths, packed mask.

Words as in the glossary (`builder.speculative`): a *tree* of *nodes*, node 0 is the *root* (the newest
emitted token), a *path* is a root-to-leaf chain of node indices padded with -1.

Two ways in:

* `tree_from_choices(choices)` — a static Medusa / EAGLE-1 tree. Each choice is a tuple of top-k
  ranks, one per depth. Nodes are the choices sorted by (depth, lexicographic), after the root, as
  in Medusa's `generate_medusa_buffers`. The node for choice `c` is proposed by Medusa head
  `len(c) - 1` at top-k rank `c[-1]` (EAGLE-1: rank `c[-1]` among its parent's draft top-k).
* `tree_from_parents(parents)` — any tree given by a parent index per node (EAGLE-2's dynamic tree).

Tokens are not part of a `Tree`: `fill_tokens` puts a root token and per-head top-k candidates on
the nodes, and `tree_draft` makes the `Draft` the engine step consumes.

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

import torch

from builder.speculative.choices import check_choices
from builder.speculative.engine import Draft

Choice = tuple[int, ...]


@dataclass(frozen=True)
class Tree:
    """The shape of one step's draft; node 0 is the root. Nodes are in topological order."""

    parents: torch.Tensor  # [T] int64; parent node index, -1 for the root
    depth: torch.Tensor  # [T] int64; root 0 (the node's position offset)
    mask: torch.Tensor  # [T, T] bool; mask[i, j]: j is i or an ancestor of i
    paths: torch.Tensor  # [P, D+1] int64; one row per leaf, root-first, -1 padded
    head: torch.Tensor | None = None  # [T] int64; Medusa head proposing node i (= depth-1); root -1
    rank: torch.Tensor | None = None  # [T] int64; top-k rank of node i's token; root -1

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
    head = torch.tensor([-1] + [len(c) - 1 for c in ordered], dtype=torch.int64)  # [T]
    rank = torch.tensor([-1] + [c[-1] for c in ordered], dtype=torch.int64)  # [T]
    return Tree(tree.parents, tree.depth, tree.mask, tree.paths, head=head, rank=rank)


def tree_from_parents(parents: Sequence[int]) -> Tree:
    """Tree buffers from a parent index per node: parents[0] == -1, 0 <= parents[i] < i otherwise."""
    par = [int(p) for p in parents]
    if not par or par[0] != -1:
        raise ValueError("parents[0] must be -1 (node 0 is the root)")
    for i, p in enumerate(par[1:], start=1):
        if not 0 <= p < i:
            raise ValueError(f"parents[{i}] = {p}: need 0 <= parent < {i} (topological node order)")
    parents_t = torch.tensor(par, dtype=torch.int64)  # [T]
    mask = ancestor_mask(parents_t)
    depth = mask.sum(dim=1) - 1  # [T] number of strict ancestors
    return Tree(parents_t, depth, mask, leaf_paths(parents_t, depth))


def ancestor_mask(parents: torch.Tensor) -> torch.Tensor:  # parents [T] int64, topological
    """[T, T] bool: mask[i, j] when j == i or j is an ancestor of i."""
    t = int(parents.shape[0])
    mask = torch.eye(t, dtype=torch.bool)  # [T, T]
    for i in range(1, t):
        mask[i] |= mask[int(parents[i])]
    return mask


def leaf_paths(parents: torch.Tensor, depth: torch.Tensor) -> torch.Tensor:
    """[P, D+1] int64: one root-first path per leaf, leaves in node order, -1 padded."""
    # parents [T] int64, depth [T] int64
    t = int(parents.shape[0])
    has_child = torch.zeros(t, dtype=torch.bool)
    has_child[parents[1:]] = True
    leaves = [i for i in range(t) if not has_child[i]]
    paths = torch.full((len(leaves), int(depth.max()) + 1), -1, dtype=torch.int64)  # [P, D+1]
    for row, leaf in enumerate(leaves):
        node = leaf
        while node != -1:
            paths[row, int(depth[node])] = node
            node = int(parents[node])
    return paths


def pack_mask(mask: torch.Tensor, words: int | None = None) -> torch.Tensor:  # mask [T, C] bool
    """TensorRT-LLM packed mask [T, words] int32: bit j%32 of word j//32 <=> mask[i, j].

    words defaults to ceil(C/32); pass a larger value to pad to an engine's fixed width.
    """
    t, cols = mask.shape
    need = (cols + 31) // 32
    words = need if words is None else words
    if words < need:
        raise ValueError(f"{cols} mask columns need {need} int32 words, got words={words}")
    padded = torch.zeros(t, words * 32, dtype=torch.int64)  # [T, words*32]
    padded[:, :cols] = mask.to(torch.int64)
    weights = torch.bitwise_left_shift(torch.ones(32, dtype=torch.int64), torch.arange(32))  # [32]
    packed = (padded.view(t, words, 32) * weights).sum(dim=-1)  # [T, words] in [0, 2**32)
    packed = torch.where(packed >= 2**31, packed - 2**32, packed)  # two's complement int32
    return packed.to(torch.int32)


def unpack_mask(packed: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """Inverse of `pack_mask`: packed [T, W] int32 -> [T, num_nodes] bool."""
    t, words = packed.shape
    bits = torch.bitwise_and(
        torch.bitwise_right_shift(packed.to(torch.int64).unsqueeze(-1), torch.arange(32)), 1
    )  # [T, words, 32]
    return bits.view(t, words * 32)[:, :num_nodes].to(torch.bool)


def fill_tokens(tree: Tree, root_token: int, topk_tokens: torch.Tensor) -> torch.Tensor:
    """Node tokens [T] int64 for a Medusa tree.

    topk_tokens: [H, K] int64 — each Medusa head's top-k token ids at the root (rank order).
    Node i gets topk_tokens[head[i], rank[i]]; the root gets root_token.
    """
    if tree.head is None or tree.rank is None:
        raise ValueError("fill_tokens needs a tree built from choices (head and rank per node)")
    h, k = topk_tokens.shape
    if tree.max_depth > h or int(tree.rank.max()) >= k:
        raise ValueError(
            f"topk_tokens is [{h}, {k}] but the tree needs {tree.max_depth} heads × {int(tree.rank.max()) + 1} ranks"
        )
    tokens = torch.empty(tree.num_nodes, dtype=torch.int64)  # [T]
    tokens[0] = int(root_token)
    tokens[1:] = topk_tokens[tree.head[1:], tree.rank[1:]]
    return tokens


def tree_draft(tree: Tree, tokens: torch.Tensor, draft_probs: torch.Tensor | None = None) -> Draft:
    """The step's `Draft` for a tree: tokens [T] int64, optional draft_probs [T] fp32."""
    if tokens.shape != (tree.num_nodes,):
        raise ValueError(f"tokens shape {tuple(tokens.shape)} != ({tree.num_nodes},)")
    if draft_probs is not None and draft_probs.shape != (tree.num_nodes,):
        raise ValueError(f"draft_probs shape {tuple(draft_probs.shape)} != ({tree.num_nodes},)")
    return Draft(
        tokens=tokens.to(torch.int64),
        mask=tree.mask.clone(),
        depth=tree.depth.clone(),
        paths=tree.paths.clone(),
        draft_probs=draft_probs,
    )


def medusa_draft(
    tree: Tree,
    root_token: int,
    topk_tokens: torch.Tensor,  # [H, K] int64 per-head top-k token ids at the root
) -> Draft:
    """A Medusa step's Draft: `fill_tokens` on a choices tree, then `tree_draft`.

    A top-k tree is a deterministic draft, so it carries no draft probabilities (q = 1): passing
    the heads' softmax would make rejection mode inexact (see `builder.speculative.verify`).
    """
    return tree_draft(tree, fill_tokens(tree, root_token, topk_tokens))
