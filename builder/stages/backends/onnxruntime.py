"""target.backend onnxruntime: trtspec's own engines on the CPU — the rehearsal of the GPU graphs.

Stages load → quantize (when the recipe quantizes) → export → engine (ONNX Runtime sessions, the step curve timed)
→ repo (Triton, spec_decoder KIND_CPU). Memory: per-slot contiguous KV in the graphs' real dtypes
(`builder.plan.own_engines`). Lock: engine.json's format and the trtspec and ONNX Runtime versions that built it,
checked by spec_decoder before it opens the folder (`triton_repo.compat`: another ONNX Runtime may read the graphs
differently).
"""

from __future__ import annotations

from typing import Any, Mapping

from builder.stages import engine, export, load, quantize, repo
from builder.stages.stage import Backend, EngineLock


def check(meta: Mapping[str, Any], host: Any = None) -> str | None:
    """None when this server may run the ONNX Runtime folder engine.json (`meta`) describes, else why not."""
    from triton_repo.compat import check as check_versions

    return check_versions(dict(meta))


BACKEND = Backend(
    name="onnxruntime",
    description="ONNX Runtime sessions on the CPU (trtspec's own graphs; the GPU path's rehearsal)",
    stages=(load.STAGE, quantize.STAGE, export.STAGE, engine.STAGE, repo.STAGE),
    memory_plan="own_engines",
    lock=EngineLock(
        pins=("format", "versions.trtspec", "versions.onnxruntime"), where="triton_repo.compat", check=check
    ),
    gpu=False,
)
