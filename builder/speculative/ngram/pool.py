"""SharedPool: the finished sequences' texts, looked up where a sequence's own text has no match (`shared_pool`).

A sequence's own text (prompt and output) holds no earlier occurrence of its newest token on about a third of
the steps of a HumanEval decode (the tiny fixture, the benchmark's 20 prompts): those steps draft nothing. Other
requests' texts often continue such a suffix (code idioms, a prompt's boilerplate), so a drafter with a shared
pool looks the newest max_match … POOL_MIN_MATCH tokens (down to max_match where that is smaller) up in the texts of the sequences it has released
(prompt + output, newest text last) and drafts the POOL_DRAFT tokens that followed the newest occurrence,
never past the end of that text. TensorRT-LLM's NGram drafter does the same across requests
(`NGramDecodingConfig.is_public_pool`, on by default there); ours is off unless the recipe asks, because a shared
pool lets one request's output change another's speed (never its tokens: verification is lossless).

Both lengths were chosen by an A/B in one process (the engine of a fixture's n-gram recipe, drafters alternating,
HumanEval's first 20 prompts × 128 new tokens, variants interleaved prompt by prompt; tokens/s against the same
drafter without a pool, AMD EPYC Zen 4): suffixes of >= 3 tokens and 4 drafted tokens gave 1.062x on the tiny
fixture and 1.071-1.078x on the memory-bound regime fixture; >= 2 / 4 tokens 1.054x / 1.056x, >= 2 / 2 1.041x /
1.033x, >= 3 / 8 1.034x / 1.063x. With AVX2 kernels the tiny fixture's 5-node chain costs about two plain steps
and the pool gains nothing (0.997x, 10 rounds) — which is why `trtspec tune` replays the pool on and off against
the engine's own step curve. Replaying greedy decodes on made-up curves (c(T) = 1 + s (T − 1)) said the same:
+9–14 % at s = 0.05, +4–8 % at s = 0.15. Only released sequences enter the pool, so what a sequence drafts does
not depend on which others run beside it (a replay is exact). `scripts/bench_decode.py` puts a shared-pool n-gram
row beside its private twin (`devtools.bench.decode.private_pools`).

Memory: the texts keep at most `capacity` tokens (POOL_TOKENS); past it the oldest texts go until half is left
and the index is rebuilt (amortised: each token is indexed at most twice per pass through the pool).
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Sequence

POOL_MIN_MATCH = 3  # shortest suffix looked up in the pool
POOL_DRAFT = 4  # tokens drafted from the pool at most (a fixed length: the adaptive one is the own text's)
POOL_TOKENS = 1 << 16  # tokens the pool keeps at most (~ a few hundred requests' texts)


def shared_pool_for(max_match: int, capacity: int = POOL_TOKENS) -> "SharedPool":
    """The pool of a drafter that looks up suffixes of at most max_match tokens (POOL_MIN_MATCH or fewer); a larger
    `capacity` holds a datastore (`builder.tune.ngram.replay`'s `pool`)."""
    return SharedPool(max_match, min(POOL_MIN_MATCH, max_match), capacity)


class SharedPool:
    """Released sequences' texts, one after another, and an index of their n-grams (module docstring)."""

    def __init__(self, max_match: int, min_match: int = POOL_MIN_MATCH, capacity: int = POOL_TOKENS) -> None:
        if not (1 <= min_match and capacity >= 2):
            raise ValueError(f"need min_match >= 1 and capacity >= 2, got {min_match}, {capacity}")
        self.max_match, self.min_match, self.capacity = max_match, min_match, capacity
        self.tokens: list[int] = []  # every kept text, oldest first
        self.ends: list[int] = []  # each kept text's end in `tokens` (exclusive), ascending
        self.index: dict[tuple[int, ...], int] = {}  # n-gram -> where the tokens after its newest occurrence start

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, text: Sequence[int]) -> None:
        """Keep a finished sequence's text (its newest `capacity` // 2 tokens at most) and index its n-grams."""
        text = [int(t) for t in text[-(self.capacity // 2) :]]
        if len(self.tokens) + len(text) > self.capacity:
            self._evict(self.capacity // 2 - len(text))
        self._append(text)

    def lookup(self, text: Sequence[int], limit: int) -> tuple[int, ...]:
        """The tokens (at most `limit`) after the newest pool occurrence of `text`'s longest suffix of max_match …
        min_match tokens; () when none occurs (or limit < 1)."""
        if limit < 1:
            return ()
        index, size = self.index, len(text)
        for n in range(min(self.max_match, size), self.min_match - 1, -1):
            at = index.get(tuple(text[size - n :]))
            if at is not None:
                end = self.ends[bisect_right(self.ends, at)]  # the text it is in ends there (at < end: indexed so)
                return tuple(self.tokens[at : min(at + limit, end)])
        return ()

    def _append(self, text: list[int]) -> None:
        base, index, lo, hi = len(self.tokens), self.index, self.min_match, self.max_match
        self.tokens.extend(text)
        self.ends.append(len(self.tokens))
        for at in range(lo, len(text)):  # n-grams ending before the text's last token (a continuation follows)
            for n in range(lo, min(hi, at) + 1):
                index[tuple(text[at - n : at])] = base + at  # later texts and later places overwrite: the newest

    def _evict(self, keep: int) -> None:
        """Drop the oldest texts until at most `keep` tokens are left; rebuild the index of the rest."""
        starts = [0, *self.ends[:-1]]
        texts = [self.tokens[s:e] for s, e in zip(starts, self.ends)]
        total, first = len(self.tokens), 0
        while first < len(texts) and total > max(keep, 0):
            total -= len(texts[first])
            first += 1
        self.tokens, self.ends, self.index = [], [], {}
        for t in texts[first:]:
            self._append(t)
