"""EAGLE drafter: the draft layer runs over (target hidden, next token) pairs and grows a tree.

Pairs: (h[i], t[i+1]) at position i, as in `builder.speculative.eagle.draft_model`. After a step that
accepted the chain root, a1..ak and emitted a1..ak, bonus, the new pairs are (h_root, a1), …,
(h_ak, bonus); they are committed to the draft's own KV cache at the next `propose`, whose last
output predicts the hidden state at the bonus token (the new root). Tree nodes are then drafted
with tree attention in the tentative tail of that cache (EAGLE-1: static choices; EAGLE-2: dynamic
expansion + reranking, `builder.speculative.eagle_tree`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from builder.speculative.eagle.draft_model import EagleDraft
from builder.speculative.eagle_tree import dynamic_tree, eagle_draft, grow_static_tree
from builder.speculative.engine import Draft, StepOutput
from builder.speculative.tree import Tree


@dataclass(frozen=True)
class DynamicSpec:
    depth: int
    top_k: int
    total_nodes: int


@dataclass
class _Row:
    out: torch.Tensor  # [C] draft output (predicted hidden) at this node
    slot: int | None  # tentative cache slot (None: the root, whose pair is committed)
    ancestors: list[int]  # tentative slots of its ancestors
    depth: int


class EagleDrafter:
    def __init__(self, draft: EagleDraft, tree: Tree | DynamicSpec, capacity: int) -> None:
        self.draft, self.tree = draft.eval(), tree
        budget = tree.depth * tree.top_k if isinstance(tree, DynamicSpec) else tree.num_nodes
        self.capacity = capacity + budget + 1
        self.top_k = tree.top_k if isinstance(tree, DynamicSpec) else int(tree.rank.max()) + 1
        self.cache = draft.new_cache(self.capacity)
        self.pending_hidden = torch.empty(0)  # [m, C] target hidden states of pairs not yet run
        self.pending_tokens: list[int] = []  # [m - 1] their next tokens (the last one is the root)

    def reset(self, prompt_ids: Sequence[int], prefill: StepOutput) -> None:
        self.cache.reset()
        self.pending_hidden = prefill.hidden
        self.pending_tokens = list(prompt_ids[1:])

    @torch.inference_mode()
    def propose(self, root_token: int) -> Draft:
        root_out = self._run_pending(root_token)  # [C]
        self._rows: list[_Row] = []
        self._used = 0
        self._root_pos = self.cache.committed - 1
        self._root = _Row(root_out, None, [], 0)
        if isinstance(self.tree, DynamicSpec):
            t = self.tree
            grown = dynamic_tree(root_token, self._expand, depth=t.depth, top_k=t.top_k, total_nodes=t.total_nodes)
        else:
            grown = grow_static_tree(self.tree, root_token, self._expand)
        return eagle_draft(grown)

    def update(self, draft: Draft, out: StepOutput, accepted: Sequence[int], emitted: Sequence[int]) -> None:
        self.pending_hidden = out.hidden[list(accepted)]  # (k+1, C)
        self.pending_tokens = list(emitted[:-1])

    def _run_pending(self, root_token: int) -> torch.Tensor:
        tokens = torch.tensor([*self.pending_tokens, root_token], dtype=torch.int64)  # [m]
        m = len(tokens)
        assert self.pending_hidden.shape[0] == m, (self.pending_hidden.shape, m)
        start = self.cache.reserve(m)
        pos = torch.arange(start, start + m)
        mask = torch.ones(m, start + m, dtype=torch.bool)
        mask[:, start:] = torch.tril(mask[:, start:])  # causal among the new pairs
        hidden = self.pending_hidden.to(self.draft.dtype)
        out = self.draft(tokens[None], hidden[None], pos[None], mask[None], self.cache, start)  # (1, m, C)
        self.cache.commit_all()
        return out[0, -1]

    def _expand(self, tokens: torch.Tensor, parents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # tokens [F], parents [F] rows of the previous frontier (-1: the root) -> top-k [F, K] each
        if int(parents[0]) == -1:
            rows = [self._root]
        else:
            rows = self._run_frontier(tokens, parents)
        self._rows = rows
        outs = torch.stack([r.out for r in rows])  # (F, C)
        logp = torch.log_softmax(self.draft.logits(outs).float(), dim=-1)  # (F, V)
        top = logp.topk(self.top_k, dim=-1)
        return top.indices, top.values

    def _run_frontier(self, tokens: torch.Tensor, parents: torch.Tensor) -> list[_Row]:
        prev = self._rows
        f = len(tokens)
        committed = self.cache.committed
        start = committed + self._used
        self.cache.reserve(self._used + f)
        mask = torch.zeros(f, start + f, dtype=torch.bool)
        mask[:, :committed] = True
        rows: list[_Row] = []
        for r, p in enumerate(parents.tolist()):
            parent = prev[p]
            anc = parent.ancestors + ([] if parent.slot is None else [parent.slot])
            mask[r, [committed + s for s in anc]] = True
            mask[r, start + r] = True
            rows.append(_Row(parent.out, self._used + r, anc, parent.depth + 1))
        hidden = torch.stack([row.out for row in rows]).to(self.draft.dtype)  # (F, C) parents' outputs
        pos = torch.tensor([self._root_pos + row.depth for row in rows])
        out = self.draft(tokens[None], hidden[None], pos[None], mask[None], self.cache, start)[0]  # (F, C)
        self._used += f
        for r, row in enumerate(rows):
            row.out = out[r]
        return rows
