"""Preallocated KV cache with a committed prefix and a tentative tail.

Layout per layer: keys and values [B, KV, CAP, D]. Slots [0, committed) hold the committed sequence;
a step writes its T nodes' KV tentatively to slots [committed, committed + T). `commit(nodes)` moves
the chosen nodes' KV to the front of the tail, in order (compaction), and advances `committed`;
the rest of the tail is garbage that the next write overwrites. Nothing is ever freed or reallocated.
"""

from __future__ import annotations

from typing import Sequence

import torch

from builder.errors import UserError


class KVCacheFull(UserError):
    """More tokens than the cache's capacity (`max_seq_len`)."""


class KVCache:
    """Keys and values of every layer for B sequences of one common committed length."""

    def __init__(
        self,
        num_layers: int,
        batch: int,
        num_kv_heads: int,
        head_dim: int,
        capacity: int,
        dtype: torch.dtype,
        device: torch.device | str = "cpu",
    ) -> None:
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, got {capacity}")
        shape = (num_layers, batch, num_kv_heads, capacity, head_dim)  # (L, B, KV, CAP, D)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.capacity = capacity
        self.committed = 0  # slots [0, committed) hold committed KV
        self.tentative = 0  # slots [committed, committed + tentative) hold the last step's nodes

    def layer(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:  # -> [B, KV, CAP, D] views
        return self.k[i], self.v[i]

    def reserve(self, n: int) -> int:
        """Claim n tentative slots after the committed prefix; returns their first slot.

        Any earlier tentative slots are given up (they will be overwritten).
        """
        if self.committed + n > self.capacity:
            raise KVCacheFull(
                f"KV cache full: {self.committed} committed + {n} new tokens exceed the capacity of "
                f"{self.capacity} (raise max_seq_len)",
                field="max_seq_len",
            )
        self.tentative = n
        return self.committed

    def commit(self, nodes: Sequence[int]) -> None:
        """Keep the tentative slots `nodes` (offsets into the tail), in order; drop the others."""
        for n in nodes:
            if not 0 <= n < self.tentative:
                raise ValueError(f"node {n} is out of range for a step of {self.tentative} nodes")
        if len(set(nodes)) != len(nodes):
            raise ValueError(f"nodes must be distinct, got {list(nodes)}")
        c = self.committed
        src = torch.tensor(nodes, dtype=torch.int64, device=self.k.device) + c  # [n]
        # Advanced indexing copies first, so overlapping source and destination slots are safe.
        self.k[:, :, :, c : c + len(nodes)] = self.k[:, :, :, src]  # (L, B, KV, n, D)
        self.v[:, :, :, c : c + len(nodes)] = self.v[:, :, :, src]  # (L, B, KV, n, D)
        self.committed = c + len(nodes)
        self.tentative = 0

    def commit_all(self) -> None:
        """Keep every tentative slot as it is (a causal pass such as prefill)."""
        self.committed += self.tentative
        self.tentative = 0

    def reset(self) -> None:
        """Forget everything; the buffers are kept and later overwritten."""
        self.committed = 0
        self.tentative = 0
