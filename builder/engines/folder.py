"""Open an engine folder whichever backend built it: the one backend-neutral entry point that `spec_decoder`
(the Triton repository's decoding model) and `trtspec generate` use.

    meta = read_meta(folder)                       # engine.json, its format and backend checked
    opened = open_engine(folder, max_batch_size=4)  # an `Opened` (builder.engines.opened)

engine.json's `backend` names the host layer: "onnxruntime" → `builder.engines.ort.load.open_ort_engine` (ONNX
Runtime sessions; `threads` per session), "tensorrt" → `builder.engines.tensorrt.folder.open_tensorrt_engine` (the
TensorRT engines on one stream and scratch arena; `device` selects the GPU through torch before anything is
allocated, `cuda` substitutes the CUDA API — CPU tests pass a fake). Both return the same `Opened`: the
`Engine`, a drafter factory, the tokenizer path, the stop ids and engine.json.

Whether this host may run a TensorRT folder (TensorRT version, compute capability, tree_verify plugin code)
is `builder.engines.tensorrt.lock.check_lock`'s question, asked by the serving side before it opens anything
(`triton_repo.compat`); a folder the engine stage just built on this host passes it by construction.

Standard library only at import; each backend's modules are imported when a folder of that backend opens.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from builder.engines.opened import Opened
    from builder.engines.tensorrt.device import CudaApi

ENGINE_JSON = "engine.json"
# backend -> the engine.json format this trtspec reads: `builder.handoffs.ENGINE_JSONS`' FORMATs (a test keeps them
# equal; here as data so that reading them imports nothing)
FORMATS = {"onnxruntime": 2, "tensorrt": 2}


def read_meta(folder: str | Path) -> dict[str, Any]:
    """engine.json of `folder`, checked against its backend's model (`builder.handoffs.read_engine_json`): a
    folder of a backend this trtspec does not open, of another format or of another shape is refused
    (`OtherFormat`: a ValueError naming the file, both formats and the rebuild command)."""
    from builder.handoffs import read_engine_json  # (pydantic: when a folder is read, not at import)

    return read_engine_json(folder)


def open_engine(
    folder: str | Path,
    drafter: dict[str, Any] | None = None,
    max_batch_size: int = 1,
    *,
    threads: int = 1,
    device: int | None = None,
    cuda: "CudaApi | None" = None,
) -> "Opened":
    """The engine of `folder` (whichever backend built it) and a drafter factory; `drafter` overrides the folder's
    (none / lookahead, or the folder's own method). `threads`: ONNX Runtime only; `device`, `cuda`: TensorRT only."""
    meta = read_meta(folder)
    if meta["backend"] == "onnxruntime":
        from builder.engines.ort.load import open_ort_engine as open_ort

        return open_ort(folder, drafter, max_batch_size, threads)
    from builder.engines.tensorrt.folder import open_tensorrt_engine as open_trt

    if device is not None and cuda is None:
        use_gpu(device)
    return open_trt(folder, drafter, max_batch_size, cuda)


def use_gpu(device: int) -> None:
    """Make GPU `device` torch's current device (the TensorRT runtime allocates and streams there)."""
    try:
        import torch
    except ImportError as exc:
        from builder.engines.tensorrt.probe import INSTALL_HINT

        raise ImportError(f"{INSTALL_HINT} ({exc})") from exc
    if not torch.cuda.is_available() or not 0 <= device < torch.cuda.device_count():
        raise ValueError(
            f"GPU {device} is not visible here ({torch.cuda.device_count()} CUDA devices; "
            "CUDA_VISIBLE_DEVICES may hide it)"
        )
    torch.cuda.set_device(device)
