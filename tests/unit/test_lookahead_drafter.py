"""LookaheadDrafter in a greedy decoding loop over a toy target: output must equal plain greedy decoding.

The toy target's next token is a fixed table lookup on the last two tokens of a node's context, where
the context is the committed sequence plus the node's attended nodes ordered by depth. So the
Jacobi window and the step mask are exercised for real (a wrong mask changes the window's outputs,
and the toy engine also asserts that each node sees exactly one token per depth), while the greedy
oracle stays exact. A bigram-state table makes the greedy text periodic, which Lookahead exploits.
"""

from __future__ import annotations

import pytest
import torch

from builder.speculative.engine import Draft, StepOutput
from builder.speculative.lookahead.drafter import LookaheadDrafter

VOCAB = 11
TABLE = torch.randint(0, VOCAB, (VOCAB, VOCAB), generator=torch.Generator().manual_seed(5))  # [V, V]


def next_token(context: list[int]) -> int:
    return int(TABLE[context[-2], context[-1]])


def one_hot(rows: list[int]) -> torch.Tensor:  # [T, V] fp32 logits
    return torch.nn.functional.one_hot(torch.tensor(rows), VOCAB).to(torch.float32)


class ToyEngine:
    """Implements the Engine interface over `next_token` (no KV; the committed text is kept)."""

    vocab_size, hidden_size = VOCAB, 1

    def reset(self) -> None:
        self.seq: list[int] = []
        self.last: list[int] = []

    def prefill(self, token_ids: list[int]) -> StepOutput:
        self.seq = list(token_ids)
        rows = [next_token(self.seq[: i + 1]) for i in range(1, len(self.seq))]
        logits = one_hot([0] + rows)
        return StepOutput(logits, torch.zeros(len(self.seq), 1))

    def step(self, tokens: torch.Tensor, mask: torch.Tensor, depth: torch.Tensor) -> StepOutput:
        rows = []
        for i in range(tokens.shape[0]):
            seen = sorted((int(depth[j]), j) for j in range(tokens.shape[0]) if mask[i, j])
            assert [d for d, _ in seen] == list(range(int(depth[i]) + 1)), f"node {i} has a broken context"
            rows.append(next_token(self.seq + [int(tokens[j]) for _, j in seen]))
        self.last = tokens.tolist()
        return StepOutput(one_hot(rows), torch.zeros(tokens.shape[0], 1))

    def commit(self, nodes: list[int]) -> None:
        self.seq += [self.last[n] for n in nodes]

    @property
    def committed_len(self) -> int:
        return len(self.seq)


def greedy_verify(draft: Draft, logits: torch.Tensor) -> tuple[list[int], list[int]]:
    """Longest path whose draft tokens equal the target's argmax at their parents; + bonus token."""
    target = logits.argmax(dim=-1).tolist()
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


def run(drafter: LookaheadDrafter, prompt: list[int], length: int) -> tuple[list[int], int, list[int]]:
    engine = ToyEngine()
    engine.reset()
    out = engine.prefill(prompt)
    drafter.reset(prompt, out)
    root = next_token(prompt)
    text, steps, sizes = [root], 0, []
    while len(text) < length:
        draft = drafter.propose(root)
        sizes.append(int(draft.tokens.shape[0]))
        out = engine.step(draft.tokens, draft.mask, draft.depth)
        accepted, emitted = greedy_verify(draft, out.logits)
        engine.commit(accepted)
        drafter.update(draft, out, accepted, emitted)
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
    text, steps, sizes = run(LookaheadDrafter(w, n, g), PROMPT, 60)
    assert text == plain_greedy(PROMPT, 60)
    max_draft_len = (n - 2) + (w - 1 + g) * (n - 1)
    assert max(sizes) <= max_draft_len + 1
    if g > 0:  # τ: the periodic text (period 3) is found in the pool and accepted; bigrams are ambiguous
        assert 60 / steps > (1.5 if n >= 3 else 1.2)


def test_window_alone_feeds_the_pool() -> None:
    """Without n-grams from the text, accepted drafts can only come from the Jacobi window."""
    drafter = LookaheadDrafter(5, 4, 4, pool_from_text=False)
    text, steps, _ = run(drafter, PROMPT, 60)
    assert text == plain_greedy(PROMPT, 60)
    assert len(drafter.pool) > 0
    assert steps < 60  # some window n-gram was accepted


def test_update_needs_the_latest_draft() -> None:
    drafter = LookaheadDrafter(2, 3, 1)
    drafter.reset(PROMPT, None)
    draft = drafter.propose(3)
    t = int(draft.tokens.shape[0])
    out = StepOutput(torch.zeros(t, VOCAB), torch.zeros(t, 1))
    copy = Draft(draft.tokens.clone(), draft.mask, draft.depth, draft.paths)
    with pytest.raises(ValueError, match="latest propose"):
        drafter.update(copy, out, [0], [1])
    drafter.update(draft, out, [0], [1])
    with pytest.raises(ValueError, match="latest propose"):
        drafter.update(draft, out, [0], [1])  # already consumed
