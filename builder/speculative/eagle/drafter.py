"""EAGLE drafter: the draft layer runs over (target hidden, next token) pairs and grows a tree per sequence.

Pairs: (h[i], t[i+1]) at position i, as in `builder.speculative.eagle.draft_model`. After a step that
accepted the chain root, a1..ak and emitted a1..ak, bonus, the new pairs are (h_root, a1), …,
(h_ak, bonus); `propose` commits them to the draft's own KV cache (`EagleNet.extend`), whose last
output predicts the hidden state at the bonus token (the new root) and gives the tree's first level.
The trees then grow level by level (EAGLE-1: static choices; EAGLE-2: dynamic expansion + reranking,
`builder.speculative.eagle_tree`), one `EagleNet.expand` call per level for the whole batch, each
level's nodes written to the tentative tail of the draft cache with tree attention.

A node budget (`set_budget`) truncates a static tree to its first n nodes (node order) and caps
EAGLE-2's total_nodes at n - 1 (and its depth, which cannot exceed the nodes kept). At a budget of 1
speculation is off: `propose` returns root-only drafts without running the draft layer, and the
pairs of those steps wait in `_Pending` until drafting resumes (one `extend` then commits them all).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from builder.speculative.eagle_tree import TreeSteps, dynamic_tree_steps, eagle_draft, static_tree_steps
from builder.speculative.engine import Draft, DraftOutput, EagleNet, PrefillResult, StepResult, root_only
from builder.speculative.medusa.drafter import truncate_tree
from builder.speculative.tree import Tree


@dataclass(frozen=True)
class DynamicSpec:
    depth: int
    top_k: int
    total_nodes: int


@dataclass
class _Pending:
    hidden: np.ndarray  # [m, C] target hidden states of the pairs not yet run
    tokens: list[int]  # [m - 1] their next tokens (the last pair's token is the next root)
    deferred: bool = False  # propose skipped the draft layer (budget 1): these pairs are still pending


@dataclass
class _Growth:
    """One sequence's tree being grown: its generator and the frontier it asked to expand."""

    gen: TreeSteps
    tokens: np.ndarray  # [F] frontier tokens
    parents: np.ndarray  # [F] parent rows in the previous frontier
    outs: np.ndarray  # [F_prev, C] draft outputs of the previous frontier
    anc: np.ndarray  # [F_prev, U_prev] bool tentative columns each previous-frontier node attends
    result: object = None  # the GrownTree once the generator is done


class EagleDrafter:
    """EAGLE-1 (static tree) or EAGLE-2 (DynamicSpec) over a batched `EagleNet`."""

    def __init__(self, net: EagleNet, tree: Tree | DynamicSpec) -> None:
        self.net, self.tree = net, tree
        if isinstance(tree, DynamicSpec):
            if tree.top_k > net.top_k:
                raise ValueError(f"EAGLE-2 top_k {tree.top_k} exceeds the draft net's top-k ({net.top_k})")
            self.max_nodes = tree.total_nodes + 1
        else:
            if tree.rank is None or int(tree.rank.max()) >= net.top_k:
                raise ValueError(f"the static tree needs top-k ranks up to {None if tree.rank is None else int(tree.rank.max())}, "
                                 f"the draft net gives {net.top_k}")  # fmt: skip
            self.max_nodes = tree.num_nodes
        self._pending: dict[int, _Pending] = {}
        self._shape: Tree | DynamicSpec = tree  # the shape in use (the budget applied)
        self._off = False

    def set_budget(self, nodes: int | None) -> None:
        """Use at most `nodes` tree nodes per step, root included (1: off; None: the configured tree)."""
        t = self.tree
        self._off = nodes is not None and nodes <= 1
        if nodes is None or self._off:
            self._shape = t
        elif isinstance(t, DynamicSpec):
            keep = min(t.total_nodes, int(nodes) - 1)
            self._shape = DynamicSpec(min(t.depth, keep), t.top_k, keep)
        else:
            self._shape = truncate_tree(t, int(nodes))

    def start(self, seqs: Sequence[int], prompts: Sequence[Sequence[int]], prefill: PrefillResult) -> None:
        self.net.start(seqs)
        for i, s in enumerate(seqs):
            self._pending[s] = _Pending(prefill.hidden[i].copy(), [int(t) for t in prompts[i][1:]])

    def release(self, seq: int) -> None:
        self._pending.pop(seq, None)
        self.net.release(seq)

    def update(self, seqs: Sequence[int], drafts: Sequence[Draft], result: StepResult) -> None:
        for row, s in enumerate(seqs):
            k = int(result.accepted_len[row])
            hidden, tokens = result.hidden[row, :k].copy(), result.tokens[row, : k - 1].tolist()
            p = self._pending[s]
            if p.deferred:  # the old pairs were not run: the step's root is their last pair's token
                hidden = np.concatenate([p.hidden, hidden])
                tokens = p.tokens + [int(drafts[row].tokens[0])] + tokens
            self._pending[s] = _Pending(hidden, tokens)

    def propose(self, seqs: Sequence[int], roots: Sequence[int]) -> list[Draft]:
        if self._off:
            for s in seqs:
                self._pending[s].deferred = True
            return [root_only(int(r)) for r in roots]
        root_out = self._extend(seqs, roots)  # DraftOutput with F = 1: the roots' level
        growths = [self._grow(int(r)) for r in roots]
        answer = [(root_out.topk_tokens[i], root_out.topk_logprobs[i]) for i in range(len(seqs))]
        for i, g in enumerate(growths):
            g.outs = root_out.hidden[i]  # (1, C)
            g.anc = np.zeros((1, 0), dtype=bool)  # the root is committed: no tentative column
            self._advance(g, answer[i])
        root_pos = np.array([self.net.committed_len(s) - 1 for s in seqs], dtype=np.int64)  # the roots' positions
        used, level = 0, 1
        while any(g.result is None for g in growths):
            used = self._expand_level(seqs, growths, root_pos + level, used)
            level += 1
        return [eagle_draft(g.result) for g in growths]  # type: ignore[arg-type]

    # -- internals -------------------------------------------------------------------------------

    def _grow(self, root: int) -> _Growth:
        t = self._shape
        gen = (dynamic_tree_steps(root, depth=t.depth, top_k=t.top_k, total_nodes=t.total_nodes)
               if isinstance(t, DynamicSpec) else static_tree_steps(t, root))  # fmt: skip
        tokens, parents = next(gen)  # the root's own request, answered by extend
        return _Growth(gen, tokens, parents, np.empty(0), np.empty(0))

    @staticmethod
    def _advance(g: _Growth, answer: tuple[np.ndarray, np.ndarray]) -> None:
        try:
            g.tokens, g.parents = g.gen.send(answer)
        except StopIteration as stop:
            g.result = stop.value

    def _extend(self, seqs: Sequence[int], roots: Sequence[int]) -> DraftOutput:
        pend = [self._pending[s] for s in seqs]
        m = np.array([len(p.tokens) + 1 for p in pend], dtype=np.int64)  # [B]
        c = pend[0].hidden.shape[1]
        tokens = np.zeros((len(seqs), int(m.max())), dtype=np.int64)  # [B, M]
        hidden = np.zeros((len(seqs), int(m.max()), c), dtype=np.float32)  # [B, M, C]
        for i, (p, r) in enumerate(zip(pend, roots)):
            tokens[i, : m[i]] = [*p.tokens, int(r)]
            hidden[i, : m[i]] = p.hidden
        return self.net.extend(seqs, tokens, hidden, m)

    def _expand_level(self, seqs: Sequence[int], growths: list[_Growth], positions: np.ndarray, used: int) -> int:
        """One batched expand call for every unfinished tree's frontier; returns tentative slots used."""
        live = [g.result is None for g in growths]
        f = max(len(g.tokens) for g, ok in zip(growths, live) if ok)
        b, c = len(seqs), self.net.hidden_size
        tokens = np.zeros((b, f), dtype=np.int64)
        hidden = np.zeros((b, f, c), dtype=np.float32)
        mask = np.zeros((b, f, used + f), dtype=bool)
        mask[:, np.arange(f), used + np.arange(f)] = True  # every node (padding too) attends itself
        anc_new = []
        for i, (g, ok) in enumerate(zip(growths, live)):
            n = len(g.tokens) if ok else 0
            if n:
                tokens[i, :n] = g.tokens
                hidden[i, :n] = g.outs[g.parents]
                mask[i, :n, : g.anc.shape[1]] = g.anc[g.parents]
            anc_new.append(mask[i, :n])
        out = self.net.expand(seqs, tokens, hidden, np.repeat(positions[:, None], f, axis=1), used, mask)
        for i, (g, ok) in enumerate(zip(growths, live)):
            if ok:
                n = len(g.tokens)
                g.outs, g.anc = out.hidden[i, :n], anc_new[i]
                self._advance(g, (out.topk_tokens[i, :n], out.topk_logprobs[i, :n]))
        return used + f
