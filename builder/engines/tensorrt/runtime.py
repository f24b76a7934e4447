"""Running a TensorRT engine: `TrtGraph` (the engine, one execution context per optimization profile, their
I/O buffers) and `TrtBinding` (what `builder.engines.batched` calls a Binding: host arrays in, host arrays out).

Per graph, allocated once when it opens (`builder.engines.tensorrt.device.Lane` holds the stream and the
scratch arena):
* one execution context per profile, created `USER_MANAGED` and given the lane's shared arena;
* `IoSlots`: every I/O tensor except the caches gets a device slot and a page-locked (pinned) host staging
  slot, each of its largest size over the profiles (output sizes from TensorRT's own shape inference
  with every input at the profile's maximum); one device and one pinned allocation per graph. The slots'
  device addresses are set on every context once: a call's tensors are the leading bytes of their slots.

Per binding (one per call shape, cached by the host side): `x`, the host input arrays the host side fills
in place (its own, so values set once — verify_index — persist), `y`, the outputs as views of the pinned
staging (valid until this graph's next call: the host side copies what it keeps), the rows' KV addresses
(past_* and present_* at the same address: TensorRT's KV-cache-update layer writes in place) and its
profile. `run()`: x → pinned staging (host memcpy), async H2D copies, the shapes and KV addresses set on
the profile's context only when another binding ran on it since, `execute_async_v3` on the lane's
stream, async D2H copies of the outputs, ONE stream synchronisation. Nothing is allocated per call.

Host dtypes are the graph I/O contract's (`builder.export.contract.call_spec` in the graph's `Precision`):
bfloat16 `hidden` / `hidden_in` are ml_dtypes arrays, FP8 only ever lives in the KV buffer (`kv.DeviceKV`).
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from builder.engines.tensorrt.build import TRT_TYPES, default_plugins
from builder.engines.tensorrt.device import Lane, aligned
from builder.engines.tensorrt.probe import require
from builder.engines.tensorrt.profiles import Profile, pick
from builder.export.contract import numpy_dtype as contract_numpy_dtype

if TYPE_CHECKING:
    import tensorrt as trt

Shape = tuple[int, ...]
Spec = Mapping[str, tuple[Shape, Any]]  # name -> (shape, NumPy dtype)
Guard = Callable[[dict[str, np.ndarray]], None]  # raises before a call that would write outside a cache
_TOKENS = itertools.count(1)  # identifies bindings (never reused, unlike id())
_CONTRACT_NAME = {trt_name: name for name, trt_name in TRT_TYPES.items()} | {"INT8": "int8", "UINT8": "uint8"}
CACHE_PREFIXES = ("past_key_", "past_value_", "present_key_", "present_value_")


def numpy_dtype(trt_name: str, tensor: str) -> np.dtype[Any]:
    """The NumPy dtype of a trt.DataType name (ml_dtypes for BF16 / FP8)."""
    if trt_name not in _CONTRACT_NAME:
        raise ValueError(f"engine tensor {tensor!r} has type {trt_name}, which has no NumPy twin here")
    dtype: np.dtype[Any] = np.dtype(contract_numpy_dtype(_CONTRACT_NAME[trt_name]))
    return dtype


def is_cache(name: str) -> bool:
    return name.startswith(CACHE_PREFIXES)


class IoSlots:
    """Device slots and pinned host staging slots of a graph's non-cache I/O tensors (module docstring)."""

    def __init__(self, lane: Lane, sizes: Mapping[str, int]) -> None:
        self.offsets: dict[str, int] = {}
        self.sizes = dict(sizes)
        total = 0
        for name, n in sizes.items():
            self.offsets[name] = total
            total += aligned(n)
        self.nbytes = total
        self.device = lane.alloc(total)
        self.host = lane.pinned(total)
        self._host_np: np.ndarray = self.host.numpy()
        base = int(self.device.data_ptr())
        self.addresses = {name: base + off for name, off in self.offsets.items()}

    def _span(self, name: str, nbytes: int) -> tuple[int, int]:
        if nbytes > self.sizes[name]:
            raise ValueError(
                f"tensor {name!r}: {nbytes} bytes exceed its slot ({self.sizes[name]} bytes, the "
                "largest any optimization profile allows)"
            )
        return self.offsets[name], self.offsets[name] + nbytes

    def host_view(self, name: str, shape: Shape, dtype: Any) -> np.ndarray:
        """A view of `name`'s pinned staging slot as an array of `shape` and `dtype` (its leading bytes)."""
        a, b = self._span(name, math.prod(shape) * np.dtype(dtype).itemsize)
        view: np.ndarray = self._host_np[a:b].view(dtype).reshape(shape)
        return view

    def pair(self, name: str, nbytes: int) -> tuple[Any, Any]:
        """(device, pinned host) uint8 tensors over the leading `nbytes` of `name`'s slots."""
        a, b = self._span(name, nbytes)
        return self.device[a:b], self.host[a:b]


class TrtGraph:
    """A deserialized engine, an execution context per profile on the lane's arena, and its I/O slots."""

    def __init__(
        self, path: Path, profiles: Sequence[Profile], lane: Lane, plugin: Callable[[], None] | None = default_plugins
    ) -> None:
        require()
        import tensorrt as trt

        if plugin is not None:
            plugin()  # the tree_verify plugin's JIT implementation must be registered before deserializing
        self.path, self.profiles, self.lane = Path(path), list(profiles), lane
        self.logger = trt.Logger(trt.Logger.WARNING)
        self.runtime = trt.Runtime(self.logger)
        engine = self.runtime.deserialize_cuda_engine(self.path.read_bytes())
        if engine is None:
            raise RuntimeError(
                f"{path}: TensorRT could not deserialize the engine (built by another TensorRT "
                "version or for another GPU?)"
            )
        self.engine = engine
        if engine.num_optimization_profiles != len(self.profiles):
            raise ValueError(
                f"{path}: {engine.num_optimization_profiles} optimization profiles, the manifest lists "
                f"{len(self.profiles)}"
            )
        self.names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        self.inputs = {n for n in self.names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT}
        self.dtypes = {n: numpy_dtype(engine.get_tensor_dtype(n).name, n) for n in self.names}
        lane.reserve_arena(int(engine.device_memory_size_v2))  # the largest profile's scratch
        self.contexts = [self._new_context(p) for p in range(len(self.profiles))]
        self._generation = lane.generation
        self.io = IoSlots(lane, self._io_sizes())
        for ctx in self.contexts:
            for name, ptr in self.io.addresses.items():
                ctx.set_tensor_address(name, ptr)
        self.active: dict[int, int] = {}  # profile -> token of the binding whose shapes / KV addresses are set

    def _new_context(self, profile: int) -> "trt.IExecutionContext":
        import tensorrt as trt

        ctx = self.engine.create_execution_context(trt.ExecutionContextAllocationStrategy.USER_MANAGED)
        if ctx is None:
            raise RuntimeError(f"{self.path}: no execution context (out of host memory?)")
        ctx.set_device_memory(self.lane.arena_ptr, self.lane.arena_bytes)
        if not ctx.set_optimization_profile_async(profile, self.lane.handle):
            raise RuntimeError(f"{self.path}: cannot select optimization profile {profile}")
        return ctx

    def _io_sizes(self) -> dict[str, int]:
        """Bytes of every non-cache I/O tensor at its largest over the profiles."""
        sizes: dict[str, int] = {}
        for ctx, profile in zip(self.contexts, self.profiles):
            for name in sorted(self.inputs):
                if name not in profile.shapes:
                    raise ValueError(f"{self.path}: engine input {name!r} is not in profile {profile.name!r}")
                if not ctx.set_input_shape(name, tuple(profile.shapes[name][2])):
                    raise ValueError(f"{self.path}: profile {profile.name!r}'s largest {name} shape is refused")
            for name in self.names:
                if not is_cache(name):
                    shape = _dims(ctx.get_tensor_shape(name))
                    if min(shape, default=0) < 0:
                        raise ValueError(f"{self.path}: tensor {name!r} has no static bound ({list(shape)})")
                    sizes[name] = max(sizes.get(name, 0), math.prod(shape) * self.dtypes[name].itemsize)
        return sizes

    def context(self, profile: int) -> "trt.IExecutionContext":
        """The profile's context, pointed at the lane's arena (again, if a later engine made it move)."""
        if self._generation != self.lane.generation:
            for ctx in self.contexts:
                ctx.set_device_memory(self.lane.arena_ptr, self.lane.arena_bytes)
            self._generation = self.lane.generation
        return self.contexts[profile]


def _dims(dims: "trt.Dims") -> Shape:
    return tuple(int(dims[i]) for i in range(len(dims)))


class TrtBinding:
    """Host arrays `x` / `y`, the graph's slots and the caches of rows [r0, r1); see the module docstring."""

    def __init__(
        self,
        graph: TrtGraph,
        inputs: Spec,
        outputs: Spec,
        caches: Sequence[tuple[int, int]],
        cache_shape: Shape,
        guard: Guard | None = None,
    ) -> None:
        self.graph, self.guard, self.token = graph, guard, next(_TOKENS)
        self.x: dict[str, np.ndarray] = {name: np.zeros(shape, dtype) for name, (shape, dtype) in inputs.items()}
        shapes: dict[str, Shape] = {name: tuple(shape) for name, (shape, _) in inputs.items()}
        for layer in range(len(caches)):
            shapes |= {f"past_key_{layer}": cache_shape, f"past_value_{layer}": cache_shape}
        self.profile = pick(graph.profiles, shapes)  # the profiles name every input of the ONNX graph
        # TensorRT drops inputs no layer reads (num_nodes / num_new: they only sized the live prefix the
        # TensorRT form does without): only the engine's own inputs are copied and bound.
        self.shapes = {name: shape for name, shape in shapes.items() if name in graph.inputs}
        self._check(shapes, inputs, outputs)
        io = graph.io
        self._fed = [n for n in self.x if n in graph.inputs]
        self._stage = {n: io.host_view(n, self.x[n].shape, self.x[n].dtype) for n in self._fed}
        self.y: dict[str, np.ndarray] = {
            name: io.host_view(name, tuple(shape), dtype) for name, (shape, dtype) in outputs.items()
        }
        self._h2d = [io.pair(n, self.x[n].nbytes) for n in self._fed]
        self._d2h = [io.pair(n, arr.nbytes) for n, arr in self.y.items()]
        self.caches: dict[str, int] = {}
        for layer, (k, v) in enumerate(caches):
            for kind, ptr in (("key", k), ("value", v)):
                self.caches[f"past_{kind}_{layer}"] = self.caches[f"present_{kind}_{layer}"] = ptr
        unbound = set(graph.dtypes) - set(io.addresses) - set(self.caches)
        if unbound:
            raise ValueError(f"{graph.path}: engine tensors {sorted(unbound)} have no buffer in this call")

    def _check(self, shapes: Mapping[str, Shape], inputs: Spec, outputs: Spec) -> None:
        g = self.graph
        if not g.inputs <= set(shapes):
            raise ValueError(f"{g.path}: the engine's inputs {sorted(g.inputs - set(shapes))} are not fed by this call")
        for name, (_, dtype) in [*inputs.items(), *outputs.items()]:
            if name in g.dtypes and g.dtypes[name] != np.dtype(dtype):
                raise ValueError(f"{g.path}: tensor {name!r} is {g.dtypes[name]} in the engine, {np.dtype(dtype)} here")
        unknown = set(outputs) - set(g.dtypes)
        if unknown:
            raise ValueError(f"{g.path}: the engine has no outputs {sorted(unknown)}")

    def _activate(self, ctx: "trt.IExecutionContext") -> None:
        """Make this binding's shapes and KV addresses the context's; check TensorRT's output shapes."""
        g = self.graph
        for name, shape in self.shapes.items():
            if not ctx.set_input_shape(name, shape):
                raise ValueError(f"{g.path}: input {name!r} shape {shape} refused")
        for name, ptr in self.caches.items():
            ctx.set_tensor_address(name, ptr)
        for name, arr in self.y.items():
            if _dims(ctx.get_tensor_shape(name)) != arr.shape:
                raise ValueError(
                    f"{g.path}: output {name!r} is {_dims(ctx.get_tensor_shape(name))} for this call, "
                    f"the host side expects {arr.shape}"
                )
        g.active[self.profile] = self.token

    def run(self) -> None:
        if self.guard is not None:
            self.guard(self.x)
        g, lane = self.graph, self.graph.lane
        for name in self._fed:
            np.copyto(self._stage[name], self.x[name])  # into page-locked memory: the copies below are async
        ctx = g.context(self.profile)
        if g.active.get(self.profile) != self.token:
            self._activate(ctx)
        with lane.on():
            for dev, host in self._h2d:
                dev.copy_(host, non_blocking=True)
            if not ctx.execute_async_v3(lane.handle):
                raise RuntimeError(f"{g.path}: TensorRT execution failed (see its log)")
            for dev, host in self._d2h:
                host.copy_(dev, non_blocking=True)
        lane.sync()  # the one synchronisation per call: y is valid from here


def write_guard(capacity: int, start: Callable[[dict[str, np.ndarray]], Any], rows_written: int) -> Guard:
    """A guard refusing a call whose writes (rows_written slots from `start(x)` per row, padding rows too)
    would end past the cache: TensorRT's cache update does not check (out-of-bounds is undefined)."""

    def check(x: dict[str, np.ndarray]) -> None:
        end = np.asarray(start(x)) + rows_written
        if (end > capacity).any():
            raise ValueError(f"a row would write KV slots up to {int(end.max())}, beyond the capacity {capacity}")

    return check
