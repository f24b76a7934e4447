"""Version lock: does a TensorRT-LLM engine (its engine.json) match the host that is about to serve it?

A TensorRT engine runs only under the TensorRT it was built with, and TensorRT-LLM's runtime reads only
engines of its own release (`tensorrt_llm/builder.py` writes `version` into the engine's config.json and
`get_engine_version` reads it back); the kernels are compiled for one compute capability. So the serving
host must have the same TensorRT-LLM release, the same TensorRT version and GPUs of the engine's compute
capability, at least as many as the engine's world size (tp × pp ranks, one GPU each).

    check_engine(json.load(open("engine/engine.json")), installed_here())   # UserError naming both sides

This file uses only the standard library: `trtspec deploy` copies it verbatim into the bundle as
`check_engine.py`, which `launch.sh` runs inside NVIDIA's Triton TRT-LLM container (where trtspec is not
installed) before it starts tritonserver:

    python3 check_engine.py ENGINE_DIR      # exit 0: match; exit 2: one line saying what differs
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    from builder.errors import UserError
except ImportError:  # the standalone copy (check_engine.py) inside the serving container: no trtspec there

    class UserError(Exception):  # type: ignore[no-redef]
        def __init__(self, message: str, *, location: str | None = None, field: str | None = None,
                     allowed: str | None = None) -> None:  # fmt: skip
            super().__init__(message)
            self.message, self.location, self.field, self.allowed = message, location, field, allowed


ENGINE_JSON = "engine.json"


@dataclass(frozen=True)
class Installed:
    """What a serving host has: versions (None when absent) and one compute capability per visible GPU."""

    trtllm: str | None
    tensorrt: str | None
    compute_capabilities: tuple[tuple[int, int], ...]
    gpu_names: tuple[str, ...] = ()

    def describe(self) -> str:
        ccs = sorted(set(self.compute_capabilities))
        gpus = f"{len(self.compute_capabilities)} GPU(s) {', '.join(sm(c) for c in ccs)}" if ccs else "no GPU"
        return f"TensorRT-LLM {self.trtllm or 'none'} / TensorRT {self.tensorrt or 'none'}, {gpus}"


def sm(cc: tuple[int, int] | list[int]) -> str:
    return f"sm{cc[0]}{cc[1]}"


def _numbers(version: str) -> tuple[int, ...]:
    m = re.match(r"^\d+(?:\.\d+)*", version.strip())
    return tuple(int(x) for x in m.group(0).split(".")) if m else ()


def same_release(built: str, here: str) -> bool:
    """TensorRT-LLM: the same version string (1.2.1 ≠ 1.2.1rc1 ≠ 1.2.0)."""
    return built.strip() == here.strip()


def same_tensorrt(built: str, here: str) -> bool:
    """TensorRT: equal on every component both spell out, and on at least major.minor.patch
    ("10.14.1.48" matches "10.14.1.48" and "10.14.1", never "10.14.0" or "10.13")."""
    a, b = _numbers(built), _numbers(here)
    n = min(len(a), len(b))
    return n >= 3 and a[:n] == b[:n]


def _built(manifest: dict[str, Any]) -> tuple[str, str, tuple[int, int], int]:
    """(TensorRT-LLM, TensorRT, compute capability, world size) the engine was built with (engine.json)."""
    try:
        cc = manifest["gpu"]["compute_capability"]
        return (str(manifest["tensorrt_llm"]), str(manifest["tensorrt"]), (int(cc[0]), int(cc[1])),
                int(manifest["world_size"]))
    except (KeyError, TypeError, ValueError, IndexError):
        raise UserError("engine.json lacks tensorrt_llm / tensorrt / gpu.compute_capability / world_size (not a "
                        "trtspec TRT-LLM engine manifest)", field="engine.json") from None


def check_engine(manifest: dict[str, Any], installed: Installed) -> None:
    """UserError (both sides named) unless `installed` can run the engine `manifest` describes."""
    trtllm, trt, cc, world = _built(manifest)
    built = f"engine built with TensorRT-LLM {trtllm} / TensorRT {trt} for {sm(cc)} × {world}"
    here = f"this host has {installed.describe()}"
    problems = []
    if installed.trtllm is None or not same_release(trtllm, installed.trtllm):
        problems.append("TensorRT-LLM differs")
    if installed.tensorrt is None or not same_tensorrt(trt, installed.tensorrt):
        problems.append("TensorRT differs")
    matching = [c for c in installed.compute_capabilities if tuple(c) == cc]
    if len(matching) < world:
        problems.append(f"needs {world} {sm(cc)} GPU(s), found {len(matching)}")
    if problems:
        raise UserError(f"{built}; {here} ({'; '.join(problems)}): rebuild the engine on this host's stack, or serve "
                        "it in the container it was built for", field="engine.json")  # fmt: skip


# -- what this host has ------------------------------------------------------------------------------------


def _dist_version(*names: str) -> str | None:
    from importlib import metadata

    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _module_version(name: str) -> str | None:
    """`module.__version__` where the distribution metadata is missing (NVIDIA's containers install from source)."""
    import importlib

    try:
        return str(importlib.import_module(name).__version__)
    except Exception:  # an installed-but-broken GPU library raises anything from ImportError to OSError
        return None


def gpus_here(timeout: float = 20.0) -> list[tuple[str, tuple[int, int]]]:
    """(name, compute capability) per visible GPU from `nvidia-smi`; [] without a driver."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run([exe, "--query-gpu=name,compute_cap", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=timeout, check=True).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return []
    return parse_gpu_query(out)


def parse_gpu_query(text: str) -> list[tuple[str, tuple[int, int]]]:
    """`nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader` lines, e.g. "NVIDIA H100 80GB HBM3, 9.0"."""
    gpus = []
    for line in text.splitlines():
        name, _, cap = line.rpartition(",")
        m = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", cap)
        if name.strip() and m:
            gpus.append((name.strip(), (int(m.group(1)), int(m.group(2)))))
    return gpus


def installed_here() -> Installed:
    """TensorRT-LLM and TensorRT versions (distribution metadata, else `__version__`) and the GPUs here."""
    trtllm = _dist_version("tensorrt_llm", "tensorrt-llm") or _module_version("tensorrt_llm")
    trt = _dist_version("tensorrt", "tensorrt-cu12", "tensorrt-cu13", "tensorrt-cu12-bindings") or _module_version("tensorrt")
    gpus = gpus_here()
    return Installed(trtllm, trt, tuple(cc for _, cc in gpus), tuple(n for n, _ in gpus))


def read_manifest(engine_dir: Path) -> dict[str, Any]:
    path = Path(engine_dir) / ENGINE_JSON
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"no {ENGINE_JSON} in {engine_dir} (not a trtspec TRT-LLM engine folder)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("backend") != "trtllm":
        raise UserError(f"{path}: backend is not trtllm", field="backend", allowed="trtllm")
    return data


def main(argv: list[str]) -> int:
    """`python3 check_engine.py ENGINE_DIR`: 0 when this host can serve the engine, else 2 and one line why."""
    if len(argv) != 1:
        print("usage: check_engine.py ENGINE_DIR", file=sys.stderr)
        return 2
    here = installed_here()
    try:
        check_engine(read_manifest(Path(argv[0])), here)
    except UserError as exc:
        print(f"check_engine: {exc.message}", file=sys.stderr)
        return 2
    print(f"check_engine: {argv[0]} matches this host ({here.describe()})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
