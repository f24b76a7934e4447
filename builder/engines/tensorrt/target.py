"""`TrtEngine`: the `Engine` protocol (builder.speculative.protocols) over TensorRT engines of the target step
graph. The host side — rows, input filling, the verdict, commit and KV compaction — is shared with ONNX
Runtime (`builder.engines.batched.BatchedTarget`); here are the engines, the device KV buffer in the
contract's KV dtype (`kv.DeviceKV`) and the bindings (`runtime.TrtBinding`), whose tensors are the graph I/O
contract's (`builder.export.contract.TARGET`) in the engine's `Precision`. The greedy engine serves
all-greedy batches; a batch with any sampled row runs the rejection engine (deserialized on first use).
All of them run on one `device.Lane` (stream and scratch arena), shared with the EAGLE draft engine when
`builder.engines.tensorrt.folder.open_tensorrt_engine` opens both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from builder.engines.batched import BatchedTarget
from builder.engines.bindings import LruBindings, Spec
from builder.engines.tensorrt.device import Lane
from builder.engines.tensorrt.kv import DeviceKV
from builder.engines.tensorrt.probe import require
from builder.engines.tensorrt.profiles import Profile
from builder.engines.tensorrt.runtime import TrtBinding, TrtGraph, write_guard
from builder.export.contract import CPU, TARGET, Precision, call_spec


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
    precision: Precision = CPU  # the graphs' dtypes (export.json "precision")


class TrtEngine(BatchedTarget):
    name = "tensorrt"

    def __init__(
        self, spec: TrtTargetSpec, max_seq_len: int, max_batch_size: int = 1, lane: Lane | None = None
    ) -> None:
        self.check_capacity(max_seq_len, spec.capacity)
        require()
        self.spec = spec
        self.lane = Lane() if lane is None else lane
        kv = DeviceKV(
            self.lane, spec.layers, max_batch_size, spec.kv_heads, spec.capacity, spec.head_dim, spec.precision.kv
        )
        super().__init__(
            kv,
            LruBindings(),
            vocab_size=spec.vocab_size,
            hidden_size=spec.hidden_size,
            medusa=spec.medusa,
            max_seq_len=max_seq_len,
            max_batch_size=max_batch_size,
        )
        self.kv: DeviceKV = kv
        self._graphs = {"greedy": TrtGraph(spec.greedy, spec.profiles["greedy"], self.lane)}

    def _make_binding(self, mode: str, r0: int, r1: int, inputs: Spec, outputs: Spec) -> TrtBinding:
        """A binding of the contract's tensors at the sizes of `inputs` (the host side's layout must have
        exactly the contract's names and shapes; the dtypes are the contract's in our precision)."""
        (b, t), (_, tv), (_, p, w) = inputs["tokens"][0], inputs["verify_index"][0], inputs["paths"][0]
        sizes = {"B": b, "T": t, "Tv": tv, "P": p, "W": w, "C": self.spec.hidden_size}
        if self.spec.medusa is not None:
            sizes |= {"Hm": self.spec.medusa[0], "K": self.spec.medusa[1]}
        x, y = call_spec(
            TARGET, sizes, self.spec.precision, rejection=mode == "rejection", medusa=self.spec.medusa is not None
        )
        for what, ours, theirs in (("inputs", x, inputs), ("outputs", y, outputs)):
            if {k: v[0] for k, v in theirs.items()} != {k: v[0] for k, v in ours.items()}:
                raise ValueError(f"the host side's {what} {dict(theirs)} are not the graph contract's {ours}")
        guard = write_guard(self.spec.capacity, lambda xs: xs["past_len"], t)  # every row writes T slots
        return TrtBinding(self._graph(mode), x, y, self.kv.addresses(r0, r1), self.kv.shape(r1 - r0), guard)

    def _graph(self, mode: str) -> TrtGraph:
        if mode not in self._graphs:
            if self.spec.rejection is None:
                raise ValueError(
                    "this engine verifies greedily only (the recipe's speculative.verification is "
                    "greedy): sampling (temperature > 0) needs speculative.verification: rejection"
                )
            self._graphs[mode] = TrtGraph(self.spec.rejection, self.spec.profiles[mode], self.lane)
        return self._graphs[mode]
