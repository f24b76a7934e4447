"""`TrtEagleNet`: the `EagleNet` protocol (builder.speculative.engine) over a TensorRT engine of the EAGLE
draft step graph.

The host logic (sequence ids, committed lengths, `extend` / `expand` input filling, idle rows) is
`builder.engines.ort.eagle.OrtEagleNet`'s, inherited unchanged; only the runtime differs: the KV
buffer lives on the device (`DeviceKV`) and each input shape gets a `TrtBinding` instead of an ORT
IOBinding. `OrtEagleNet.__init__` is not called (it would open an ONNX Runtime session): this one
sets the same state. The `type: ignore`s mark where ORT's types are replaced by TensorRT's; moving
that host logic into a backend-neutral module (as `builder.engines.batched` is for the target) would
remove them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from builder.engines.batched import LruBindings
from builder.engines.ort.eagle import OrtEagleNet
from builder.engines.rows import RowTable
from builder.engines.tensorrt.probe import require
from builder.engines.tensorrt.profiles import Profile
from builder.engines.tensorrt.runtime import DeviceKV, Shape, TrtBinding, TrtGraph, write_guard


def eagle_io(b: int, f: int, u: int, hidden_size: int, top_k: int) -> tuple[dict[str, tuple[Shape, type]],
                                                                             dict[str, tuple[Shape, type]]]:  # fmt: skip
    """(inputs, outputs) of one EAGLE draft-graph call, as `OrtEagleNet._build` lays them out."""
    inputs: dict[str, tuple[Shape, type]] = {
        "tokens": ((b, f), np.int64), "hidden_in": ((b, f, hidden_size), np.float32),
        "position_ids": ((b, f), np.int64), "past_len": ((b,), np.int64), "write_offset": ((b,), np.int64),
        "num_new": ((b,), np.int64), "tree_mask": ((b, f, u), np.bool_),
    }  # fmt: skip
    outputs: dict[str, tuple[Shape, type]] = {
        "hidden_out": ((b, f, hidden_size), np.float32), "topk_tokens": ((b, f, top_k), np.int64),
        "topk_logprobs": ((b, f, top_k), np.float32),
    }  # fmt: skip
    return inputs, outputs


class TrtEagleNet(OrtEagleNet):
    def __init__(self, engine: Path, profiles: Sequence[Profile], *, layers: int, kv_heads: int, head_dim: int,
                 hidden_size: int, top_k: int, capacity: int, max_batch_size: int = 1) -> None:  # fmt: skip
        require()
        self.top_k, self.hidden_size, self.capacity = top_k, hidden_size, capacity
        self.graph = TrtGraph(engine, profiles)
        self.rows = RowTable(max_batch_size)
        self.kv = DeviceKV(layers, max_batch_size, kv_heads, capacity, head_dim)  # type: ignore[assignment]
        self.committed = np.zeros(max_batch_size, dtype=np.int64)
        self._ids: dict[int, int] = {}
        self._bound = LruBindings()

    def _build(self, b: int, f: int, u: int) -> TrtBinding:  # type: ignore[override]
        inputs, outputs = eagle_io(b, f, u, self.hidden_size, self.top_k)
        kv: DeviceKV = self.kv  # type: ignore[assignment]
        guard = write_guard(self.capacity, lambda x: x["past_len"] + x["write_offset"], f)  # every row writes F slots
        return TrtBinding(self.graph, inputs, outputs, kv.addresses(0, b), kv.shape(b), guard)
