"""Is TensorRT importable here? (No GPU machine of this project's CI has it: its wheels are placeholders.)"""

from __future__ import annotations

import importlib

INSTALL_HINT = (
    "TensorRT engines need tensorrt >= 10.15 (with tensorrt.plugin), torch with CUDA and triton on a "
    "GPU host: pip install 'trtspec[cpu,tensorrt]'"
)
MIN_VERSION = (10, 15)


def missing() -> str | None:
    """None when TensorRT ≥ 10.15 can be used; else why not, in one phrase."""
    try:
        trt = importlib.import_module("tensorrt")
    except ImportError as err:
        return f"import tensorrt failed: {err}"
    if not hasattr(trt, "Builder"):  # tensorrt-stubs installs `tensorrt/` with only .pyi files
        return "only the tensorrt-stubs type stubs are installed, no tensorrt.Builder"
    version = str(getattr(trt, "__version__", "0"))
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if parts < MIN_VERSION:
        return f"tensorrt {version} is older than {'.'.join(map(str, MIN_VERSION))} (no native attention layers)"
    return None


def require() -> None:
    """Raise ImportError with the install hint unless TensorRT can be used."""
    reason = missing()
    if reason is not None:
        raise ImportError(f"{INSTALL_HINT} ({reason})")


def version() -> str:
    """The installed TensorRT's version (after `require()`)."""
    require()
    return str(getattr(importlib.import_module("tensorrt"), "__version__"))
