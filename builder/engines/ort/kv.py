"""KV buffers for an ONNX Runtime graph: one zeroed NumPy array, bound in place as past and present.

Layout [L, 2 (key, value), B_max, KV, CAP, D]. The running batch is rows 0..B-1 (see
`builder.engines.rows`), so layer l's key cache for rows [r0, r1) is the contiguous view
buf[l, 0, r0:r1], wrapped once in an OrtValue (no copy) and bound as both `past_key_l` and
`present_key_l`: the graph writes new keys into the buffer itself. Zeros everywhere (never NaN), as
the `standard` attention variant reads masked slots too.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort


class KVBuffers:
    def __init__(
        self, layers: int, batch: int, kv_heads: int, capacity: int, head_dim: int, dtype: type = np.float32
    ) -> None:
        self.buf = np.zeros((layers, 2, batch, kv_heads, capacity, head_dim), dtype=dtype)
        self.layers, self.capacity = layers, capacity
        self._views: dict[tuple[int, int], list[tuple[ort.OrtValue, ort.OrtValue]]] = {}

    @property
    def nbytes(self) -> int:
        return self.buf.nbytes

    def ortvalues(self, r0: int, r1: int) -> list[tuple[ort.OrtValue, ort.OrtValue]]:
        """(key, value) OrtValues over rows [r0, r1) of every layer (cached; they share the buffer)."""
        views = self._views.get((r0, r1))
        if views is None:
            views = [
                (
                    ort.OrtValue.ortvalue_from_numpy(self.buf[l, 0, r0:r1]),
                    ort.OrtValue.ortvalue_from_numpy(self.buf[l, 1, r0:r1]),
                )
                for l in range(self.layers)
            ]
            self._views[(r0, r1)] = views
        return views

    def compact(self, row: int, start: int, nodes: np.ndarray) -> None:
        """Move the KV of slots start + nodes[k] to start + k (a committed chain); no-op when in place.

        nodes[0] is the root, always in place. A chain whose other nodes are consecutive (a Lookahead
        branch, a chain tree) moves as one slice; any other chain by one gather.
        """
        k = len(nodes)
        if k <= 1 or nodes[1] == 1 and nodes[k - 1] == k - 1:  # in place (node i at depth i)
            return
        cache = self.buf[:, :, row]  # (L, 2, KV, CAP, D) view
        first = int(nodes[1])
        if int(nodes[k - 1]) - first == k - 2:  # consecutive: one slice (numpy handles the overlap)
            cache[:, :, :, start + 1 : start + k] = cache[:, :, :, start + first : start + first + k - 1]
        else:
            cache[:, :, :, start + 1 : start + k] = cache[:, :, :, start + nodes[1:]]  # the fancy index copies first

    def compact_rows(self, rows: np.ndarray, starts: np.ndarray, chains: np.ndarray, lengths: np.ndarray) -> None:
        """`compact` for several rows in one gather: row rows[i]'s slots starts[i] + chains[i, k] move to
        starts[i] + k for k < lengths[i]. rows [m] distinct, starts [m], chains [m, W] (-1 past the length),
        lengths [m] >= 1. Slots k >= lengths[i] up to the longest chain copy onto themselves (no effect); the
        gather reads every source before anything is written, so overlapping moves are safe."""
        if len(rows) == 1:  # one row: `compact` (a consecutive chain moves as one slice)
            self.compact(int(rows[0]), int(starts[0]), chains[0, : int(lengths[0])])
            return
        k = int(lengths.max())
        if k <= 1:
            return
        j = np.arange(1, k)  # [k-1] chain positions after the root (which never moves)
        src = np.where(j[None, :] < lengths[:, None], chains[:, 1:k], j[None, :])  # [m, k-1] node per position
        dst = starts[:, None] + j[None, :]  # [m, k-1]
        r = rows[:, None]  # [m, 1]
        self.buf[:, :, r, :, dst] = self.buf[
            :, :, r, :, starts[:, None] + src
        ]  # advanced dims first: [m, k-1, L, 2, KV, D]

    def move_row(self, dst: int, src: int, length: int) -> None:
        """Copy the first `length` slots of row `src` into row `dst` (a departure leaves rows dense)."""
        self.buf[:, :, dst, :, :length] = self.buf[:, :, src, :, :length]
