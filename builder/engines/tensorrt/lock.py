"""Version lock of a TensorRT engine folder: may this host run the engines engine.json describes?

A serialized TensorRT engine runs only under the TensorRT version that built it (unless built
version-compatible, which trtspec does not do) and on GPUs of the compute capability it was built for
(its kernels were chosen and compiled for that one). trtspec's engines also embed the tree_verify plugin
by name and fields only: its implementation is Python (`plugins.tree_verify.trt_plugin`, a `tensorrt.plugin`
JIT `impl` launching the Triton kernel), registered again in every process that deserializes them — so the
plugin code that serves must be the code that built (same inputs, outputs, types and semantics).

engine.json's "tensorrt" section (written by `builder.engines.tensorrt.folder.build_folder`):

    {"version": "10.15.1.29", "device": "NVIDIA H200", "compute_capability": [9, 0],
     "plugin": {"id": "trtspec::TreeVerify", "sha256": "…", "files": ["contract.py", …]}}

    check_lock(meta, host_facts())     # UserError naming both sides and what differs, else None

Standard library only, apart from `host_facts` (tensorrt and torch, imported inside) — the serving side
may call it before it imports anything heavy.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from builder.errors import UserError

PLUGIN_ID = "trtspec::TreeVerify"
PLUGIN_FILES = (
    "contract.py",
    "reference.py",
    "kernel.py",
    "trt_plugin.py",
    "trt_attrs.py",
)  # what the TensorRT face runs


@dataclass(frozen=True)
class Host:
    """What a serving host has (None where absent)."""

    tensorrt: str | None
    device: str | None
    compute_capability: tuple[int, int] | None
    plugin_sha256: str | None

    def describe(self) -> str:
        cc = "no GPU" if self.compute_capability is None else f"{self.device} ({sm(self.compute_capability)})"
        return f"TensorRT {self.tensorrt or 'none'}, {cc}, tree_verify plugin {_short(self.plugin_sha256)}"


def sm(cc: Sequence[int]) -> str:
    return f"sm{cc[0]}{cc[1]}"


def _short(digest: str | None) -> str:
    return "absent" if digest is None else digest[:12]


def plugin_folder() -> Path | None:
    """Where `plugins.tree_verify` is importable from (None: not importable)."""
    spec = importlib.util.find_spec("plugins.tree_verify")
    locations = None if spec is None else spec.submodule_search_locations
    return Path(list(locations)[0]) if locations else None


def plugin_sha256(folder: Path | None = None) -> str | None:
    """sha256 over the tree_verify TensorRT face's source files (name and bytes, in PLUGIN_FILES order)."""
    folder = plugin_folder() if folder is None else folder
    if folder is None or not all((folder / name).is_file() for name in PLUGIN_FILES):
        return None
    h = hashlib.sha256()
    for name in PLUGIN_FILES:
        data = (folder / name).read_bytes()
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def engine_lock(tensorrt_version: str, device: str, compute_capability: Sequence[int]) -> dict[str, Any]:
    """engine.json's "tensorrt" section for engines built here (module docstring)."""
    return {
        "version": tensorrt_version,
        "device": device,
        "compute_capability": [int(c) for c in compute_capability],
        "plugin": {"id": PLUGIN_ID, "sha256": plugin_sha256(), "files": list(PLUGIN_FILES)},
    }


def _numbers(version: str) -> tuple[int, ...]:
    m = re.match(r"^\d+(?:\.\d+)*", version.strip())
    return tuple(int(x) for x in m.group(0).split(".")) if m else ()


def same_tensorrt(built: str, here: str) -> bool:
    """Equal on every version component both spell out, and on at least major.minor.patch."""
    a, b = _numbers(built), _numbers(here)
    n = min(len(a), len(b))
    return n >= 3 and a[:n] == b[:n]


def mismatches(meta: Mapping[str, Any], host: Host) -> list[str]:
    """What differs between the engines' lock (engine.json) and `host` (empty: it may run them)."""
    lock = meta.get("tensorrt")
    if not isinstance(lock, Mapping) or not {"version", "compute_capability", "plugin"} <= set(lock):
        raise UserError(
            "engine.json has no tensorrt {version, compute_capability, plugin} lock (built by an older "
            "trtspec?): rebuild the engine",
            field="engine.json",
        )
    out = []
    if host.tensorrt is None or not same_tensorrt(str(lock["version"]), host.tensorrt):
        out.append("TensorRT differs")
    cc = tuple(int(c) for c in lock["compute_capability"])
    if host.compute_capability is None or tuple(host.compute_capability) != cc:
        out.append(f"the engines need an {sm(cc)} GPU")
    if host.plugin_sha256 is None or lock["plugin"].get("sha256") != host.plugin_sha256:
        out.append("the tree_verify plugin code differs")
    return out


def check_lock(meta: Mapping[str, Any], host: Host) -> None:
    """UserError naming both sides unless `host` can run the engines `meta` (engine.json) describes."""
    problems = mismatches(meta, host)
    if problems:
        lock = meta["tensorrt"]
        built = (
            f"TensorRT {lock['version']}, {lock.get('device')} ({sm(lock['compute_capability'])}), tree_verify "
            f"plugin {_short(lock['plugin'].get('sha256'))}"
        )
        raise UserError(
            f"engines built with {built}; this host has {host.describe()} ({'; '.join(problems)}): rebuild "
            "the engines on this host (trtspec build RECIPE) or serve them where they were built",
            field="engine.json",
        )


def host_facts(device_index: int = 0) -> Host:
    """This host's TensorRT version, GPU `device_index` (name, compute capability) and plugin digest."""
    tensorrt: str | None = None
    try:
        import tensorrt as trt

        tensorrt = str(getattr(trt, "__version__", "")) or None
    except ImportError:
        pass
    device, cc = None, None
    try:
        import torch

        if torch.cuda.is_available():
            device = str(torch.cuda.get_device_name(device_index))
            major, minor = torch.cuda.get_device_capability(device_index)
            cc = (int(major), int(minor))
    except ImportError:
        pass
    return Host(tensorrt, device, cc, plugin_sha256())
