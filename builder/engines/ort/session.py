"""ONNX Runtime sessions and prepared bindings.

`make_session` makes every session of our engines: one intra-op thread by default, full graph optimisation,
no spinning, and GroupQueryAttention's per-head GEMM kernel rather than its "flash" kernel (onnxruntime
reads ORT_GQA_DISABLE_FLASH_ATTENTION when it builds the kernel: `contrib_ops/cpu/bert/gqa_attention_base.h`,
GQAAttentionBase; we set it only while our session is made, unless the caller's environment says otherwise).
One thread on this machine, T=1, S=301, 32 / 8 heads: 51 µs vs 75 µs a layer (flash); S=1001: 147 vs 235;
T=8: 130 vs 143; a 256-token prefill: 2.4 vs 2.9 ms (`builder.export.ort_variant`).

`Bound` is one IOBinding whose inputs and outputs are preallocated NumPy arrays bound by pointer, and
whose KV caches are OrtValues over the engine's KV buffer (bound as both past and present). A step
fills the input arrays in place and calls `run()`; results appear in the output arrays. Engines keep
one `Bound` per input shape (batch rows, nodes, paths, width), so steady-state decoding allocates
nothing and copies nothing but its own small inputs.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import numpy as np
import onnxruntime as ort

Shape = tuple[int, ...]
Spec = Mapping[str, tuple[Shape, type]]  # name -> (shape, numpy dtype)


GQA_FLASH_ENV = "ORT_GQA_DISABLE_FLASH_ATTENTION"


def session_options(threads: int = 1, spinning: bool = False) -> ort.SessionOptions:
    """CPU session options: `threads` intra-op threads, full graph optimisation, errors-only logging."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # Busy-waiting worker threads fight each other on a shared, loaded machine; off unless asked.
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    so.log_severity_level = 3  # errors only
    return so


@contextlib.contextmanager
def gqa_per_head_kernel() -> Iterator[None]:
    """While a session is made: GroupQueryAttention without its flash kernel (module docstring), unless the
    environment already says; the environment is restored afterwards."""
    if GQA_FLASH_ENV in os.environ:
        yield
        return
    os.environ[GQA_FLASH_ENV] = "1"
    try:
        yield
    finally:
        os.environ.pop(GQA_FLASH_ENV, None)


def make_session(
    path: Path, threads: int = 1, spinning: bool = False, options: ort.SessionOptions | None = None
) -> ort.InferenceSession:
    """A CPU session over `path` (`session_options` unless `options` are given), GroupQueryAttention per head."""
    with gqa_per_head_kernel():
        return ort.InferenceSession(
            str(path), options or session_options(threads, spinning), providers=["CPUExecutionProvider"]
        )


class Bound:
    """An IOBinding over preallocated arrays (`x` inputs, `y` outputs) and a KV cache. `same`: inputs bound to another
    input's memory (name -> that input's name; same dtype and size), where the two always hold the same values."""

    def __init__(
        self,
        session: ort.InferenceSession,
        inputs: Spec,
        outputs: Spec,
        caches: Sequence[tuple[ort.OrtValue, ort.OrtValue]],
        same: Mapping[str, str] | None = None,
    ) -> None:
        self.session = session
        self.io = session.io_binding()
        self.x = {name: np.zeros(shape, dtype) for name, (shape, dtype) in inputs.items()}
        for name, other in (same or {}).items():
            self.x[name] = self.x[other].reshape(self.x[name].shape)  # (a view: one write sets both)
        self.y = {name: np.zeros(shape, dtype) for name, (shape, dtype) in outputs.items()}
        for name, arr in self.x.items():
            self.io.bind_input(name, "cpu", 0, arr.dtype, list(arr.shape), arr.ctypes.data)
        graph_outputs = {o.name for o in session.get_outputs()}
        for name, arr in self.y.items():  # an output the graph leaves to the host stays a host array
            if name in graph_outputs:
                self.io.bind_output(name, "cpu", 0, arr.dtype, list(arr.shape), arr.ctypes.data)
        for layer, (k, v) in enumerate(caches):
            for kind, value in (("key", k), ("value", v)):
                self.io.bind_ortvalue_input(f"past_{kind}_{layer}", value)
                self.io.bind_ortvalue_output(f"present_{kind}_{layer}", value)

    def run(self) -> None:
        self.session.run_with_iobinding(self.io)
