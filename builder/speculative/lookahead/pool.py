"""Lookahead's n-gram pool: n-grams of length N keyed by their first token. Pure Python.

An entry is stored as (key, tail): key = the first token, tail = the other N-1 tokens. Per key the
pool keeps at most `max_per_key` distinct tails in least-recently-inserted order: inserting a tail
that is already there moves it to the newest end, and a full key drops its oldest tail (the policy
of hao-ai-lab/LookaheadDecoding `lade/decoding.py` with GUESS_SET_SIZE, and of TensorRT-LLM's
`LookaheadPoolManager::insertOne`; both use G as the per-key bound). `max_keys`, when set, also
bounds the number of keys, dropping the key touched longest ago.

The *verification set* for a token is at most G tails stored under it, the newest G, listed
oldest first (TensorRT-LLM's `LookaheadPoolManager::guess`).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Iterable, Sequence

Ngram = tuple[int, ...]


class NgramPool:
    """n-grams of length `ngram` (N >= 2) keyed by first token, bounded and deduplicated."""

    def __init__(self, ngram: int, max_per_key: int, max_keys: int | None = None) -> None:
        if ngram < 2 or max_per_key < 1 or (max_keys is not None and max_keys < 1):
            raise ValueError(
                f"need ngram >= 2, max_per_key >= 1, max_keys >= 1; got {ngram}, {max_per_key}, {max_keys}"
            )
        self.ngram = ngram
        self.max_per_key = max_per_key
        self.max_keys = max_keys
        self._tails: OrderedDict[int, OrderedDict[Ngram, None]] = OrderedDict()

    def insert(self, ngram: Sequence[int]) -> None:
        """Store one n-gram (length N) under its first token."""
        if len(ngram) != self.ngram:
            raise ValueError(f"n-gram {list(ngram)} has length {len(ngram)}, pool holds N={self.ngram}")
        key, tail = int(ngram[0]), tuple(int(t) for t in ngram[1:])
        tails = self._tails.get(key)
        if tails is None:
            tails = self._tails[key] = OrderedDict()
            if self.max_keys is not None and len(self._tails) > self.max_keys:
                self._tails.popitem(last=False)
        self._tails.move_to_end(key)
        tails.pop(tail, None)
        tails[tail] = None
        if len(tails) > self.max_per_key:
            tails.popitem(last=False)

    def insert_all(self, ngrams: Iterable[Sequence[int]]) -> None:
        for g in ngrams:
            self.insert(g)

    def insert_sequence(self, tokens: Sequence[int]) -> None:
        """Store every n-gram of a token sequence, left to right (prompt / emitted tokens)."""
        for start in range(len(tokens) - self.ngram + 1):
            self.insert(tokens[start : start + self.ngram])

    def verification_set(self, token: int, limit: int) -> list[Ngram]:
        """At most `limit` tails stored under `token`: the newest ones, oldest first."""
        tails = self._tails.get(int(token))
        if not tails or limit <= 0:
            return []
        return list(tails)[-limit:]

    def tails(self, token: int) -> list[Ngram]:
        """All tails under `token`, oldest first."""
        return list(self._tails.get(int(token), ()))

    def keys(self) -> list[int]:
        """Keys, least recently touched first."""
        return list(self._tails)

    def __len__(self) -> int:
        """Number of stored n-grams."""
        return sum(len(t) for t in self._tails.values())

    def __contains__(self, ngram: object) -> bool:
        if not isinstance(ngram, (tuple, list)) or len(ngram) != self.ngram:
            return False
        return tuple(ngram[1:]) in self._tails.get(ngram[0], {})

    def clear(self) -> None:
        self._tails.clear()
