"""`DeviceKV`: the KV buffer of one TensorRT graph on the device, in the contract's KV dtype.

Layout [L, 2 (key, value), B_max, KV, CAP, D] (as `builder.engines.ort.kv`), rows 0..B-1 the running batch
(`builder.engines.rows`); layer l's caches for rows [r0, r1) are contiguous from row r0, bound to the
engine as past_* and present_* at the same address (TensorRT's KV-cache-update layer writes in place).
The dtype is the graph's `Precision.kv` (export.json "precision" for the target, "draft_precision" for
the EAGLE draft): bfloat16, float16 or float32. float8e4m3fn (one byte per element) is handled too, but no
engine has one today: TensorRT's KV-cache update takes float32 / float16 / bfloat16 caches only, so the
TensorRT rewrite and `validate` refuse an FP8 KV cache on this backend (`builder.export.tensorrt`).
Zeros everywhere (+0 in each of those formats; never NaN: attention reads masked slots).

Moves (compaction of a committed chain, a departing row) are pure data movement, done on a same-width
integer view (so no float8 kernel is needed) and issued on the lane's stream after the step that wrote
the KV; nothing here allocates or synchronises.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from builder.engines.tensorrt.device import Lane
from builder.export.contract import DTYPE_BYTES

Shape = tuple[int, ...]
_TORCH = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16", "float8e4m3fn": "float8_e4m3fn"}
_RAW = {1: "uint8", 2: "int16", 4: "int32"}  # element size -> torch integer dtype of that width


class DeviceKV:
    def __init__(
        self, lane: Lane, layers: int, batch: int, kv_heads: int, capacity: int, head_dim: int, dtype: str = "float32"
    ) -> None:
        import torch

        if dtype not in _TORCH:
            raise ValueError(f"KV cache dtype {dtype!r}: one of {', '.join(_TORCH)}")
        self.lane, self.dtype = lane, dtype
        self.layers, self.kv_heads, self.capacity, self.head_dim = layers, kv_heads, capacity, head_dim
        shape = (layers, 2, batch, kv_heads, capacity, head_dim)
        size = DTYPE_BYTES[dtype]
        raw = lane.alloc(math.prod(shape) * size)
        with lane.on():
            raw.zero_()
        self._raw = raw[: math.prod(shape) * size].view(getattr(torch, _RAW[size])).view(shape)  # same-width integers
        self.buf: Any = self._raw.view(getattr(torch, _TORCH[dtype]))  # the typed view TensorRT reads and writes

    @property
    def nbytes(self) -> int:
        return int(self._raw.numel() * self._raw.element_size())

    def addresses(self, r0: int, r1: int) -> list[tuple[int, int]]:
        """(key, value) device addresses of rows [r0, r1) of every layer (contiguous from row r0)."""
        return [
            (int(self._raw[layer, 0, r0].data_ptr()), int(self._raw[layer, 1, r0].data_ptr()))
            for layer in range(self.layers)
        ]

    def shape(self, rows: int) -> Shape:
        return (rows, self.kv_heads, self.capacity, self.head_dim)

    def compact(self, row: int, start: int, nodes: np.ndarray) -> None:
        """Move the KV of slots start + nodes[k] to start + k (a committed chain); no-op when in place.

        Chains whose node indices increase (trees numbered level by level, as every drafter here does): one
        slot copy per node out of place, in chain order — nodes[j] > nodes[k] >= k for j > k, so no slot is
        overwritten before it is read; no index tensor, no allocation. Any other order gathers the chain
        first (a temporary, as `builder.engines.ort.kv` does)."""
        k = len(nodes)
        if k <= 1 or (nodes == np.arange(k)).all():
            return
        cache = self._raw[:, :, row]  # (L, 2, KV, CAP, D) view
        with self.lane.on():
            if (np.diff(nodes) > 0).all():
                for i, node in enumerate(int(n) for n in nodes):
                    if node != i:
                        cache[:, :, :, start + i].copy_(cache[:, :, :, start + node])
            else:
                gathered = cache[:, :, :, [start + int(n) for n in nodes]]  # advanced indexing copies first
                cache[:, :, :, start : start + k].copy_(gathered)

    def move_row(self, dst: int, src: int, length: int) -> None:
        """Copy the first `length` slots of row `src` into row `dst` (a departure leaves rows dense)."""
        with self.lane.on():
            self._raw[:, :, dst, :, :length].copy_(self._raw[:, :, src, :, :length])
