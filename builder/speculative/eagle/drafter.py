"""EAGLE drafter: the draft layer runs over (target hidden, next token) pairs and grows a tree per sequence.

Pairs: (h[i], t[i+1]) at position i, as in `builder.speculative.eagle.draft_model`. After a step that
accepted the chain root, a1..ak and emitted a1..ak, bonus, the new pairs are (h_root, a1), …, (h_ak, bonus):
the step's `StepResult.hidden[:, :k+1]` and `StepResult.tokens[:, :k+1]` as they stand. The next `propose`
commits them to the draft's own KV cache (`EagleNet.extend`); the output at the last pair predicts the hidden
state at the bonus token (the new root) and gives the tree's first level. The trees then grow level by level
(EAGLE-1: static choices; EAGLE-2: dynamic expansion + reranking; `builder.speculative.eagle.grow`), one
`EagleNet.expand` call per level for the whole batch, each level's nodes written to the tentative tail of the
draft cache with tree attention.

Draft-net calls per step: one per tree level — the extend *is* the first level's call (its last pair's output
is the root's expansion), so a tree of D levels costs D calls, the floor for a tree grown level by level.
Fusing the extend into the target step graph instead would save no work: on the regime fixture (1 thread) the
extend takes 1.19 ms against 0.61 ms per expand level, the difference being the first read after a target
step of the draft layer + LM head (18.4 MB, cold in cache), which a fused graph pays inside the step, and the
graph would have to run the draft layer over every tree node (the accepted chain is known only after verify).
Of the extend's pairs only the last one's output is used: the ONNX Runtime graph runs o_proj, the MLP and the
LM head for that row alone (`builder.export.eagle`'s `pick_rows`; the earlier pairs only write their KV), so a
step's extend costs about what a one-node level does, and a prompt's pairs about one row's MLP more than
their KV.
A sequence's prompt pairs run when it starts (`start`: the draft's own prefill, right after the target's),
so its first step costs no more than any other. Host work per level is a fixed number of NumPy calls over
the batch; in the steady state (the same sequences as the previous step) the extend reads the previous
`StepResult`'s arrays as they are, copied once in `update` (a `StepResult` lives only until the next step).

An EAGLE-2 setting whose tree the draft's scores cannot change — top_k 1 (a chain), one level (a star) — runs as
that static tree (`runnable`): a tuned EAGLE-2 that picks a chain does EAGLE-1's work for it, one expand per level
over cached level masks, with no ranking. A node budget (`set_budget`) truncates a static tree to its first n nodes
(node order, one tree object per budget) and caps EAGLE-2's total_nodes at n - 1 (and its depth, which cannot
exceed the nodes kept; a capped top_k-1 setting is the shorter chain). At a budget of 1 speculation is off:
`propose` returns root-only drafts without running the draft layer, and the pairs of those steps wait
(`_pairs`) until drafting resumes (one `extend` then commits them all).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import numpy as np

from builder.speculative.eagle.grow import DynamicTrees, StaticTrees, row_index
from builder.speculative.eagle.tree import dynamic_as_static
from builder.speculative.medusa.drafter import truncate_tree
from builder.speculative.protocols import Draft, DraftOutput, EagleNet, PrefillResult, StepResult, root_only
from builder.speculative.tree import Tree

Level = tuple[np.ndarray, "np.ndarray | None"]  # a static tree level's [B, F, U] mask and parents' rows (or None)


@dataclass(frozen=True)
class DynamicSpec:
    """EAGLE-2's setting: `depth` levels, the best `top_k` of a level expanded into top_k children each (the net's
    first top_k ranks: a net exported for more serves a smaller top_k), the best `total_nodes` candidates kept."""

    depth: int
    top_k: int
    total_nodes: int


def runnable(shape: Tree | DynamicSpec) -> Tree | DynamicSpec:
    """The shape `propose` grows: a DynamicSpec whose tree the scores cannot change (top_k 1: a chain; one level: a
    star; `builder.speculative.eagle.tree.dynamic_as_static`) as that static tree — the same drafts, on EAGLE-1's
    path (cached level masks, no ranking) — else with its depth capped at total_nodes (deeper levels keep nothing)."""
    if not isinstance(shape, DynamicSpec):
        return shape
    static = dynamic_as_static(shape.depth, shape.top_k, shape.total_nodes)
    if static is not None:
        return static
    return DynamicSpec(min(shape.depth, shape.total_nodes), shape.top_k, shape.total_nodes)


@dataclass
class _Steady:
    """The pairs of the latest drafted step's sequences (rows in their order), waiting for the next extend."""

    seqs: list[int]
    row: dict[int, int]  # sequence -> row
    tokens: np.ndarray  # [B, W] int64 each row's pair tokens (emitted tokens; -1 past num_new)
    hidden: np.ndarray  # [B, W, C] fp32 each row's pair hidden states (the chain's)
    num_new: np.ndarray  # [B] int64 pairs per row (the step's accepted length)


class EagleDrafter:
    """EAGLE-1 (static tree) or EAGLE-2 (DynamicSpec) over a batched `EagleNet`; `Budgeted`
    (`builder.speculative.protocols`)."""

    def __init__(self, net: EagleNet, tree: Tree | DynamicSpec) -> None:
        self.net, self.tree = net, tree
        if isinstance(tree, DynamicSpec):
            if tree.top_k > net.top_k:
                raise ValueError(f"EAGLE-2 top_k {tree.top_k} exceeds the draft net's top-k ({net.top_k})")
            self.max_nodes = tree.total_nodes + 1
        else:
            if tree.rank is None or int(tree.rank.max()) >= net.top_k:
                raise ValueError(
                    f"the static tree needs top-k ranks up to {None if tree.rank is None else int(tree.rank.max())}, "
                    f"the draft net gives {net.top_k}"
                )
            self.max_nodes = tree.num_nodes
        self._shape: Tree | DynamicSpec = runnable(tree)  # the shape in use (the budget applied)
        self._off = False
        self._steady: _Steady | None = None  # pairs of the latest drafted step, by row
        self._pairs: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # seq -> (tokens [m], hidden [m, C]) waiting
        self._ready: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # seq -> root level (hidden, tok, lp)
        self._started: set[int] = set()
        self._levels: dict[tuple[int, int], tuple[Tree, list[Level]]] = {}  # (id(tree), B) -> `_static_levels`
        self._workspaces: dict = {}  # EAGLE-2's buffers by shape, reused every step (`DynamicTrees`)
        self._cuts: dict[int, Tree] = {}  # a static tree's truncations by node budget (one object each: `_levels`)

    def set_budget(self, nodes: int | None) -> None:
        """Use at most `nodes` tree nodes per step, root included (1: off; None: the configured tree)."""
        t = self.tree
        self._off = nodes is not None and nodes <= 1
        if nodes is None or self._off:
            self._shape = runnable(t)
        elif isinstance(t, DynamicSpec):
            keep = min(t.total_nodes, int(nodes) - 1)
            self._shape = runnable(DynamicSpec(t.depth, t.top_k, keep))
        else:
            self._shape = self._cut(int(nodes))

    def _cut(self, nodes: int) -> Tree:
        """The static tree's first `nodes` nodes, the same object at every budget change to `nodes`."""
        cut = self._cuts.get(nodes)
        if cut is None:
            assert isinstance(self.tree, Tree)
            cut = self._cuts[nodes] = truncate_tree(self.tree, nodes)
        return cut

    # -- sequences -------------------------------------------------------------------------------

    def start(self, seqs: Sequence[int], prompts: Sequence[Sequence[int]], prefill: PrefillResult) -> None:
        """Start the sequences and (unless speculation is off) run their prompt pairs now: the draft's prefill."""
        self.net.start(seqs)
        self._started.update(seqs)
        try:
            for i, s in enumerate(seqs):  # pairs (h[i], t[i+1]); the last pair's token is the first generated one
                tokens = np.array([*prompts[i][1:], int(prefill.tokens[i])], np.int64)
                self._pairs[s] = (tokens, np.asarray(prefill.hidden[i], np.float32))
            if not self._off:
                self._run_pending(list(seqs))
        except BaseException:
            for s in seqs:
                self.release(s)
            raise

    def release(self, seq: int) -> None:
        self._pairs.pop(seq, None)
        self._ready.pop(seq, None)
        if self._steady is not None and seq in self._steady.row:
            self._park(seq)
            self._pairs.pop(seq, None)
        if seq in self._started:
            self._started.discard(seq)
            self.net.release(seq)

    def update(self, seqs: Sequence[int], drafts: Sequence[Draft], result: StepResult) -> None:
        b = len(seqs)
        if self._off:  # root-only steps: each sequence's pairs wait, the step's appended
            for row, s in enumerate(seqs):
                self._park(s)
                self._ready.pop(s, None)  # (its pairs ran; its root-level answer is stale now)
                k = int(result.accepted_len[row])
                new = (result.tokens[row, :k].astype(np.int64), result.hidden[row, :k].copy())
                old = self._pairs.pop(s, None)
                if old is not None:
                    new = (np.concatenate([old[0], new[0]]), np.concatenate([old[1], new[1]]))
                self._pairs[s] = new
            return
        w = result.tokens.shape[1]
        st = self._steady
        if st is None or st.tokens.shape[0] != b or st.tokens.shape[1] != w:
            c = result.hidden.shape[2]
            st = _Steady([], {}, np.zeros((b, w), np.int64), np.zeros((b, w, c), np.float32), np.zeros(b, np.int64))
        st.seqs, st.row = list(seqs), {s: i for i, s in enumerate(seqs)}
        # rows 0..b-1: ours (a step's later rows are sequences that do not draft); copied (the result is the engine's
        # until its next step); -1 -> 0
        np.maximum(result.tokens[:b], 0, out=st.tokens)
        st.hidden[...] = result.hidden[:b]
        st.num_new[...] = result.accepted_len[:b]
        self._steady = st

    def _park(self, seq: int) -> None:
        """Move a sequence's steady pairs into `_pairs` (it leaves the steady batch)."""
        st = self._steady
        if st is None or seq not in st.row:
            return
        i = st.row.pop(seq)
        st.seqs = [s for s in st.seqs if s != seq]
        m = int(st.num_new[i])
        self._pairs[seq] = (st.tokens[i, :m].copy(), st.hidden[i, :m].copy())

    # -- proposing -------------------------------------------------------------------------------

    def propose(self, seqs: Sequence[int], roots: Sequence[int]) -> list[Draft]:
        if self._off:
            return [root_only(int(r)) for r in roots]
        seqs = list(seqs)
        root_out = self._root_level(seqs)  # (hidden [B, C], topk tokens [B, K], topk logprobs [B, K])
        t = self._shape
        r = np.asarray(roots, np.int64)
        grow = (
            DynamicTrees(r, depth=t.depth, top_k=t.top_k, total_nodes=t.total_nodes, workspaces=self._workspaces)
            if isinstance(t, DynamicSpec)
            else StaticTrees(t, r)
        )
        k = t.top_k if isinstance(t, DynamicSpec) and t.top_k < self.net.top_k else None  # ranks used (None: all)
        grow.answer(root_out[1][:, None, :k], root_out[2][:, None, :k])  # the root's level, from the extend
        outs = root_out[0][:, None]  # [B, F=1, C] draft outputs of the previous frontier
        b = len(seqs)
        anc = _no_slots(b)  # [B, F, U] tentative slots each previous-frontier node attends
        levels, width = (t.depth, t.top_k) if isinstance(t, DynamicSpec) else (t.max_depth, t.num_nodes)
        positions = np.empty((b, levels, width), np.int64)  # [B, level, F] every level's positions (F <= width):
        np.add(self.net.committed_lens(seqs)[:, None, None] - 1, _levels(levels), out=positions)  # root + level
        used, level, bi = 0, 1, row_index(b)  # bi [B, 1]: arr[bi, idx] gathers idx [B, F] per row
        static = self._static_levels(t, b) if isinstance(grow, StaticTrees) else None
        while not grow.done:
            if static is not None:  # a static tree: every row's frontier, parents and mask are the tree's
                tokens = grow.frontier_tokens()  # [B, F]
                mask, pick = static[level - 1]
                hidden = outs if pick is None else outs[:, pick]  # [B, F, C] the parents' outputs
            else:
                tokens, parents = grow.frontier()  # [B, F] each
                hidden = outs[bi, parents]  # [B, F, C] the parents' outputs
                mask = _level_mask(anc, parents, used, bi)
            f = tokens.shape[1]
            out = self.net.expand(seqs, tokens, hidden, positions[:, level, :f], used, mask)
            grow.answer(out.topk_tokens[..., :k], out.topk_logprobs[..., :k])
            outs, anc, used, level = out.hidden, mask, used + f, level + 1
        return grow.drafts()

    def _static_levels(self, tree: Tree, b: int) -> list[Level]:
        """Per level of a static tree at batch size B (after the root's, the extend's answer), built once per (tree,
        B): its [B, F, U] tree mask, by the same rule as a dynamic level's (the rows' trees are alike), and which of
        the previous frontier's outputs its nodes read (their parents' rows; None where that is every output in order
        — a chain's levels — so the outputs pass as they are, with no gather). Read-only arrays."""
        key = (id(tree), b)
        cached = self._levels.get(key)
        if cached is not None and cached[0] is tree:
            return cached[1]
        grow, bi = StaticTrees(tree, np.zeros(b, np.int64)), np.arange(b)[:, None]
        anc, used, levels = np.zeros((b, 1, 0), bool), 0, []
        for d in range(1, tree.max_depth):
            grow.level = d
            parents = grow.frontier()[1]  # [B, F]
            mask = _level_mask(anc, parents, used, bi)
            width = anc.shape[1]  # the previous frontier's size
            pick = None if np.array_equal(parents[0], np.arange(width)) else parents[0].copy()
            for a in (mask, pick):
                if a is not None:
                    a.flags.writeable = False
            levels.append((mask, pick))
            anc, used = mask, used + parents.shape[1]
        if len(self._levels) >= 8:  # a few shapes at most (budgets, batch sizes)
            self._levels.pop(next(iter(self._levels)))
        self._levels[key] = (tree, levels)
        return levels

    def _root_level(self, seqs: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each sequence's root-level answer: its waiting pairs run in one extend (or the one `start` computed)."""
        st = self._steady
        if st is not None and st.seqs == seqs:  # the steady state: the previous step's sequences, in order
            if len(seqs) == len(st.num_new):
                tokens, hidden, num_new = st.tokens, st.hidden, st.num_new
            else:  # some left since: their rows are skipped
                idx = np.array([st.row[s] for s in seqs])
                tokens, hidden, num_new = st.tokens[idx], st.hidden[idx], st.num_new[idx]
            m = int(num_new.max())
            out = self.net.extend(seqs, tokens[:, :m], hidden[:, :m], num_new)
            st.seqs, st.row = [], {}  # consumed (the arrays stay for the next update)
            return out.hidden[:, 0], out.topk_tokens[:, 0], out.topk_logprobs[:, 0]
        for s in seqs:
            self._park(s)
        self._run_pending([s for s in seqs if s in self._pairs])
        ready = [self._ready.pop(s) for s in seqs]
        return tuple(np.stack([r[j] for r in ready]) for j in range(3))  # type: ignore[return-value]

    def _run_pending(self, seqs: list[int]) -> None:
        """Run the waiting pairs of `seqs` in one extend; their root-level answers go to `_ready`."""
        if not seqs:
            return
        pend = [self._pairs.pop(s) for s in seqs]
        m = np.array([len(p[0]) for p in pend], np.int64)  # [B]
        c = pend[0][1].shape[1]
        tokens = np.zeros((len(seqs), int(m.max())), np.int64)  # [B, M]
        hidden = np.zeros((len(seqs), int(m.max()), c), np.float32)  # [B, M, C]
        for i, (tok, hid) in enumerate(pend):  # sequences that joined or waited: one row each
            tokens[i, : m[i]] = tok
            hidden[i, : m[i]] = hid
        out: DraftOutput = self.net.extend(seqs, tokens, hidden, m)
        for i, s in enumerate(seqs):
            self._ready[s] = (out.hidden[i, 0].copy(), out.topk_tokens[i, 0].copy(), out.topk_logprobs[i, 0].copy())


def _level_mask(anc: np.ndarray, parents: np.ndarray, used: int, bi: np.ndarray) -> np.ndarray:
    """A level's [B, F, U = used + F] tree mask: each frontier node attends what its parent attended (`anc`, the
    previous level's mask, [B, F_prev, used]) and itself."""
    b, f = parents.shape
    if not used:
        return _eye(b, f)
    return np.concatenate([anc[bi, parents], _eye(b, f)], axis=2)  # every node attends itself


@lru_cache(maxsize=64)
def _eye(b: int, f: int) -> np.ndarray:  # [B, F, F] bool identity per row (read-only)
    a = np.ascontiguousarray(np.broadcast_to(np.eye(f, dtype=bool), (b, f, f)))
    a.flags.writeable = False
    return a


@lru_cache(maxsize=16)
def _levels(n: int) -> np.ndarray:  # [n, 1] int64 0..n-1 (read-only)
    a = np.arange(n)[:, None]
    a.flags.writeable = False
    return a


@lru_cache(maxsize=64)
def _no_slots(b: int) -> np.ndarray:  # [B, 1, 0] bool: the root attends no tentative slot (read-only)
    a = np.zeros((b, 1, 0), bool)
    a.flags.writeable = False
    return a
