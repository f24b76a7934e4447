"""The `trtllm` recipe section and TensorRT-LLM facts the recipe checks need (releases, modes, limits).

Used when `target.backend: trtllm`: trtspec writes a TensorRT-LLM checkpoint, the `trtllm-build`
command and an `inflight_batcher_llm` repository for NVIDIA's Triton TRT-LLM container. TensorRT-LLM
1.2.x is the last release line with that engine path (`trtllm-build`, `tensorrt_llm/runtime`, the C++
`inflight_batcher_llm` backend): NVIDIA/TensorRT-LLM removed it on main in mid-2026 (PRs #15763,
#15767, #15907, #15918, #16369; `docs/source/legacy/tensorrt-backend-removal.md`), so versions ≥ 1.3
are refused for it. Sources for each fact are cited beside it.

`target.backend: trtllm-llmapi` is TensorRT-LLM's PyTorch / LLM-API flow (trtllm-serve, Triton `llmapi`), the line
that goes on after 1.2: `LLMAPI_RELEASES` are the releases trtspec writes its options file and repository for. The
backend, not the version, picks the flow: 1.2.1 has both (its PyTorch flow drafts EAGLE-3 as a chain only).
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


@dataclass(frozen=True)
class LlmapiRelease:
    """One TensorRT-LLM release as the PyTorch / LLM-API flow serves it (`target.backend: trtllm-llmapi`)."""

    version: str
    status: Literal["release", "pre-release"]
    image: str  # the container holding this release's trtllm-serve (and tritonserver + /app/all_models when `triton`)
    triton: bool  # NVIDIA's Triton TRT-LLM image of this release: tritonserver and the llmapi model inside
    eagle3_tree: Literal["chain", "dynamic"]  # what its one-model EAGLE-3 drafts
    eagle3_decoding_type: str  # speculative_config.decoding_type that selects EAGLE-3 on its PyTorch backend
    draft_key: str  # the speculative_config key naming the draft folder
    rejection: bool  # its one-model EAGLE-3 verifies sampled requests by rejection sampling (else greedily only)
    source: str  # where these facts come from


LLMAPI_SOURCE = (
    "PyPI tensorrt-llm release list (1.2.1 is the newest release, 2026-04; 1.3.0rc0-rc29, 1.4.0rc0-rc1 are "
    "pre-releases); NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py @ 470bb72055d5 (main, 2026-04, the newest "
    "version the code index serves whole; `builder.trtllm.llmapi.llm_args_table`), docs "
    "nvidia.github.io/TensorRT-LLM/1.4.0rc1/llm-api/reference/Eagle3DecodingConfig.html (the 1.4.0rc1 signature), "
    "tensorrt_llm/_torch/speculative/eagle3.py @ 001e67005b4f ('currently Eagle3 only supports linear tree', 1.2); "
    "for 1.2.1's option names, the llm_args.py versions that bracket the release/1.2 branch "
    "(`builder.trtllm.llmapi.llm_args_table.RELEASE_READINGS`: the 1.2.0rc2-era file, code-index id 1090804222, "
    "and two later main versions)"
)

# The 1.2.1 tag's own llm_args.py is on release/1.2.1, which the code index does not hold: its entry keeps to the
# names every version bracketing the branch takes (llm_args_table.RELEASE_READINGS) — decoding_type Eagle (read as
# EAGLE-3 one-model on the PyTorch backend; "Eagle3" is no decoding type of the 1.2.0rc2-era file), the draft as
# speculative_model_dir (that file's field; an alias of speculative_model in the later ones; also modelopt's
# examples/speculative_decoding/README.md @ a2fbac7b L157-182) — and a chain (EAGLE-3 one-model drafts a linear tree
# in 1.2, eagle3.py @ 001e67005b4f; dynamic trees landed on main in 2026-04, PR #12062). 1.4.0rc1: the dynamic tree
# (use_dynamic_tree, dynamic_tree_max_topK, max_total_draft_tokens), decoding_type Eagle3, speculative_model and
# rejection sampling of sampled requests (allow_advanced_sampling), per its API reference signature.
LLMAPI_RELEASES: dict[str, LlmapiRelease] = {
    r.version: r
    for r in (
        LlmapiRelease(
            "1.2.1",
            "release",
            _NGC.format("26.07"),
            True,
            "chain",
            "Eagle",
            "speculative_model_dir",
            False,
            LLMAPI_SOURCE,
        ),
        LlmapiRelease(
            "1.4.0rc1",
            "pre-release",
            "nvcr.io/nvidia/tensorrt-llm/release:1.4.0rc1",
            False,
            "dynamic",
            "Eagle3",
            "speculative_model",
            True,
            LLMAPI_SOURCE,
        ),
    )
}
LLMAPI_DEFAULT = "1.2.1"  # the newest release (not pre-release): also `version`'s default, one for both backends


def engine_line_problem(v: str) -> str | None:
    """None when `v` is a release of TensorRT-LLM's engine flow (`target.backend: trtllm`), else why not."""
    parsed = parse_version(v)
    if parsed[:2] >= FIRST_WITHOUT_ENGINE_PATH:
        return (
            f"TensorRT-LLM {v} has no TensorRT engine path: trtllm-build and the Triton inflight_batcher_llm "
            f"backend were removed after 1.2.x (docs/source/legacy/tensorrt-backend-removal.md); Medusa, EAGLE "
            f"and Lookahead engines need 1.2.x, its PyTorch flow is target.backend: trtllm-llmapi "
            f"(allowed: {', '.join(RELEASES)})"
        )
    if parsed[:2] < OLDEST_LINE:
        return (
            f"TensorRT-LLM {v} predates the 1.2 line trtspec writes checkpoints, build commands and "
            f"repositories for (allowed: {', '.join(RELEASES)})"
        )
    if v not in RELEASES:
        return f"TensorRT-LLM {v} is not in trtspec's release table (allowed: {', '.join(RELEASES)})"
    return None


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
        "trtspec's table; 1.3 and later have no TensorRT engine path). target.backend trtllm-llmapi: a release of "
        "the PyTorch / LLM-API flow's table (1.2.1: EAGLE-3 chains; 1.4.0rc1: dynamic trees).",
    )
    container: str | None = Field(
        None,
        max_length=512,
        description="Container image to build and serve in; default: NVIDIA's Triton TRT-LLM container of `version` "
        "(trtllm-llmapi: the release's container).",
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
        """A release of either flow's table; which flow may use it is a cross-field rule (`trtllm_checks`)."""
        try:
            parse_version(v)
        except ValueError:
            known = ", ".join(sorted({*RELEASES, *LLMAPI_RELEASES}))
            raise ValueError(f"{v!r} is not a TensorRT-LLM version (allowed: {known})") from None
        if v in LLMAPI_RELEASES:
            return v
        problem = engine_line_problem(v)
        if problem is not None:
            raise ValueError(f"{problem}; target.backend trtllm-llmapi takes {', '.join(LLMAPI_RELEASES)}")
        return v

    @property
    def release(self) -> Release:
        """The engine flow's release (`target.backend: trtllm`; validate refused any other version there)."""
        return RELEASES[self.version]

    @property
    def image(self) -> str:
        return self.container or self.release.container

    @property
    def llmapi(self) -> LlmapiRelease:
        """The PyTorch flow's release (`target.backend: trtllm-llmapi`; validate refused any other version)."""
        return LLMAPI_RELEASES[self.version]

    @property
    def llmapi_image(self) -> str:
        return self.container or self.llmapi.image
