"""spec_decoder refuses an engine this server cannot run as it was built.

The engine folder's engine.json records its format, its backend and the versions that built it. Checked, with
one message that names both sides and the way out:

* every backend: the engine folder's format, and the trtspec that built the engine against the trtspec whose
  runtime serves it (the repository's runtime.json: `triton_repo.runtime`; in the source tree, the installed
  trtspec);
* onnxruntime: the ONNX Runtime version (another one may read the graphs differently);
* tensorrt: the version lock `builder.engines.tensorrt.lock.check_lock` — TensorRT version, the GPU's compute
  capability (of the GPU this instance runs on) and the tree_verify plugin's code digest.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CHECKED = ("engine_format", "onnxruntime", "trtspec")
RUNTIME_JSON = Path(__file__).resolve().parents[1] / "runtime.json"  # present inside a repository's runtime


def built_versions(meta: dict[str, Any]) -> dict[str, str]:
    v = meta.get("versions", {})
    out = {"engine_format": str(meta.get("format")), "trtspec": str(v.get("trtspec"))}
    if meta.get("backend", "onnxruntime") == "onnxruntime":
        out["onnxruntime"] = str(v.get("onnxruntime"))
    return out


def serving_trtspec() -> str:
    """The trtspec version of the code serving: the repository runtime's (runtime.json), else the installed one."""
    try:
        return str(json.loads(RUNTIME_JSON.read_text(encoding="utf-8"))["trtspec"])
    except (OSError, ValueError, KeyError):
        from triton_repo.runtime import trtspec_version

        return trtspec_version()


def runtime_versions(backend: str = "onnxruntime") -> dict[str, str]:
    from builder.engines.folder import FORMATS

    out = {"engine_format": str(FORMATS.get(backend)), "trtspec": serving_trtspec()}
    if backend == "onnxruntime":
        import onnxruntime

        out["onnxruntime"] = onnxruntime.__version__
    return out


def mismatch(built: dict[str, str], runtime: dict[str, str]) -> str | None:
    """None when every checked version agrees, else one message naming both sides."""
    diff = [k for k in CHECKED if k in built and built.get(k) != runtime.get(k)]
    if not diff:
        return None
    side = lambda d: ", ".join(f"{k} {d.get(k)}" for k in diff)  # noqa: E731
    return (
        f"this repository's engine was built with {side(built)}, but this server runs {side(runtime)}: "
        "rebuild it in this environment (trtspec build RECIPE) or serve it from the environment that built it"
    )


def check(meta: dict[str, Any], device: int = 0, host: Any = None) -> str | None:
    """None when this server may run the engine `meta` (engine.json) describes on GPU `device` (TensorRT folders;
    `host`: a `lock.Host` to check against instead of this host's facts), else why not, naming both sides."""
    backend = str(meta.get("backend"))
    problem = mismatch(built_versions(meta), runtime_versions(backend))
    if problem or backend != "tensorrt":
        return problem
    from builder.engines.tensorrt.lock import check_lock, host_facts
    from builder.errors import UserError

    try:
        check_lock(meta, host_facts(device) if host is None else host)
    except UserError as exc:
        return str(exc.message)
    return None


def instance_gpu(args: dict, meta: dict) -> int | None:
    """The GPU this instance runs a TensorRT folder on (Triton's `model_instance_device_id` of a KIND_GPU instance:
    python_backend src/python_be.cc `LaunchStubProcess` → src/stub_launcher.cc `ModelInstanceStubProcess`, commit
    00bec0aa; the kind is TRITONSERVER_InstanceGroupKindString's "GPU" / "CPU"); None for ONNX Runtime. A TensorRT
    folder on a KIND_CPU instance is refused."""
    if meta.get("backend") != "tensorrt":
        return None
    if args.get("model_instance_kind") != "GPU":
        raise RuntimeError(
            f"spec_decoder refuses to load: a TensorRT engine runs on a GPU, but this instance is "
            f"{args.get('model_instance_kind')} (the repository's spec_decoder needs a KIND_GPU instance group)"
        )
    return int(args.get("model_instance_device_id", 0))
