"""`TrtEagleNet`: the `EagleNet` protocol (builder.speculative.protocols) over a TensorRT engine of the EAGLE
draft step graph.

The host logic (sequence ids, committed lengths, `extend` / `expand` input filling, idle rows) is the
backend-neutral `builder.engines.eagle_host.EagleHost`, shared with ONNX Runtime; here are the engine
(`runtime.TrtGraph`), the draft's own KV buffer on the device in the draft's KV dtype (`kv.DeviceKV`,
export.json "draft_precision") and one `runtime.TrtBinding` per call shape, whose tensors are the I/O
contract's (`builder.export.contract.EAGLE`) in the draft's precision.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from builder.engines.eagle_host import EagleHost
from builder.engines.tensorrt.device import Lane
from builder.engines.tensorrt.kv import DeviceKV
from builder.engines.tensorrt.probe import require
from builder.engines.tensorrt.profiles import Profile
from builder.engines.tensorrt.runtime import TrtBinding, TrtGraph, write_guard
from builder.export.contract import CPU, Precision


class TrtEagleNet(EagleHost):
    def __init__(
        self,
        engine: Path,
        profiles: Sequence[Profile],
        *,
        layers: int,
        kv_heads: int,
        head_dim: int,
        hidden_size: int,
        top_k: int,
        capacity: int,
        max_batch_size: int = 1,
        precision: Precision = CPU,
        lane: Lane | None = None,
    ) -> None:
        require()
        self.lane = Lane() if lane is None else lane
        kv = DeviceKV(self.lane, layers, max_batch_size, kv_heads, capacity, head_dim, precision.kv)
        super().__init__(
            kv,
            hidden_size=hidden_size,
            top_k=top_k,
            capacity=capacity,
            max_batch_size=max_batch_size,
            precision=precision,
        )
        self.kv: DeviceKV = kv
        self.graph = TrtGraph(engine, profiles, self.lane)

    def _build(self, b: int, f: int, u: int) -> TrtBinding:
        inputs, outputs = self.io(b, f, u)
        guard = write_guard(self.capacity, lambda x: x["past_len"] + x["write_offset"], f)  # every row writes F slots
        return TrtBinding(self.graph, inputs, outputs, self.kv.addresses(0, b), self.kv.shape(b), guard)
