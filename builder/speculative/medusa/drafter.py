"""Medusa drafter: heads on the last accepted node's hidden state fill a static tree's tokens."""

from __future__ import annotations

from typing import Sequence

import torch

from builder.speculative.engine import Draft, StepOutput
from builder.speculative.medusa.heads import MedusaHeads
from builder.speculative.tree import Tree, medusa_draft


class MedusaDrafter:
    """Head k's top-k at the newest hidden state are the candidates for depth k+1 of the tree."""

    def __init__(self, heads: MedusaHeads, tree: Tree) -> None:
        if tree.head is None or tree.rank is None:
            raise ValueError("Medusa needs a tree built from choices")
        if tree.max_depth > heads.num_heads:
            raise ValueError(f"tree depth {tree.max_depth} exceeds {heads.num_heads} Medusa heads")
        self.heads, self.tree = heads.eval(), tree
        self.top_k = int(tree.rank.max()) + 1
        self.hidden: torch.Tensor | None = None  # [C] hidden state of the newest accepted node

    def reset(self, prompt_ids: Sequence[int], prefill: StepOutput) -> None:
        self.hidden = prefill.hidden[-1]

    @torch.inference_mode()
    def propose(self, root_token: int) -> Draft:
        assert self.hidden is not None, "reset() first"
        x = self.hidden.to(self.heads[0][-1].weight.dtype)
        logits = torch.stack([self.heads[k](x) for k in range(self.tree.max_depth)])  # (depth, V) heads in use
        topk = logits.float().topk(self.top_k, dim=-1).indices  # (depth, K)
        return medusa_draft(self.tree, root_token, topk)

    def update(self, draft: Draft, out: StepOutput, accepted: Sequence[int], emitted: Sequence[int]) -> None:
        self.hidden = out.hidden[accepted[-1]]
