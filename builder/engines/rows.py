"""Sequence ids ↔ dense batch rows: active sequences always occupy rows 0..n-1.

Engines keep per-sequence state (KV caches) in batch-major buffers; keeping the active rows dense
makes "the running batch" a contiguous prefix of every buffer, so no step gathers or copies caches.
When a sequence leaves, the sequence in the last row moves into its row (one copy per departure).

Adding is transactional where it matters: `adding(n)` hands out new ids for an engine's prefill and
takes them back if the prefill raises, so a failing start never leaves rows (KV slots) behind.
"""

from __future__ import annotations

import itertools
from contextlib import contextmanager
from typing import Iterator, Sequence

import numpy as np


class RowTable:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._ids: list[int] = []  # sequence id per row
        self._row: dict[int, int] = {}
        self._next = itertools.count()
        self.version = 0  # changes whenever a row changes hands (add, remove)

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, n: int) -> list[int]:
        """New sequence ids for rows len..len+n-1."""
        if len(self._ids) + n > self.capacity:
            raise ValueError(
                f"{n} new sequences exceed the batch capacity ({len(self._ids)} of {self.capacity} rows in use)"
            )
        ids = [next(self._next) for _ in range(n)]
        self.version += 1
        for sid in ids:
            self._row[sid] = len(self._ids)
            self._ids.append(sid)
        return ids

    @contextmanager
    def adding(self, n: int) -> Iterator[list[int]]:
        """`add(n)` for the duration of a prefill: on an exception the new ids are removed again (they
        are the last rows, so nothing moves) and the exception propagates."""
        ids = self.add(n)
        try:
            yield ids
        except BaseException:
            self.discard_newest(ids)
            raise

    def discard_newest(self, ids: list[int]) -> None:
        """Remove ids that occupy the last rows (an aborted `add`), newest first."""
        if self._ids[len(self._ids) - len(ids) :] != list(ids):
            raise ValueError(f"sequences {ids} are not the newest rows")
        for sid in reversed(ids):
            self.remove(sid)

    def row(self, seq: int) -> int:
        try:
            return self._row[seq]
        except KeyError:
            raise KeyError(f"unknown sequence {seq}") from None

    def rows(self, seqs: list[int] | tuple[int, ...]) -> list[int]:
        return [self.row(s) for s in seqs]

    def array(self, seqs: Sequence[int]) -> np.ndarray:
        """Rows of the given sequences as an int64 array [len(seqs)] (KeyError for an unknown one)."""
        try:
            return np.fromiter(map(self._row.__getitem__, seqs), np.int64, len(seqs))
        except KeyError as e:
            raise KeyError(f"unknown sequence {e.args[0]}") from None

    def remove(self, seq: int) -> tuple[int, int] | None:
        """Drop a sequence; returns (hole, last) when the last row's sequence moved into the hole."""
        hole = self._row.pop(seq) if seq in self._row else None
        if hole is None:
            raise KeyError(f"unknown sequence {seq}")
        self.version += 1
        last = len(self._ids) - 1
        moved = self._ids.pop()
        if hole == last:
            return None
        self._ids[hole] = moved
        self._row[moved] = hole
        return hole, last

    @property
    def ids(self) -> list[int]:
        """Sequence ids in row order."""
        return list(self._ids)
