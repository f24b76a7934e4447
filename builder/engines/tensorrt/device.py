"""The CUDA side of the TensorRT runtime: one stream, one scratch arena, device buffers, page-locked staging.

`Lane` is what the engines of one opened engine folder (target greedy / rejection, EAGLE draft) run on:

* a dedicated CUDA stream — `torch.cuda.Stream()`, created `cudaStreamNonBlocking` (torch's stream pool,
  `c10/cuda/CUDAStream.cpp`: `kDefaultFlags = cudaStreamNonBlocking`), never the legacy default stream
  (which waits for, and holds up, every blocking stream of the process). Every enqueue, copy and KV move
  of the engines is issued on it, in order, so nothing else needs an event; a call ends with ONE
  synchronisation of this stream (the host reads its results then);
* ONE device-memory arena for the execution contexts of all its engines and profiles: contexts are
  created with `ExecutionContextAllocationStrategy.USER_MANAGED` and given the arena with
  `set_device_memory(ptr, size)`; its size is the largest `ICudaEngine.device_memory_size_v2` (TensorRT:
  the largest profile's need, as `get_device_memory_size_for_profile_v2` per profile) of the engines opened.
  Sharing is allowed because the contexts never run concurrently (one stream; tensorrt-stubs 10.13,
  `IExecutionContext.device_memory` / `set_device_memory`: the memory is in use from enqueue until the
  work completes, and only *parallel* use by another context is undefined). TensorRT-LLM's Python runtime
  does the same for its contexts (`tensorrt_llm/runtime/generation.py`, `_Runtime.__prepare_execution_contexts`:
  one `cudaMalloc(engine.device_memory_size_v2)` given to every context). The arena only grows, when an
  engine opened later needs more (after a stream sync; contexts are pointed at the new one before their
  next enqueue, `generation`); `open_engine` reserves the largest recorded size up front, so it is
  allocated once.

`CudaApi` is everything the runtime asks of CUDA (`TorchCuda`: torch's allocator and streams, which the
tree_verify plugin's Triton kernel shares). CPU tests substitute a fake (named so) for what is physically
absent here.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol

ALIGN = 256  # TensorRT wants 256-byte aligned device memory (set_device_memory); torch's blocks are 512-aligned


class CudaApi(Protocol):
    """Streams, allocation and synchronisation (device tensors are torch uint8 tensors)."""

    def new_stream(self) -> Any: ...
    def stream_handle(self, stream: Any) -> int: ...  # the cudaStream_t TensorRT takes
    def on(self, stream: Any) -> AbstractContextManager[Any]: ...  # torch work issued inside runs on `stream`
    def synchronize(self, stream: Any) -> None: ...
    def device_bytes(self, nbytes: int) -> Any: ...  # uint8 tensor in device memory
    def pinned_bytes(self, nbytes: int) -> Any: ...  # uint8 tensor in page-locked host memory


class TorchCuda:
    """`CudaApi` through torch (GPU hosts)."""

    def new_stream(self) -> Any:
        import torch

        return torch.cuda.Stream()

    def stream_handle(self, stream: Any) -> int:
        return int(stream.cuda_stream)

    def on(self, stream: Any) -> AbstractContextManager[Any]:
        import torch

        ctx: AbstractContextManager[Any] = torch.cuda.stream(stream)
        return ctx

    def synchronize(self, stream: Any) -> None:
        stream.synchronize()

    def device_bytes(self, nbytes: int) -> Any:
        import torch

        return torch.empty(max(nbytes, 1), dtype=torch.uint8, device="cuda")

    def pinned_bytes(self, nbytes: int) -> Any:
        import torch

        return torch.empty(max(nbytes, 1), dtype=torch.uint8, pin_memory=True)


class Lane:
    """A stream and the scratch arena its engines' contexts share (module docstring)."""

    def __init__(self, cuda: CudaApi | None = None, reserve: int = 0) -> None:
        self.cuda: CudaApi = TorchCuda() if cuda is None else cuda
        self.stream = self.cuda.new_stream()
        self.handle = self.cuda.stream_handle(self.stream)
        self.arena_bytes = 0
        self.generation = 0  # bumped whenever the arena moves (contexts must be given the new one)
        self._arena: Any = None
        self.reserve_arena(reserve)

    @property
    def arena_ptr(self) -> int:
        return 0 if self._arena is None else int(self._arena.data_ptr())

    def reserve_arena(self, nbytes: int) -> None:
        """Make the arena at least `nbytes` (TensorRT accepts a null arena for engines needing none)."""
        if nbytes <= self.arena_bytes:
            return
        if self._arena is not None:
            self.sync()  # no enqueued work may still use the old arena when it is freed
        self._arena = None
        self._arena = self.alloc(nbytes)
        self.arena_bytes = nbytes
        self.generation += 1

    def alloc(self, nbytes: int) -> Any:
        """Device memory owned by this lane's stream (torch's allocator reuses it only in the stream's order)."""
        with self.on():
            return self.cuda.device_bytes(nbytes)

    def pinned(self, nbytes: int) -> Any:
        return self.cuda.pinned_bytes(nbytes)

    def on(self) -> AbstractContextManager[Any]:
        return self.cuda.on(self.stream)

    def sync(self) -> None:
        self.cuda.synchronize(self.stream)


def aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN
