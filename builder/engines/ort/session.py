"""ONNX Runtime sessions and prepared bindings.

`Bound` is one IOBinding whose inputs and outputs are preallocated NumPy arrays bound by pointer, and
whose KV caches are OrtValues over the engine's KV buffer (bound as both past and present). A step
fills the input arrays in place and calls `run()`; results appear in the output arrays. Engines keep
one `Bound` per input shape (batch rows, nodes, paths, width), so steady-state decoding allocates
nothing and copies nothing but its own small inputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import onnxruntime as ort

Shape = tuple[int, ...]
Spec = Mapping[str, tuple[Shape, type]]  # name -> (shape, numpy dtype)


def make_session(path: Path, threads: int = 1, spinning: bool = False) -> ort.InferenceSession:
    """A CPU session with full graph optimisation and `threads` intra-op threads."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # Busy-waiting worker threads fight each other on a shared, loaded machine; off unless asked.
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    so.log_severity_level = 3  # errors only
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


class Bound:
    """An IOBinding over preallocated arrays (`x` inputs, `y` outputs) and a KV cache."""

    def __init__(self, session: ort.InferenceSession, inputs: Spec, outputs: Spec,
                 caches: Sequence[tuple[ort.OrtValue, ort.OrtValue]]) -> None:  # fmt: skip
        self.session = session
        self.io = session.io_binding()
        self.x = {name: np.zeros(shape, dtype) for name, (shape, dtype) in inputs.items()}
        self.y = {name: np.zeros(shape, dtype) for name, (shape, dtype) in outputs.items()}
        for name, arr in self.x.items():
            self.io.bind_input(name, "cpu", 0, arr.dtype, list(arr.shape), arr.ctypes.data)
        for name, arr in self.y.items():
            self.io.bind_output(name, "cpu", 0, arr.dtype, list(arr.shape), arr.ctypes.data)
        for layer, (k, v) in enumerate(caches):
            for kind, value in (("key", k), ("value", v)):
                self.io.bind_ortvalue_input(f"past_{kind}_{layer}", value)
                self.io.bind_ortvalue_output(f"present_{kind}_{layer}", value)

    def run(self) -> None:
        self.session.run_with_iobinding(self.io)
