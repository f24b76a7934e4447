"""`TrtEngine`: the `Engine` protocol (builder.speculative.engine) over TensorRT engines of the target step
graph. The host side — rows, input filling, the verdict, commit and KV compaction — is ONNX Runtime's
(`builder.engines.batched.BatchedTarget`); here are the engines, the device KV buffers and the
bindings (`builder.engines.tensorrt.runtime`). The greedy engine serves all-greedy batches; a batch with
any sampled row runs the rejection engine (deserialized on first use).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from builder.engines.batched import BatchedTarget, LruBindings, Spec
from builder.engines.tensorrt.probe import require
from builder.engines.tensorrt.profiles import Profile
from builder.engines.tensorrt.runtime import DeviceKV, TrtBinding, TrtGraph, write_guard


@dataclass(frozen=True)
class TrtTargetSpec:
    """What the engine must know about the built engines."""

    greedy: Path  # the greedy target engine
    rejection: Path | None  # the rejection target engine (None: greedy only)
    layers: int
    kv_heads: int
    head_dim: int
    hidden_size: int
    vocab_size: int
    capacity: int  # CAP of the graphs (max_seq_len + max draft nodes)
    medusa: tuple[int, int] | None = None  # (heads, top-k) when Medusa heads are fused in
    profiles: dict[str, tuple[Profile, ...]] = field(default_factory=dict)  # "greedy" / "rejection" -> profiles


class TrtEngine(BatchedTarget):
    name = "tensorrt"

    def __init__(self, spec: TrtTargetSpec, max_seq_len: int, max_batch_size: int = 1) -> None:
        self.check_capacity(max_seq_len, spec.capacity)
        require()
        self.spec = spec
        kv = DeviceKV(spec.layers, max_batch_size, spec.kv_heads, spec.capacity, spec.head_dim)
        super().__init__(kv, LruBindings(), vocab_size=spec.vocab_size, hidden_size=spec.hidden_size,
                         medusa=spec.medusa, max_seq_len=max_seq_len, max_batch_size=max_batch_size)  # fmt: skip
        self.kv: DeviceKV = kv
        self._graphs = {"greedy": TrtGraph(spec.greedy, spec.profiles["greedy"])}

    def _make_binding(self, mode: str, r0: int, r1: int, inputs: Spec, outputs: Spec) -> TrtBinding:
        t = inputs["tokens"][0][1]
        guard = write_guard(self.spec.capacity, lambda x: x["past_len"], t)  # every row writes T slots
        return TrtBinding(self._graph(mode), inputs, outputs, self.kv.addresses(r0, r1), self.kv.shape(r1 - r0), guard)

    def _graph(self, mode: str) -> TrtGraph:
        if mode not in self._graphs:
            if self.spec.rejection is None:
                raise ValueError("this engine was built for greedy decoding only (temperature 0)")
            self._graphs[mode] = TrtGraph(self.spec.rejection, self.spec.profiles[mode])
        return self._graphs[mode]

