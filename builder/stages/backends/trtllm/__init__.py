"""target.backend trtllm: TensorRT-LLM 1.2.x — its checkpoint, `trtllm-build` and its Triton backend.

Stages load → quantize (when the recipe quantizes) → checkpoint (TP/PP ranks, FP8, on the CPU) → engine
(`trtllm-build` on a GPU host; elsewhere the build stops there, resumable, and `trtspec deploy` writes a bundle)
→ repo (inflight_batcher_llm). TensorRT-LLM's C++ runtime does paged KV, in-flight batching and TP/PP; trtspec
writes what it reads. Memory: the paged KV plan (`builder.plan.memory`). Lock: engine.json written by the
standard-library `builder.trtllm.compat` (the bundle's check_engine.py) — TensorRT-LLM release, TensorRT version,
compute capability and GPU count, every file's size and sha256. Its checkpoint converter reads safetensors only:
the load stage keeps a safetensors copy of a pickled checkpoint.
"""

from __future__ import annotations

from typing import Any, Mapping

from builder.stages import load, quantize
from builder.stages.backends.trtllm import checkpoint, engine, repo
from builder.stages.stage import Backend, EngineLock


def check(meta: Mapping[str, Any], host: Any = None) -> str | None:
    """None when this host (or `host`, a `builder.trtllm.compat.Installed`) may run the engine engine.json (`meta`)
    describes, else why not (files are checked by the bundle's launch, `compat.verify_engine`)."""
    from builder.errors import UserError
    from builder.trtllm.compat import check_engine, installed_here

    try:
        check_engine(dict(meta), installed_here() if host is None else host)
    except UserError as exc:
        return exc.message
    return None


BACKEND = Backend(
    name="trtllm",
    description="TensorRT-LLM 1.2.x engines (trtllm-build) and its Triton C++ backend (TP/PP, paged KV)",
    stages=(load.STAGE, quantize.STAGE, checkpoint.STAGE, engine.STAGE, repo.STAGE),
    memory_plan="paged",
    lock=EngineLock(
        pins=("format", "tensorrt_llm", "tensorrt", "gpu.compute_capability", "world_size", "files"),
        where="builder.trtllm.compat",
        check=check,
    ),
    gpu=True,
    safetensors_only=True,
    served_elsewhere=(
        "a trtllm recipe's engines run in TensorRT-LLM's own Triton backend inside NVIDIA's container: "
        "`trtspec deploy {recipe}` writes the repository and bundle/launch.sh, docker-run.sh and k8s.yaml for it"
    ),
)
