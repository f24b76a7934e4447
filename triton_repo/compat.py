"""spec_decoder refuses an engine built by other versions than the ones it runs on.

The engine folder's engine.json records its format and the versions that built it (onnxruntime,
trtspec); an ONNX Runtime or trtspec of another version may read the graphs differently, so loading
stops with a message that names both sides and the way out.
"""

from __future__ import annotations

from typing import Any

CHECKED = ("engine_format", "onnxruntime", "trtspec")


def built_versions(meta: dict[str, Any]) -> dict[str, str]:
    v = meta.get("versions", {})
    return {"engine_format": str(meta.get("format")), "onnxruntime": str(v.get("onnxruntime")),
            "trtspec": str(v.get("trtspec"))}  # fmt: skip


def runtime_versions() -> dict[str, str]:
    from importlib import metadata

    import onnxruntime

    from builder.engines.ort.load import FORMAT

    try:
        trtspec = metadata.version("trtspec")
    except metadata.PackageNotFoundError:
        trtspec = "not installed"
    return {"engine_format": str(FORMAT), "onnxruntime": onnxruntime.__version__, "trtspec": trtspec}


def mismatch(built: dict[str, str], runtime: dict[str, str]) -> str | None:
    """None when every checked version agrees, else one message naming both sides."""
    diff = [k for k in CHECKED if built.get(k) != runtime.get(k)]
    if not diff:
        return None
    side = lambda d: ", ".join(f"{k} {d.get(k)}" for k in diff)  # noqa: E731
    return (f"this repository's engine was built with {side(built)}, but this server runs {side(runtime)}: "
            "rebuild it in this environment (trtspec build RECIPE) or serve it from the environment that built it")
