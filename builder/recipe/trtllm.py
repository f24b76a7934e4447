"""The `trtllm` recipe section and TensorRT-LLM facts the recipe checks need (releases, modes, limits).

Used when `target.backend: trtllm`: trtspec writes a TensorRT-LLM checkpoint, the `trtllm-build`
command and an `inflight_batcher_llm` repository for NVIDIA's Triton TRT-LLM container. TensorRT-LLM
1.2.x is the last release line with that engine path (`trtllm-build`, `tensorrt_llm/runtime`, the C++
`inflight_batcher_llm` backend): NVIDIA/TensorRT-LLM removed it on main in mid-2026 (PRs #15763,
#15767, #15907, #15918, #16369; `docs/source/legacy/tensorrt-backend-removal.md`), so versions ≥ 1.3
are refused here. Sources for each fact are cited beside it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, field_validator

from builder.section import Section

DEFAULT_VERSION = "1.2.1"
FIRST_WITHOUT_ENGINE_PATH = (1, 3)


@dataclass(frozen=True)
class Release:
    """One TensorRT-LLM release and NVIDIA's Triton containers that ship it."""

    version: str
    containers: tuple[str, ...]  # <yy.mm> tags of nvcr.io/nvidia/tritonserver:<yy.mm>-trtllm-python-py3, oldest first
    tensorrt: str  # TensorRT inside those containers
    python: str  # the containers' Python (its site-packages hold tensorrt_llm)
    cuda: str

    @property
    def container(self) -> str:
        """The newest container shipping this release (the default image)."""
        return _NGC.format(self.containers[-1])


_NGC = "nvcr.io/nvidia/tritonserver:{}-trtllm-python-py3"
TABLE_SOURCE = (
    "triton-inference-server/server docs/introduction/compatibility.md @0f963c9a, table "
    "'trtllm-python-py3' (e.g. '| 26.07 | nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3 | "
    "Python 3.12.3 | … | 10.14.1.48 | 1.2.1 | 13.1.0.036 |'); cross-checked with tensorrtllm_backend "
    "dockerfile/Dockerfile.triton.trt_llm_backend @8addf2f (TENSORRTLLM_VER=1.2.1, TRT_VER=10.14.1.48)"
)

# TensorRT-LLM release -> the Triton containers that ship it (TABLE_SOURCE). Only the 1.2 line is listed:
# the checkpoint layout, trtllm-build flags and inflight_batcher_llm templates trtspec writes are those of
# 1.2.x, the last line with the engine path. Older lines (0.15 … 1.1.0 in 24.11 … 26.02) are refused.
RELEASES: dict[str, Release] = {
    r.version: r
    for r in (
        Release("1.2.0", ("26.03",), "10.14.1.48", "3.12.3", "13.1.0.036"),
        Release("1.2.1", ("26.04", "26.05", "26.06", "26.07"), "10.14.1.48", "3.12.3", "13.1.0.036"),
    )
}
OLDEST_LINE = (1, 2)


def parse_version(text: str) -> tuple[int, ...]:
    """ "1.2.1" -> (1, 2, 1); pre-release suffixes ("1.2.0rc8") keep their numeric prefix."""
    m = re.match(r"^(\d+)\.(\d+)(?:\.(\d+))?", text)
    if m is None:
        raise ValueError(f"not a version: {text!r}")
    return tuple(int(g) for g in m.groups() if g is not None)


class TrtllmSection(Section):
    """TensorRT-LLM engine-path settings (used when target.backend is trtllm)."""

    version: str = Field(
        DEFAULT_VERSION,
        max_length=32,
        description="TensorRT-LLM release the checkpoint, build command and repository target (a release in "
        "trtspec's table; 1.3 and later have no TensorRT engine path).",
    )
    container: str | None = Field(
        None,
        max_length=512,
        description="Container image to build and serve in; default: NVIDIA's Triton TRT-LLM container of `version`.",
    )
    workers: int | None = Field(
        None, gt=0, le=64, description="trtllm-build --workers (ranks built in parallel); default tp × pp."
    )
    use_paged_context_fmha: bool = Field(True, description="trtllm-build --use_paged_context_fmha enable.")
    use_fp8_context_fmha: bool | None = Field(
        None, description="trtllm-build --use_fp8_context_fmha; default on for FP8 recipes with an FP8 KV cache."
    )
    multiple_profiles: bool = Field(True, description="trtllm-build --multiple_profiles enable.")
    use_parallel_embedding: bool = Field(
        False, description="Split the embedding table over the tp ranks (checkpoint conversion flag)."
    )
    gemm_plugin: Literal["auto", "fp8", "bfloat16", "float16"] | None = Field(
        None, description="trtllm-build --gemm_plugin; default fp8 for FP8 recipes, else auto."
    )
    batch_scheduler_policy: Literal["guaranteed_no_evict", "max_utilization"] = Field(
        "guaranteed_no_evict", description="Triton tensorrt_llm model: batch_scheduler_policy."
    )
    enable_chunked_context: bool = Field(True, description="Triton tensorrt_llm model: enable_chunked_context.")
    enable_kv_cache_reuse: bool = Field(False, description="Triton tensorrt_llm model: enable_kv_cache_reuse.")
    max_tokens_in_paged_kv_cache: int | None = Field(
        None,
        gt=0,
        le=1 << 31,
        description="Triton tensorrt_llm model: cap on KV tokens per rank; default from kv_cache_free_gpu_mem_fraction.",
    )

    @field_validator("version")
    @classmethod
    def _version(cls, v: str) -> str:
        try:
            parsed = parse_version(v)
        except ValueError:
            raise ValueError(f"{v!r} is not a TensorRT-LLM version (allowed: {', '.join(RELEASES)})") from None
        if parsed[:2] >= FIRST_WITHOUT_ENGINE_PATH:
            raise ValueError(
                f"TensorRT-LLM {v} has no TensorRT engine path: trtllm-build and the Triton inflight_batcher_llm "
                f"backend were removed after 1.2.x (docs/source/legacy/tensorrt-backend-removal.md); Medusa, EAGLE "
                f"and Lookahead engines need 1.2.x (allowed: {', '.join(RELEASES)})"
            )
        if parsed[:2] < OLDEST_LINE:
            raise ValueError(
                f"TensorRT-LLM {v} predates the 1.2 line trtspec writes checkpoints, build commands and "
                f"repositories for (allowed: {', '.join(RELEASES)})"
            )
        if v not in RELEASES:
            raise ValueError(f"TensorRT-LLM {v} is not in trtspec's release table (allowed: {', '.join(RELEASES)})")
        return v

    @property
    def release(self) -> Release:
        return RELEASES[self.version]

    @property
    def image(self) -> str:
        return self.container or self.release.container
