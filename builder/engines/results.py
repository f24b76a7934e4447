"""What a target step hands back, shared by the engines over a step graph (`builder.engines.batched`):

* `checked_verdicts` — every row's verdict (accepted length, best path) checked against its draft before any KV
  moves, and which rows' chains are not in place;
* `ReusedResult` — a `StepResult` over arrays kept per result shape and reused by the next step of that shape
  (nothing allocated per step; chain, hidden, node_argmax and Medusa top-k gathered on first use);
* `arange` — cached read-only index arrays.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Mapping

import numpy as np

from builder.speculative.batch import DraftBatch
from builder.speculative.protocols import StepResult


def checked_verdicts(batch: DraftBatch, acc: np.ndarray, best: np.ndarray) -> np.ndarray | bool:
    """Check every row's verdict (accepted length k, best path p) against its draft: p < its path count,
    1 <= k <= its width, and path p holds k nodes. Returns which rows' chains move KV — a path's nodes increase
    from the root (`check_paths`), so a chain is in place iff its last node is k - 1 — as a [b] bool array, or
    a bool for a batch of one (scalars: cheaper) and for a batch of root-only drafts (plain steps: the one verdict
    every row may have is (1, 0), and nothing moves). A fixed number of NumPy calls, no tables per tree."""
    if batch.t == 1 and batch.size > 1:  # root-only drafts: one path of one node each
        bad = (acc != 1) | (best != 0)
        if not bad.any():
            return False
        i = int(np.flatnonzero(bad)[0])
    elif batch.size == 1:
        k, p = int(acc[0]), int(best[0])
        if 0 <= p < int(batch.num_paths[0]) and 1 <= k <= int(batch.widths[0]):
            last = int(batch.paths[0, p, k - 1])
            if last >= 0:
                return last != k - 1
        i = 0
    else:
        p = np.minimum(np.maximum(best, 0), batch.p - 1)  # [b] clipped to index (np.clip: slower)
        k = np.minimum(np.maximum(acc, 1), batch.w)  # [b]
        last = batch.paths[arange(batch.size), p, k - 1]  # [b] the chain's last node (-1: the path is shorter)
        good = (best == p) & (acc == k) & (best < batch.num_paths) & (acc <= batch.widths) & (last >= 0)
        if good.all():
            moved: np.ndarray = last != k - 1
            return moved
        i = int(np.flatnonzero(~good)[0])
    raise RuntimeError(
        f"the engine accepted {int(acc[i])} nodes of path {int(best[i])}, outside the draft's "
        f"{int(batch.num_paths[i])} paths of width {int(batch.widths[i])}"
    )


@lru_cache(maxsize=256)
def arange(n: int) -> np.ndarray:
    """np.arange(n), cached and read-only (index arrays of the hot path)."""
    a = np.arange(n)
    a.flags.writeable = False
    return a


class ReusedResult(StepResult):
    """A `StepResult` over arrays kept for the next step of the same shape. accepted_len and tokens are written
    by `fill`; chain, hidden, node_argmax and medusa_topk are gathered from the step's outputs on first use (a
    plain step reads none of them), into arrays of their own. Valid until the engine's next step."""

    def __init__(self, b: int, w: int, t: int, hidden_size: int, medusa: tuple[int, int] | None) -> None:  # noqa
        self.accepted_len = np.zeros(b, np.int64)  # [b]
        self.tokens = np.full((b, w), -1, np.int64)  # [b, W]
        self._chain: np.ndarray = np.full((b, w), -1, np.int64)  # [b, W]
        self._hidden: np.ndarray = np.zeros((b, w, hidden_size), np.float32)  # [b, W, C]
        self._argmax: np.ndarray = np.full((b, t), -1, np.int64)  # [b, T]
        self._topk: np.ndarray | None = None if medusa is None else np.zeros((b, *medusa), np.int64)  # [b, H, K]
        self._ready: set[str] = set()
        self._y: Mapping[str, np.ndarray] = {}
        self._rows: np.ndarray = np.zeros(0, np.int64)
        self._best: np.ndarray = self._rows
        self._batch: DraftBatch | None = None
        self._whole = True

    def fill(
        self,
        y: Mapping[str, np.ndarray],
        rows: np.ndarray,
        batch: DraftBatch,
        best: np.ndarray,
        acc: np.ndarray,
        whole: bool,
    ) -> None:
        self._y, self._rows, self._batch, self._best, self._whole = y, rows, batch, best, whole
        self._ready.clear()
        self.accepted_len[...] = acc
        self.tokens[...] = y["output_tokens"] if whole else y["output_tokens"][rows]  # -1 past the chain (contract)

    def _take(self, name: str) -> np.ndarray:  # an output's rows of this step
        return self._y[name] if self._whole else self._y[name][self._rows]

    @property
    def chain(self) -> np.ndarray:  # type: ignore[override]
        if "chain" not in self._ready:
            assert self._batch is not None
            if len(self._best) == 1:  # one row: slices instead of a gather and a select
                n = int(self.accepted_len[0])
                self._chain[0, :n] = self._batch.paths[0, int(self._best[0]), :n]
                self._chain[0, n:] = -1
            else:
                on = arange(self._chain.shape[1]) < self.accepted_len[:, None]  # [b, W]
                np.copyto(self._chain, np.where(on, self._batch.paths[arange(len(self._best)), self._best], -1))
            self._ready.add("chain")
        return self._chain

    @property
    def hidden(self) -> np.ndarray:  # type: ignore[override]
        if "hidden" not in self._ready:
            h = self._y["hidden"]  # [rows, T, C]
            self._hidden[...] = h[self._rows[:, None], np.maximum(self.chain, 0)]  # rows >= accepted_len: node 0's
            self._ready.add("hidden")
        return self._hidden

    @property
    def node_argmax(self) -> np.ndarray:  # type: ignore[override]
        if "node_argmax" not in self._ready:
            assert self._batch is not None
            np.copyto(self._argmax, np.where(self._batch.pad, -1, self._take("node_argmax")))
            self._ready.add("node_argmax")
        return self._argmax

    @property
    def medusa_topk(self) -> np.ndarray | None:  # type: ignore[override]
        if self._topk is not None and "medusa_topk" not in self._ready:
            self._topk[...] = self._take("medusa_topk")
            self._ready.add("medusa_topk")
        return self._topk
