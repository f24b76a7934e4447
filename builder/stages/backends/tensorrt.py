"""target.backend tensorrt: trtspec's own engines on one GPU — TensorRT ≥ 10.15 with the tree_verify plugin.

Stages load → quantize (when the recipe quantizes) → export (with the TensorRT-form graphs) → engine (TensorRT
engines, on a GPU host; elsewhere the build stops there, resumable) → repo (Triton, spec_decoder KIND_GPU on the
recipe's GPUs). Memory: per-slot contiguous KV, scratch per profile (`builder.plan.own_engines`). Lock: engine.json's
"tensorrt" section — TensorRT version, compute capability, tree_verify plugin code digest
(`builder.engines.tensorrt.lock`), checked with the format and versions before spec_decoder opens the folder.
"""

from __future__ import annotations

from typing import Any, Mapping

from builder.stages import export, load, quantize, repo, tensorrt_engine
from builder.stages.stage import Backend, EngineLock


def check(meta: Mapping[str, Any], host: Any = None) -> str | None:
    """None when GPU 0 of this host (or `host`, a `builder.engines.tensorrt.lock.Host`) may run the TensorRT folder
    engine.json (`meta`) describes, else why not."""
    from triton_repo.compat import check as check_versions

    return check_versions(dict(meta), 0, host)


BACKEND = Backend(
    name="tensorrt",
    description="TensorRT engines with the tree_verify plugin on one GPU (trtspec's own graphs)",
    stages=(load.STAGE, quantize.STAGE, export.STAGE, tensorrt_engine.STAGE, repo.STAGE),
    memory_plan="own_engines",
    lock=EngineLock(
        pins=("format", "versions.trtspec", "tensorrt.version", "tensorrt.compute_capability", "tensorrt.plugin"),
        where="builder.engines.tensorrt.lock",
        check=check,
    ),
    gpu=True,
)
