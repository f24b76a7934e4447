"""target.backend trtllm-llmapi: TensorRT-LLM's PyTorch / LLM-API flow — trtllm-serve and Triton's `llmapi` model.

Stages load → quantize (when the recipe quantizes: modelopt's unified FP8 HF checkpoint) → checkpoint (the served
model/ and draft/ folders, hard links; `builder.trtllm.llmapi.checkpoint`) → repo (the LLM-API options file and the
Triton `llmapi` repository; `builder.trtllm.llmapi.options`, `.repo`). No engine is built: TensorRT-LLM's PyTorch
flow loads the HF checkpoint itself, shards it over tp × pp and runs paged KV and in-flight batching. Memory: the
paged KV plan. Lock: none to check here — the served folders are plain checkpoints; the release is pinned by the
recipe (`trtllm.version`) and its container, which `trtspec deploy` writes into the bundle.
"""

# trtllm: the trtllm-llmapi backend declares its stages here (builder/stages/backends/trtllm_llmapi)

from __future__ import annotations

from typing import Any, Mapping

from builder.stages import load, quantize
from builder.stages.backends.trtllm_llmapi import checkpoint, repo
from builder.stages.stage import Backend, EngineLock


def check(meta: Mapping[str, Any], host: Any = None) -> str | None:
    """Why this host does not serve the folders (there is no engine: the release's container serves them)."""
    return (
        f"a trtllm-llmapi checkpoint is served by TensorRT-LLM {meta.get('tensorrt_llm', '?')}'s trtllm-serve or "
        "Triton llmapi model in its container (`trtspec deploy`), not by trtspec"
    )


BACKEND = Backend(
    name="trtllm-llmapi",
    description="TensorRT-LLM's PyTorch / LLM-API flow: FP8 HF checkpoint, trtllm-serve and Triton llmapi",
    stages=(load.STAGE, quantize.STAGE, checkpoint.STAGE, repo.STAGE),
    memory_plan="paged",
    lock=EngineLock(pins=("tensorrt_llm",), where="builder.trtllm.llmapi.checkpoint", check=check),
    gpu=True,
    safetensors_only=True,
    served_elsewhere=(
        "a trtllm-llmapi recipe runs in TensorRT-LLM's PyTorch flow inside NVIDIA's container: `trtspec deploy "
        "{recipe}` writes the checkpoint, the LLM-API options, the Triton llmapi repository and bundle/launch.sh "
        "(trtllm-serve), launch-triton.sh, docker-run.sh and k8s.yaml for it"
    ),
)
