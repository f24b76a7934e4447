"""Lookahead (LookaheadState) in a greedy decoding loop over a toy target: output must equal plain greedy.

The toy target's next token is a fixed table lookup on the last two tokens of a node's context, where
the context is the committed sequence plus the node's attended nodes ordered by depth. So the
Jacobi window and the step mask are exercised for real (a wrong mask changes the window's outputs,
and the toy engine also asserts that each node sees exactly one token per depth), while the greedy
oracle stays exact. A bigram-state table makes the greedy text periodic, which Lookahead exploits.
"""

from __future__ import annotations

import pytest
import torch

from builder.speculative.lookahead.drafter import LookaheadDrafter, LookaheadState
from builder.speculative.protocols import Draft

VOCAB = 11
TABLE = torch.randint(0, VOCAB, (VOCAB, VOCAB), generator=torch.Generator().manual_seed(5)).numpy()  # [V, V]


def next_token(context: list[int]) -> int:
    return int(TABLE[context[-2], context[-1]])


class ToyTarget:
    """The target's greedy token at every node of a draft, from `next_token` (no KV; the text is kept)."""

    def __init__(self, prompt: list[int]) -> None:
        self.seq = list(prompt)

    def step(self, draft: Draft) -> list[int]:
        out = []
        for i in range(draft.num_nodes):
            seen = sorted((int(draft.depth[j]), j) for j in range(draft.num_nodes) if draft.mask[i, j])
            assert [d for d, _ in seen] == list(range(int(draft.depth[i]) + 1)), f"node {i} has a broken context"
            out.append(next_token(self.seq + [int(draft.tokens[j]) for _, j in seen]))
        return out


def greedy_verify(draft: Draft, target: list[int]) -> tuple[list[int], list[int]]:
    """Longest path whose draft tokens equal the target's argmax at their parents; + bonus token."""
    best = [0]
    for row in draft.paths.tolist():
        accepted = [0]
        for node in row[1:]:
            if node < 0 or int(draft.tokens[node]) != target[accepted[-1]]:
                break
            accepted.append(node)
        if len(accepted) > len(best):
            best = accepted
    return best, [int(draft.tokens[n]) for n in best[1:]] + [target[best[-1]]]


def run(state: LookaheadState, prompt: list[int], length: int) -> tuple[list[int], int, list[int]]:
    engine = ToyTarget(prompt)
    state.reset(prompt)
    root = next_token(prompt)
    text, steps, sizes = [root], 0, []
    while len(text) < length:
        draft = state.propose(root)
        sizes.append(draft.num_nodes)
        target = engine.step(draft)
        accepted, emitted = greedy_verify(draft, target)
        engine.seq += [int(draft.tokens[n]) for n in accepted]
        state.update(draft, target, emitted)
        text += emitted
        root = emitted[-1]
        steps += 1
        assert engine.seq == prompt + text[:-1]  # committed = prompt + everything but the new root
    return text[:length], steps, sizes


def plain_greedy(prompt: list[int], length: int) -> list[int]:
    seq = list(prompt)
    for _ in range(length):
        seq.append(next_token(seq))
    return seq[len(prompt) :]


PROMPT = [1, 2, 3, 4, 5, 6, 7]


@pytest.mark.parametrize("w,n,g", [(4, 3, 3), (3, 4, 2), (5, 5, 4), (2, 2, 1), (4, 4, 0)])
def test_lookahead_equals_plain_greedy(w: int, n: int, g: int) -> None:
    text, steps, sizes = run(LookaheadState(w, n, g), PROMPT, 60)
    assert text == plain_greedy(PROMPT, 60)
    max_draft_len = (n - 2) + (w - 1 + g) * (n - 1)
    assert max(sizes) <= max_draft_len + 1 == LookaheadDrafter(w, n, g).max_nodes
    if g > 0:  # τ: the periodic text (period 3) is found in the pool and accepted; bigrams are ambiguous
        assert 60 / steps > (1.5 if n >= 3 else 1.2)


def test_window_alone_feeds_the_pool() -> None:
    """Without n-grams from the text, accepted drafts can only come from the Jacobi window."""
    drafter = LookaheadState(5, 4, 4, pool_from_text=False)
    text, steps, _ = run(drafter, PROMPT, 60)
    assert text == plain_greedy(PROMPT, 60)
    assert len(drafter.pool) > 0
    assert steps < 60  # some window n-gram was accepted


def test_update_needs_the_latest_draft() -> None:
    drafter = LookaheadState(2, 3, 1)
    drafter.reset(PROMPT)
    draft = drafter.propose(3)
    target = [0] * draft.num_nodes
    copy = Draft(draft.tokens.copy(), draft.mask, draft.depth, draft.paths)
    with pytest.raises(ValueError, match="latest propose"):
        drafter.update(copy, target, [1])
    drafter.update(draft, target, [1])
    with pytest.raises(ValueError, match="latest propose"):
        drafter.update(draft, target, [1])  # already consumed
