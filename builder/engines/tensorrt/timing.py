"""The TensorRT timing cache: one per host, TensorRT version and GPU, outside every engine folder.

TensorRT times candidate kernels ("tactics") for each layer while it builds; the timing cache keeps those
timings, so the next build on the same host, TensorRT and GPU skips re-timing the layers it has seen (an
engine folder is a stage output, content-addressed: a cache inside it would never be found by the next
build). Timings are only valid for the TensorRT version and the device that measured them, hence one file
per (version, device name, compute capability):

    $XDG_CACHE_HOME/trtspec/timing/<tensorrt version>-<device>-sm<major><minor>.cache   (~/.cache without XDG)

`build_engine` loads it before the build and writes it back after, atomically (a temporary file in the
same folder renamed over it: a concurrent build never reads a torn file; concurrent builds merge, see
`builder.engines.tensorrt.build`). The engines do not depend on it for correctness — only build time.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Mapping, Sequence

SUFFIX = ".cache"


def cache_root(env: Mapping[str, str] | None = None) -> Path:
    """$XDG_CACHE_HOME/trtspec/timing (XDG Base Directory: ~/.cache when unset or not absolute)."""
    env = os.environ if env is None else env
    base = env.get("XDG_CACHE_HOME", "")
    root = Path(base) if base and Path(base).is_absolute() else Path(env.get("HOME") or Path.home()) / ".cache"
    return root / "trtspec" / "timing"


def cache_path(tensorrt_version: str, device: str, compute_capability: Sequence[int], root: Path | None = None) -> Path:
    """The timing cache file of this TensorRT version and GPU (module docstring)."""
    slug = re.sub(r"[^A-Za-z0-9.]+", "_", device).strip("_") or "gpu"
    cc = "".join(str(int(c)) for c in compute_capability)
    return (cache_root() if root is None else root) / f"{tensorrt_version}-{slug}-sm{cc}{SUFFIX}"


def read(path: Path | None) -> bytes:
    """The cache's bytes (b"" when there is none yet: TensorRT starts an empty cache from them)."""
    return path.read_bytes() if path is not None and path.is_file() else b""


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same folder, renamed over it (never torn)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
