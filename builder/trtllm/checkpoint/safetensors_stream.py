"""A streaming safetensors writer: the header first, then each tensor's bytes as it is produced.

The safetensors format (huggingface/safetensors, `docs/source/index.mdx` "Format"): 8 bytes little-endian
unsigned header length N, then N bytes of JSON — `{name: {"dtype", "shape", "data_offsets": [begin, end]},
"__metadata__": {str: str}}`, offsets relative to the end of the header — then the byte buffer, which the
offsets must cover without holes or overlaps. The reference writer pads the header with spaces to a
multiple of 8 (alignment); so does this one.

Because every shape and dtype is known before any data is computed, the header is written first and the
tensors are then produced and written one at a time: peak memory is one tensor (plus its source), not a
rank's whole shard as `safetensors.torch.save_file` needs. The file is written under a temporary name
in the destination folder and renamed into place only when every tensor has been written with the
promised size; any failure removes the partial file.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

if TYPE_CHECKING:
    import torch

DTYPE_NAMES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "float8_e4m3fn": "F8_E4M3"}
ITEMSIZE = {"F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1}


@dataclass(frozen=True)
class Entry:
    """One tensor of a file to write: its name, safetensors dtype (F32, BF16, …) and shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        n = ITEMSIZE[self.dtype]
        for d in self.shape:
            n *= d
        return n


def header_bytes(entries: list[Entry], metadata: dict[str, str] | None = None) -> bytes:
    """The 8-byte length plus the space-padded JSON header for `entries`, laid out in their order."""
    header: dict[str, object] = {"__metadata__": dict(metadata or {"format": "pt"})}
    offset = 0
    for e in entries:
        if e.name in header:
            raise ValueError(f"duplicate tensor name {e.name!r}")
        header[e.name] = {"dtype": e.dtype, "shape": list(e.shape), "data_offsets": [offset, offset + e.nbytes]}
        offset += e.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw


def dtype_name(t: torch.Tensor) -> str:
    """The safetensors dtype name of a torch tensor (F32, F16, BF16, F8_E4M3)."""
    return DTYPE_NAMES[str(t.dtype).removeprefix("torch.")]


def write_file(
    path: Path,
    entries: list[Entry],
    produce: Callable[[Entry], torch.Tensor],
    metadata: dict[str, str] | None = None,
) -> int:
    """Write `path` streaming: header, then `produce(entry)` for each entry in order. Returns the file size.

    Each produced tensor must have exactly the entry's dtype and shape (checked before writing it).
    """
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(header_bytes(entries, metadata))
            for e in entries:
                _write_tensor(f, e, produce(e))
            f.flush()
            os.fsync(f.fileno())
        size = tmp.stat().st_size
        os.replace(tmp, path)
        return size
    finally:
        tmp.unlink(missing_ok=True)


def _write_tensor(f, e: Entry, t: torch.Tensor) -> None:
    import torch

    if tuple(t.shape) != e.shape or dtype_name(t) != e.dtype:
        raise ValueError(
            f"{e.name}: produced {dtype_name(t)} {tuple(t.shape)}, the header promised {e.dtype} {e.shape}"
        )
    flat = t.detach().contiguous().reshape(-1).view(torch.uint8)  # raw bytes, no copy for a contiguous tensor
    f.write(flat.numpy().data)


def read_header(path: Path) -> dict[str, dict]:
    """The JSON header of a safetensors file (without `__metadata__`), read with plain file I/O."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header


def total_bytes(entries: Iterable[Entry]) -> int:
    return sum(e.nbytes for e in entries)
