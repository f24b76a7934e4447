"""`OrtEagleNet`: the `EagleNet` protocol (builder.speculative.protocols) over the exported EAGLE draft graph.

The host logic (rows, committed lengths, `extend` / `expand` input filling, idle rows) is
`builder.engines.eagle_host.EagleHost`, shared with the TensorRT engine; here are the ONNX Runtime
session, its own KV buffer (the draft layer's cache, `builder.engines.ort.kv`) and the IOBindings, whose
tensors are the graph's I/O contract (`builder.export.contract.EAGLE`) at the call's sizes, in float32
(the CPU form, or the float32 lowering of a GPU-form graph).
"""

from __future__ import annotations

from pathlib import Path

from builder.engines.eagle_host import EagleHost
from builder.engines.ort.kv import KVBuffers
from builder.engines.ort.session import Bound, make_session


class OrtEagleNet(EagleHost):
    def __init__(
        self,
        graph: Path,
        *,
        layers: int,
        kv_heads: int,
        head_dim: int,
        hidden_size: int,
        top_k: int,
        capacity: int,
        max_batch_size: int = 1,
        threads: int = 1,
    ) -> None:
        self.session = make_session(graph, threads)
        kv = KVBuffers(layers, max_batch_size, kv_heads, capacity, head_dim)
        super().__init__(kv, hidden_size=hidden_size, top_k=top_k, capacity=capacity, max_batch_size=max_batch_size)
        self.kv: KVBuffers = kv
        self.pick_rows = any(i.name == "out_rows" for i in self.session.get_inputs())  # (`builder.export.eagle`)

    ranged = True  # any row range binds: OrtValues over rows r0..r1 of the KV buffer

    def _build_rows(self, r0: int, r1: int, f: int, u: int, r: int) -> Bound:
        inputs, outputs = self.io(r1 - r0, f, u, r)
        return Bound(self.session, inputs, outputs, self.kv.ortvalues(r0, r1))

    def _build(self, b: int, f: int, u: int) -> Bound:
        return self._build_rows(0, b, f, u, f)
