"""NgramDrafter: prompt-lookup drafts behind the `Drafter` protocol (zero weights; see `config`); it also implements
`Budgeted`, `EmittedUpdates` and `ChainProposing` (`builder.speculative.protocols`).

Per sequence (`NgramState`) the text so far (prompt, then every emitted token) and an index: each n-gram of the
text, min_match <= n <= max_match, maps to the positions that followed it, oldest first. Per step, the newest n
tokens (the root last) are looked up, longest n first; the first n with an earlier occurrence gives the
continuations: the `max_draft` tokens after its most recent occurrences, newest first, up to `candidates`
distinct ones (at most `SCAN` occurrences read). A continuation that runs into the end of the text goes on
copying from its own start (an overlapping copy, as LZ77 does), so a loop of period p < max_draft drafts in full.

Draft length (`adaptive`): each sequence drafts at most `length` tokens per continuation, starting at
ADAPT_START; a draft accepted in full raises it by ADAPT_UP, one that was not sets it to its accepted drafts +
ADAPT_AFTER (the run the text just copied, a little more), within ADAPT_FLOOR..max_draft (HF transformers'
assisted-generation heuristic is +2 / −1; ours grows faster, +8, and falls to what was accepted). Copy loops then
draft long and prose short. The rule was chosen by replaying greedy decodes against the engines' step-cost curves
(the comment above `config.NgramConfig` says how and what it gave).

Shared pool (`shared_pool`, `pool.SharedPool`): where the sequence's own text has no match at all, the texts of
the sequences this drafter (or another of its factory's, `NgramFactory`) has released are looked up instead and
up to POOL_DRAFT tokens drafted from them; those steps leave the adaptive length alone. Released texts enter
the pool in `release`.

The continuations become one tree: a trie under the root (shared prefixes are one node), paths to its leaves.
Its structure (parents) decides mask, depth and paths; those arrays are made once per structure, read-only, and
reused (chains of each length, recurring trees), so a step allocates only its token array. No match, or a node
budget of 1 (`set_budget`), gives a root-only draft: a plain step costs nothing extra.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from builder.speculative.ngram.config import NgramConfig
from builder.speculative.ngram.pool import POOL_DRAFT, SharedPool, shared_pool_for
from builder.speculative.protocols import Draft, PrefillResult, StepResult, root_only

SCAN = 16  # occurrences read per lookup at most (newest first)
ADAPT_START, ADAPT_UP, ADAPT_AFTER, ADAPT_FLOOR = 2, 8, 2, 2  # adaptive draft length (module docstring)
_MAX_SHAPES = 4096  # cached tree structures (each a few small read-only arrays)
Shape = tuple[np.ndarray, np.ndarray, np.ndarray]  # mask [T, T] bool, depth [T] int64, paths [P, W] int32
_SHAPES: dict[tuple[int, ...], Shape] = {}
_CHAINS: dict[int, Shape] = {}  # chains by draft length (kept: the one-candidate drafts' shapes)


def tree_shape(parents: tuple[int, ...]) -> Shape:
    """(mask, depth, paths) of the tree whose node i > 0 hangs under parents[i] < i (parents[0] = -1, the root);
    paths run from the root to each leaf, in leaf order. Read-only and cached by `parents`."""
    shape = _SHAPES.get(parents)
    if shape is not None:
        return shape
    t = len(parents)
    mask = np.zeros((t, t), dtype=bool)
    depth = np.zeros(t, dtype=np.int64)
    mask[0, 0] = True
    inner = set(parents[1:])
    for i in range(1, t):
        p = parents[i]
        mask[i] = mask[p]
        mask[i, i] = True
        depth[i] = depth[p] + 1
    leaves = [i for i in range(t) if i not in inner]
    paths = np.full((len(leaves), int(depth.max()) + 1), -1, dtype=np.int32)
    for row, leaf in enumerate(leaves):
        chain = np.flatnonzero(mask[leaf])  # the leaf's ancestors and itself, by depth (parents precede children)
        paths[row, : chain.size] = chain
    for a in (mask, depth, paths):
        a.flags.writeable = False
    if len(_SHAPES) >= _MAX_SHAPES:
        _SHAPES.clear()
    shape = _SHAPES[parents] = (mask, depth, paths)
    return shape


class NgramState:
    """One sequence's text and its n-gram index (module docstring)."""

    def __init__(
        self,
        prompt: Sequence[int],
        max_draft: int,
        max_match: int,
        min_match: int,
        candidates: int,
        adaptive: bool = True,
        pool: SharedPool | None = None,
    ) -> None:
        if not (max_draft >= 1 and 1 <= min_match <= max_match and candidates >= 1):
            raise ValueError(
                f"need max_draft >= 1, 1 <= min_match <= max_match, candidates >= 1; got "
                f"{max_draft}, {min_match}, {max_match}, {candidates}"
            )
        self.max_draft, self.max_match, self.min_match, self.candidates = max_draft, max_match, min_match, candidates
        self.text: list[int] = []
        self.index: dict[tuple[int, ...], list[int]] = {}
        self._tail: tuple[int, ...] = ()  # the text's newest max_match tokens
        self.root_in_text = False  # the text already ends with the next step's root (after an update)
        self.adaptive = adaptive
        self.length = min(ADAPT_START, max_draft) if adaptive else max_draft  # tokens per continuation now
        self.pool = pool  # other sequences' texts, looked up where this one's has no match (None: not shared)
        self.pooled = False  # the newest draft came from the pool
        self.extend([int(t) for t in prompt])

    def extend(self, tokens: Sequence[int]) -> None:
        """Append tokens (Python ints: the callers' are) to the text and index the n-grams that end at each (the keys:
        slices of `_tail`, the newest max_match tokens as a tuple, so each n-gram is one tuple slice, the longest the
        tail itself)."""
        text, index, lo, hi, tail = self.text, self.index, self.min_match, self.max_match, self._tail
        get = index.get
        for tok in tokens:
            text.append(tok)
            end = len(text)
            tail = (*tail[1:], tok) if len(tail) >= hi else (*tail, tok)
            for n in range(lo, len(tail) + 1):
                key = tail[-n:]
                at = get(key)
                if at is None:
                    index[key] = [end]
                else:
                    at.append(end)
        self._tail = tail

    def continuations(self, limit: int) -> list[tuple[int, ...]]:
        """Up to `candidates` distinct continuations of the text, at most `limit` tokens each (module docstring)."""
        text, size = self.text, len(self.text)
        for n in range(min(self.max_match, size), self.min_match - 1, -1):
            at = self.index.get(tuple(text[size - n :]))
            if at is None or len(at) < 2:  # the suffix itself is its newest occurrence
                continue
            found: list[tuple[int, ...]] = []
            for p in at[-2 : -2 - SCAN : -1]:  # earlier occurrences, newest first
                cont = text[p : p + limit]
                while len(cont) < limit:  # the copy runs into the end of the text: it continues from its own start
                    cont.append(cont[len(cont) - (size - p)])
                c = tuple(cont)
                if c not in found:
                    found.append(c)
                    if len(found) == self.candidates:
                        break
            return found
        return []

    def _continue(self, root: int, budget: int | None) -> list[tuple[int, ...]]:
        """The continuations after `root` (the text learns it first, once) within this step's length and budget."""
        if not self.root_in_text or self.text[-1] != root:
            self.extend((root,))
            self.root_in_text = True
        room = self.length if budget is None else min(self.length, budget - 1)
        conts = self.continuations(room) if room >= 1 else []
        self.pooled = False
        if not conts and self.pool is not None:
            cap = min(POOL_DRAFT, self.max_draft)
            cont = self.pool.lookup(self.text, cap if budget is None else min(cap, budget - 1))  # () when < 1
            if cont:
                self.pooled, conts = True, [cont]
        return conts

    def propose_chain(self, root: int, budget: int | None) -> list[int]:
        """One candidate's draft as tokens, root first (`propose`'s chain, or the root alone): for `candidates` 1."""
        root = int(root)
        conts = self._continue(root, budget)
        return [root, *conts[0]] if conts else [root]

    def propose(self, root: int, budget: int | None) -> Draft:
        root = int(root)
        conts = self._continue(root, budget)
        if not conts:
            return root_only(root)
        if len(conts) == 1:  # one chain (the default): its shape by length, no trie to build
            chain = conts[0]
            shape = _CHAINS.get(len(chain))
            if shape is None:
                shape = _CHAINS[len(chain)] = tree_shape(tuple(range(-1, len(chain))))
            return Draft(np.array((root, *chain), dtype=np.int64), *shape)
        tokens, parents = [root], [-1]
        child: dict[tuple[int, int], int] = {}
        cap = self.max_draft * self.candidates + 1 if budget is None else budget
        for cont in conts:
            node = 0
            for tok in cont:
                nxt = child.get((node, tok))
                if nxt is None:
                    if len(tokens) >= cap:
                        break
                    nxt = child[(node, tok)] = len(tokens)
                    tokens.append(tok)
                    parents.append(node)
                node = nxt
        mask, depth, paths = tree_shape(tuple(parents))
        return Draft(np.array(tokens, dtype=np.int64), mask, depth, paths)

    def update(self, emitted: Sequence[int], depth: int = 0) -> None:
        """Learn a step's emitted tokens (accepted drafts, then the bonus token: the next root); `depth`: the draft's
        deepest path (0: a root-only step, which leaves the draft length alone)."""
        if self.adaptive and depth > 0 and not self.pooled:
            accepted = len(emitted) - 1
            length = self.length + ADAPT_UP if accepted >= depth else accepted + ADAPT_AFTER
            self.length = max(min(ADAPT_FLOOR, self.max_draft), min(self.max_draft, length))
        if emitted:
            self.extend(emitted)
            self.root_in_text = True


class NgramDrafter:
    """N-gram speculation for a batch of sequences (one `NgramState` each)."""

    def __init__(
        self,
        max_draft: int,
        max_match: int,
        min_match: int,
        candidates: int,
        adaptive: bool = True,
        shared_pool: bool = False,
        pool: SharedPool | None = None,
    ) -> None:
        self.settings = (max_draft, max_match, min_match, candidates, adaptive)
        NgramState((), *self.settings)  # validate now
        # the released sequences' texts: the factory's pool (shared by its drafters) or this drafter's own
        self.pool = (pool if pool is not None else shared_pool_for(max_match)) if shared_pool else None
        self.max_nodes = 1 + max_draft * candidates
        self._seqs: dict[int, NgramState] = {}
        self._budget: int | None = None

    def set_budget(self, nodes: int | None) -> None:
        """Use at most `nodes` tree nodes per step, root included (None: no cap; 1: plain steps)."""
        self._budget = nodes

    def start(self, seqs: Sequence[int], prompts: Sequence[Sequence[int]], prefill: PrefillResult) -> None:
        for s, p in zip(seqs, prompts):
            self._seqs[s] = NgramState(p, *self.settings, pool=self.pool)

    def propose(self, seqs: Sequence[int], roots: Sequence[int]) -> list[Draft]:
        return [self._seqs[s].propose(r, self._budget) for s, r in zip(seqs, roots)]

    def update(self, seqs: Sequence[int], drafts: Sequence[Draft], result: StepResult) -> None:
        for row, (s, d) in enumerate(zip(seqs, drafts)):
            self._seqs[s].update(result.emitted(row), d.width - 1)

    def chains_only(self) -> bool:
        """Every draft is a chain (one candidate): `propose_chain` gives it as a token list (`ChainProposing`)."""
        return self.settings[3] == 1

    def propose_chain(self, seq: int, root: int) -> list[int]:
        """`propose` for one sequence whose drafts are chains (`chains_only`), as tokens — root first, then the
        drafts — instead of a `Draft` (`ChainProposing`: the decoding loop's lone drafted chain,
        `builder.speculative.fast_paths`); calling `propose` after it for the same root gives the same draft."""
        return self._seqs[seq].propose_chain(root, self._budget)

    def update_emitted(self, seq: int, emitted: list[int], depth: int) -> None:
        """`update` for one sequence from what it learns of a step — its emitted tokens and its draft's depth
        (`EmittedUpdates`: the decoding loop's batch-1 chain steps, `builder.speculative.fast_paths`)."""
        self._seqs[seq].update(emitted, depth)

    def update_plain(self, seq: int, root: int, token: int) -> None:
        """A plain step's token (`PlainUpdates`: a step a budget of 1 turned off, run as a plain step)."""
        self._seqs[seq].update([token], 0)

    def release(self, seq: int) -> None:
        state = self._seqs.pop(seq, None)
        if state is not None and self.pool is not None:
            self.pool.add(state.text)


class NgramFactory:
    """Makes `NgramDrafter`s of one setting (an `NgramConfig`); with shared_pool they share one `SharedPool`, so a
    fresh drafter per request (as the benchmarks make them) still drafts from the requests before it."""

    def __init__(self, config: NgramConfig) -> None:
        self.config = config
        self.args = (config.max_draft, config.max_match, config.min_match, config.candidates, config.adaptive)
        NgramDrafter(*self.args)  # validate now
        self.pool: SharedPool | None = None
        self.reset()

    def __call__(self) -> NgramDrafter:
        return NgramDrafter(*self.args, shared_pool=self.config.shared_pool, pool=self.pool)

    def reset(self) -> None:
        """Forget the pool (a benchmark's warm-up request must not seed the timed ones)."""
        self.pool = shared_pool_for(self.config.max_match) if self.config.shared_pool else None
