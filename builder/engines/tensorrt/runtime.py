"""Running a serialized TensorRT engine: the engine with one execution context per optimization profile,
KV buffers on the device, and `TrtBinding` (what `builder.engines.batched` calls a Binding).

`TrtBinding` holds, for one set of input shapes, host NumPy arrays `x` / `y` (the engines fill `x` and
read `y` exactly as with ONNX Runtime), device tensors of the same shapes, and the device addresses of
the rows' KV caches. `run()` copies `x` to the device, makes its shapes and addresses the context's
(only when another binding ran on that context since), enqueues the engine on torch's current CUDA
stream and copies `y` back (the one synchronisation per call). past_* and present_* are bound to the
same address: TensorRT's KV-cache-update layer writes the cache in place and requires exactly that.

Device memory is torch's (the tree_verify plugin runs a Triton kernel through torch as well).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from builder.engines.tensorrt.probe import require
from builder.engines.tensorrt.profiles import Profile, pick

if TYPE_CHECKING:
    import tensorrt as trt

Shape = tuple[int, ...]
Spec = Mapping[str, tuple[Shape, type]]
Guard = Callable[[dict[str, np.ndarray]], None]  # raises before a call that would write outside a cache
_TOKENS = itertools.count(1)  # identifies bindings (never reused, unlike id())


_NUMPY = {"FLOAT": np.float32, "HALF": np.float16, "INT8": np.int8, "INT32": np.int32, "INT64": np.int64,
          "BOOL": np.bool_, "UINT8": np.uint8}  # trt.DataType name -> numpy (the I/O types our graphs use)


def _numpy_dtype(trt_name: str, tensor: str) -> np.dtype:
    if trt_name not in _NUMPY:
        raise ValueError(f"engine tensor {tensor!r} has type {trt_name}, which has no NumPy twin here")
    return np.dtype(_NUMPY[trt_name])


class TrtGraph:
    """A deserialized engine and an execution context per profile (created on first use)."""

    def __init__(self, path: Path, profiles: Sequence[Profile]) -> None:
        require()
        import tensorrt as trt

        from plugins.tree_verify import trt_plugin

        trt_plugin.register()  # the plugin's JIT implementation must be registered before deserializing
        self.path, self.profiles = Path(path), list(profiles)
        self.logger = trt.Logger(trt.Logger.WARNING)
        self.runtime = trt.Runtime(self.logger)
        engine = self.runtime.deserialize_cuda_engine(self.path.read_bytes())
        if engine is None:
            raise RuntimeError(f"{path}: TensorRT could not deserialize the engine (built by another TensorRT "
                               "version or for another GPU?)")  # fmt: skip
        self.engine = engine
        if engine.num_optimization_profiles != len(self.profiles):
            raise ValueError(f"{path}: {engine.num_optimization_profiles} optimization profiles, the manifest lists "
                             f"{len(self.profiles)}")  # fmt: skip
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        self.inputs = {n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT}
        self.dtypes = {n: _numpy_dtype(engine.get_tensor_dtype(n).name, n) for n in names}
        self._contexts: dict[int, trt.IExecutionContext] = {}
        self.active: dict[int, int] = {}  # profile -> token of the binding whose shapes/addresses are set

    def context(self, profile: int, stream: int) -> "trt.IExecutionContext":
        ctx = self._contexts.get(profile)
        if ctx is None:
            ctx = self.engine.create_execution_context()
            if ctx is None:
                raise RuntimeError(f"{self.path}: no execution context (out of device memory?)")
            if not ctx.set_optimization_profile_async(profile, stream):
                raise RuntimeError(f"{self.path}: cannot select optimization profile {profile}")
            self._contexts[profile] = ctx
        return ctx


class DeviceKV:
    """KV buffers on the device, [L, 2 (key, value), B_max, KV, CAP, D] float32 zeros (never NaN: the
    attention reads masked slots too); rows 0..B-1 are the running batch (`builder.engines.rows`)."""

    def __init__(self, layers: int, batch: int, kv_heads: int, capacity: int, head_dim: int) -> None:
        import torch

        self.buf = torch.zeros((layers, 2, batch, kv_heads, capacity, head_dim), dtype=torch.float32, device="cuda")
        self.layers, self.kv_heads, self.capacity, self.head_dim = layers, kv_heads, capacity, head_dim

    @property
    def nbytes(self) -> int:
        return int(self.buf.numel() * self.buf.element_size())

    def addresses(self, r0: int, r1: int) -> list[tuple[int, int]]:
        """(key, value) device addresses of rows [r0, r1) of every layer (contiguous from row r0)."""
        return [(int(self.buf[layer, 0, r0].data_ptr()), int(self.buf[layer, 1, r0].data_ptr()))
                for layer in range(self.layers)]  # fmt: skip

    def shape(self, rows: int) -> Shape:
        return (rows, self.kv_heads, self.capacity, self.head_dim)

    def compact(self, row: int, start: int, nodes: np.ndarray) -> None:
        """Move the KV of slots start + nodes[k] to start + k (a committed chain); no-op when in place."""
        import torch

        k = len(nodes)
        if k == 0 or (nodes == np.arange(k)).all():
            return
        cache = self.buf[:, :, row]  # (L, 2, KV, CAP, D) view
        index = torch.as_tensor(start + nodes, device=cache.device)
        cache[:, :, :, start : start + k] = cache.index_select(3, index)  # gathered (a copy) before the write

    def move_row(self, dst: int, src: int, length: int) -> None:
        """Copy the first `length` slots of row `src` into row `dst` (a departure leaves rows dense)."""
        self.buf[:, :, dst, :, :length] = self.buf[:, :, src, :, :length]


class TrtBinding:
    """Host arrays `x` / `y`, their device twins, and the caches of rows [r0, r1); see the module docstring."""

    def __init__(self, graph: TrtGraph, inputs: Spec, outputs: Spec, caches: Sequence[tuple[int, int]],
                 cache_shape: Shape, guard: Guard | None = None) -> None:  # fmt: skip
        import torch

        self.graph, self.guard, self.token = graph, guard, next(_TOKENS)
        self.x: dict[str, np.ndarray] = {name: np.zeros(shape, dtype) for name, (shape, dtype) in inputs.items()}
        self.y: dict[str, np.ndarray] = {name: np.zeros(shape, dtype) for name, (shape, dtype) in outputs.items()}
        shapes: dict[str, Shape] = {name: shape for name, (shape, _) in inputs.items()}
        for layer in range(len(caches)):
            shapes |= {f"past_key_{layer}": cache_shape, f"past_value_{layer}": cache_shape}
        self.profile = pick(graph.profiles, shapes)  # the profiles name every input of the ONNX graph
        # TensorRT drops inputs no layer reads (num_nodes / num_new: they only sized the live prefix the
        # TensorRT form does without): only the engine's own inputs are copied and bound.
        self.shapes = {name: shape for name, shape in shapes.items() if name in graph.inputs}
        self._check(shapes)
        fed = [n for n in self.x if n in graph.inputs]
        self._host = {name: torch.from_numpy(arr) for name, arr in [*((n, self.x[n]) for n in fed), *self.y.items()]}
        self._dev = {name: torch.empty_like(t, device="cuda") for name, t in self._host.items()}
        self._fed = fed
        self.addresses = {name: int(t.data_ptr()) for name, t in self._dev.items()}
        for layer, (k, v) in enumerate(caches):
            for kind, ptr in (("key", k), ("value", v)):
                self.addresses[f"past_{kind}_{layer}"] = self.addresses[f"present_{kind}_{layer}"] = ptr
        unbound = set(graph.dtypes) - set(self.addresses)
        if unbound:
            raise ValueError(f"{graph.path}: engine tensors {sorted(unbound)} have no buffer in this call")

    def _check(self, shapes: Mapping[str, Shape]) -> None:
        g = self.graph
        if not g.inputs <= set(shapes):
            raise ValueError(f"{g.path}: the engine's inputs {sorted(g.inputs - set(shapes))} are not fed by this call")
        for name, arr in [*self.x.items(), *self.y.items()]:
            if name in g.dtypes and g.dtypes[name] != arr.dtype:
                raise ValueError(f"{g.path}: tensor {name!r} is {g.dtypes[name]} in the engine, {arr.dtype} here")
        unknown = set(self.y) - set(g.dtypes)
        if unknown:
            raise ValueError(f"{g.path}: the engine has no outputs {sorted(unknown)}")

    def run(self) -> None:
        import torch

        if self.guard is not None:
            self.guard(self.x)
        stream = torch.cuda.current_stream()
        for name in self._fed:
            self._dev[name].copy_(self._host[name])
        ctx = self.graph.context(self.profile, stream.cuda_stream)
        if self.graph.active.get(self.profile) != self.token:
            for name, shape in self.shapes.items():
                if not ctx.set_input_shape(name, shape):
                    raise ValueError(f"{self.graph.path}: input {name!r} shape {shape} refused")
            for name, ptr in self.addresses.items():
                ctx.set_tensor_address(name, ptr)
            self.graph.active[self.profile] = self.token
        if not ctx.execute_async_v3(stream.cuda_stream):
            raise RuntimeError(f"{self.graph.path}: TensorRT execution failed (see its log)")
        for name in self.y:
            self._host[name].copy_(self._dev[name])  # into pageable memory: waits for the stream


def write_guard(capacity: int, start: Callable[[dict[str, np.ndarray]], Any], rows_written: int) -> Guard:
    """A guard refusing a call whose writes (rows_written slots from `start(x)` per row, padding rows too)
    would end past the cache: TensorRT's cache update does not check (out-of-bounds is undefined)."""

    def check(x: dict[str, np.ndarray]) -> None:
        end = np.asarray(start(x)) + rows_written
        if (end > capacity).any():
            raise ValueError(f"a row would write KV slots up to {int(end.max())}, beyond the capacity {capacity}")

    return check
