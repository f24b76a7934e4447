"""`OrtEngine`: the `Engine` protocol (builder.speculative.engine) over the exported target step graph.

One graph serves prefill and steps (see the I/O contract in `builder.export`). Verification runs in
the graph (the decomposed trtspec::TreeVerify), so per step only tokens, masks and paths go in and
the verdict, the nodes' greedy tokens, hidden states and Medusa top-k come out; the host then
compacts the accepted chain's KV in the shared buffer. The greedy graph serves all-greedy batches;
a batch with any sampled row runs the rejection graph (same weights file, loaded on first use).
The host side (rows, input filling, commit) is `builder.engines.batched.BatchedTarget`, shared with
the TensorRT engine; here are the sessions and the IOBindings.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from builder.engines.batched import BatchedTarget, LruBindings, Spec
from builder.engines.ort.kv import KVBuffers
from builder.engines.ort.session import Bound, make_session


class GreedyOnly(ValueError):
    """A sampled request for an engine built without the rejection graph."""


@dataclass(frozen=True)
class TargetSpec:
    """What the engine must know about the exported graphs."""

    greedy: Path  # target.ort.onnx of the greedy export
    rejection: Path | None  # target.ort.onnx of the rejection export (None: greedy only)
    layers: int
    kv_heads: int
    head_dim: int
    hidden_size: int
    vocab_size: int
    capacity: int  # CAP the graphs were exported for (max_seq_len + max draft nodes)
    medusa: tuple[int, int] | None = None  # (heads, top-k) when Medusa heads are fused in


class OrtEngine(BatchedTarget):
    name = "onnxruntime"

    def __init__(self, spec: TargetSpec, max_seq_len: int, max_batch_size: int = 1, threads: int = 1) -> None:
        self.check_capacity(max_seq_len, spec.capacity)
        self.spec, self.threads = spec, threads
        kv = KVBuffers(spec.layers, max_batch_size, spec.kv_heads, spec.capacity, spec.head_dim)
        super().__init__(kv, LruBindings(), vocab_size=spec.vocab_size, hidden_size=spec.hidden_size,
                         medusa=spec.medusa, max_seq_len=max_seq_len, max_batch_size=max_batch_size)  # fmt: skip
        self.kv: KVBuffers = kv
        self._sessions = {"greedy": make_session(spec.greedy, threads)}

    def _make_binding(self, mode: str, r0: int, r1: int, inputs: Spec, outputs: Spec) -> Bound:
        return Bound(self._session(mode), inputs, outputs, self.kv.ortvalues(r0, r1))

    def _session(self, mode: str):
        if mode not in self._sessions:
            if self.spec.rejection is None:
                raise GreedyOnly("this engine verifies greedily only (the recipe's speculative.verification is "
                                 "greedy): sampling (temperature > 0) needs speculative.verification: rejection")
            self._sessions[mode] = make_session(self.spec.rejection, self.threads)
        return self._sessions[mode]
