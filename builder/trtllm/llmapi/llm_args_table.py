"""The option names of TensorRT-LLM's LLM API that the options file and model.yaml may use, as data with its source.

SOURCE: NVIDIA/TensorRT-LLM `tensorrt_llm/llmapi/llm_args.py` @ 470bb72055d5 (main, 2026-04: after PR #12062's
EAGLE-3 dynamic tree; the newest version of the file the code index serves whole). Every class below is a
pydantic `StrictBaseModel` (`extra="forbid"`): a key that is not a field (or an alias of one) is an error when
`LLM(**kwargs)` / trtllm-serve's `update_llm_args_with_extra_dict` reads the file, so every key trtspec writes is
checked against this table in tests/unit/test_llmapi_options.py.

How it was made: the fields per class (own ones; `_private`, `ClassVar` and `PrivateAttr` left out; inherited
ones follow from BASES) and the aliases (`validation_alias=AliasChoices(...)`, `alias=`) are what
devtools/llm_args_table.py extracts from that file. The repository snapshot cannot be fetched here (2.5 GB, over the
fetch limit), so the names were taken from the file as the index serves it, page by page, in that script's form;
re-run the script over a checkout of the same commit to regenerate and compare (docs/trtllm-llmapi.md).

SIGNATURES: the speculative classes of a pinned release whose own llm_args.py is not in the index, from its API
reference (the class signature lists every field): an emitted speculative key must be in both.

READINGS: every version of the file read here, each placed in the history by what it contains (the index serves
older versions by file id without naming their commit). No version of the release/1.2 branch is in the index:
RELEASE_READINGS brackets 1.2.1 between the last 1.2 pre-release line read (before the branch) and the main versions
read after it, so a key every bracketing version takes is taken by 1.2.1 unless the branch removed it — the
assumption, not a fact read from 1.2.1 (docs/trtllm-llmapi.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

SOURCE = "NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py @ 470bb72055d5d397c60be4dda1e8f490e7002440"

# class -> (bases inside the file, own fields)
OWN: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "BaseLlmArgs": (
        (),
        (
            "model",
            "tokenizer",
            "tokenizer_mode",
            "custom_tokenizer",
            "skip_tokenizer_init",
            "trust_remote_code",
            "tensor_parallel_size",
            "dtype",
            "revision",
            "tokenizer_revision",
            "model_kwargs",
            "pipeline_parallel_size",
            "context_parallel_size",
            "gpus_per_node",
            "moe_cluster_parallel_size",
            "moe_tensor_parallel_size",
            "moe_expert_parallel_size",
            "enable_attention_dp",
            "enable_lm_head_tp_in_adp",
            "pp_partition",
            "cp_config",
            "load_format",
            "enable_lora",
            "lora_config",
            "kv_cache_config",
            "enable_chunked_prefill",
            "guided_decoding_backend",
            "batched_logits_processor",
            "iter_stats_max_iterations",
            "request_stats_max_iterations",
            "peft_cache_config",
            "scheduler_config",
            "cache_transceiver_config",
            "sparse_attention_config",
            "speculative_config",
            "max_batch_size",
            "max_input_len",
            "max_seq_len",
            "max_beam_width",
            "max_num_tokens",
            "gather_generation_logits",
            "num_postprocess_workers",
            "postprocess_tokenizer_dir",
            "reasoning_parser",
            "decoding_config",
            "mpi_session",
            "otlp_traces_endpoint",
            "backend",
            "return_perf_metrics",
            "perf_metrics_max_requests",
            "enable_energy_metrics",
            "orchestrator_type",
            "env_overrides",
        ),
    ),
    "TorchLlmArgs": (
        ("BaseLlmArgs",),
        (
            "garbage_collection_gen0_threshold",
            "cuda_graph_config",
            "attention_dp_config",
            "disable_overlap_scheduler",
            "moe_config",
            "nvfp4_gemm_config",
            "dwdp_config",
            "attn_backend",
            "sampler_type",
            "sampler_force_async_worker",
            "enable_iter_perf_stats",
            "enable_iter_req_stats",
            "print_iter_log",
            "batch_wait_timeout_ms",
            "batch_wait_timeout_iters",
            "batch_wait_max_tokens_ratio",
            "torch_compile_config",
            "enable_autotuner",
            "enable_layerwise_nvtx_marker",
            "load_format",
            "enable_min_latency",
            "stream_interval",
            "force_dynamic_quantization",
            "allreduce_strategy",
            "checkpoint_loader",
            "checkpoint_format",
            "kv_connector_config",
            "mm_encoder_only",
            "ray_worker_extension_cls",
            "ray_placement_config",
            "ray_worker_nsight_options",
            "sleep_config",
            "use_cute_dsl_blockscaling_mm",
            "use_cute_dsl_blockscaling_bmm",
            "disable_flashinfer_sampling",
            "max_stats_len",
            "layer_wise_benchmarks_config",
            "video_pruning_rate",
            "backend",
        ),
    ),
    "KvCacheConfig": (
        (),
        (
            "enable_block_reuse",
            "max_tokens",
            "max_attention_window",
            "sink_token_length",
            "free_gpu_memory_fraction",
            "host_cache_size",
            "onboard_blocks",
            "cross_kv_cache_fraction",
            "secondary_offload_min_priority",
            "event_buffer_max_size",
            "attention_dp_events_gather_period_ms",
            "enable_partial_reuse",
            "copy_on_partial_reuse",
            "use_uvm",
            "max_gpu_total_bytes",
            "dtype",
            "mamba_ssm_cache_dtype",
            "mamba_ssm_stochastic_rounding",
            "mamba_ssm_philox_rounds",
            "tokens_per_block",
            "use_kv_cache_manager_v2",
            "max_util_for_resume",
        ),
    ),
    "CudaGraphConfig": ((), ("batch_sizes", "max_batch_size", "enable_padding")),
    "DecodingBaseConfig": (
        (),
        (
            "max_draft_len",
            "max_total_draft_tokens",
            "speculative_model",
            "max_concurrency",
            "draft_len_schedule",
            "load_format",
            "acceptance_window",
            "acceptance_length_threshold",
            "allow_advanced_sampling",
        ),
    ),
    "EagleDecodingConfig": (
        ("DecodingBaseConfig",),
        (
            "decoding_type",
            "eagle_choices",
            "greedy_sampling",
            "posterior_threshold",
            "use_dynamic_tree",
            "dynamic_tree_max_topK",
            "num_eagle_layers",
            "max_non_leaves_per_layer",
            "eagle3_one_model",
            "eagle3_layers_to_capture",
            "eagle3_model_arch",
        ),
    ),
    "Eagle3DecodingConfig": (("EagleDecodingConfig",), ("decoding_type", "max_batch_size", "sa_config")),
    "NGramDecodingConfig": (
        ("DecodingBaseConfig",),
        ("decoding_type", "max_matching_ngram_size", "is_keep_all", "is_use_oldest", "is_public_pool"),
    ),
    "DraftTargetDecodingConfig": (("DecodingBaseConfig",), ("decoding_type",)),
    "MedusaDecodingConfig": (("DecodingBaseConfig",), ("decoding_type", "medusa_choices", "num_medusa_heads")),
    "LookaheadDecodingConfig": (
        ("DecodingBaseConfig",),
        ("decoding_type", "max_window_size", "max_ngram_size", "max_verification_set_size"),
    ),
}
# (class, field) -> its other accepted names
ALIASES: dict[tuple[str, str], tuple[str, ...]] = {
    ("DecodingBaseConfig", "speculative_model"): ("speculative_model_dir",),
    ("BaseLlmArgs", "mpi_session"): ("_mpi_session",),
}
# the `decoding_type` literal of each speculative config (the discriminator of `SpeculativeConfig`)
DECODING_TYPES: dict[str, str] = {
    "Eagle": "EagleDecodingConfig",
    "Eagle3": "Eagle3DecodingConfig",
    "NGram": "NGramDecodingConfig",
    "Draft_Target": "DraftTargetDecodingConfig",
    "Medusa": "MedusaDecodingConfig",
    "Lookahead": "LookaheadDecodingConfig",
}
# `supports_backend(backend)` is False for "pytorch" (the PyTorch flow refuses them)
NOT_PYTORCH: frozenset[str] = frozenset({"MedusaDecodingConfig", "LookaheadDecodingConfig"})

SIGNATURE_SOURCE = "nvidia.github.io/TensorRT-LLM/1.4.0rc1/llm-api/reference/Eagle3DecodingConfig.html"
# release -> {class: fields of its documented signature}
SIGNATURES: dict[str, dict[str, frozenset[str]]] = {
    "1.4.0rc1": {
        "Eagle3DecodingConfig": frozenset(
            {
                "max_draft_len",
                "max_total_draft_tokens",
                "speculative_model",
                "moe_backend",
                "max_concurrency",
                "draft_len_schedule",
                "load_format",
                "acceptance_rate_window_size",
                "acceptance_rate_threshold",
                "use_rejection_sampling",
                "allow_advanced_sampling",
                "advanced_sampling_mode",
                "enable_penalty",
                "spec_dec_variant",
                "decoding_type",
                "use_dynamic_tree",
                "dynamic_tree_max_topK",
                "num_eagle_layers",
                "max_non_leaves_per_layer",
                "eagle3_layers_to_capture",
                "eagle3_model_arch",
                "sa_config",
            }
        )
    }
}


def fields(cls: str) -> frozenset[str]:
    """Every key `cls` accepts: its own fields, its bases' (within the file) and their aliases."""
    bases, own = OWN[cls]
    names = set(own)
    for base in bases:
        names |= fields(base)
    for (owner, name), aliases in ALIASES.items():
        if owner == cls or (owner in _ancestors(cls)):
            if name in names:
                names |= set(aliases)
    return frozenset(names)


def _ancestors(cls: str) -> set[str]:
    out: set[str] = set()
    for base in OWN[cls][0]:
        out |= {base, *_ancestors(base)}
    return out


def speculative_class(decoding_type: str) -> str:
    """The config class a `speculative_config.decoding_type` selects (KeyError: none)."""
    return DECODING_TYPES[decoding_type]


# --- other versions of llm_args.py, and which of them bound each release trtspec writes for -------------------------


@dataclass(frozen=True)
class Reading:
    """One version of llm_args.py as read here: for each class read, every key it takes (own, inherited, aliases)."""

    name: str
    source: str  # repository path @ commit, or the code index's file id where the index names no commit
    placed: str  # where it sits in the history, and the evidence
    keys: Mapping[str, frozenset[str]]  # class -> every key it takes; `decoding_type` is the dispatcher's, not here
    decoding_types: Mapping[str, str]  # speculative_config.decoding_type -> class (the classes in `keys`)
    whole: bool  # every class of the file was read: a class not in `keys` does not exist in this version
    lenient: frozenset[str] = field(default=frozenset())  # pydantic's default extra="ignore": unknown keys dropped


def _names(text: str) -> tuple[str, ...]:
    return tuple(text.split())


def _keys(*groups: tuple[str, ...] | frozenset[str]) -> frozenset[str]:
    return frozenset(k for g in groups for k in g)


READ_470 = Reading(
    "470bb720",
    SOURCE,
    "main, 2026-04 (after PR #12062's EAGLE-3 dynamic tree): after the release/1.2 branch point",
    {cls: fields(cls) for cls in OWN},
    DECODING_TYPES,
    whole=False,  # the classes trtspec writes keys to (OWN), not every class of the file
)

# code-index file id 1090804222: the 1.2.0rc1-rc2 line on main (2025-10/11), before the release/1.2 branch. Its
# imports are those of nvidia.github.io/TensorRT-LLM/1.2.0rc2.post2/_modules/tensorrt_llm/llmapi/llm_args.html (no
# AliasChoices, `tensorrt_llm.lora_helper`, `if TYPE_CHECKING: ... PyTorchConfig`); it has DeepSeekSparseAttentionConfig
# and the Ray orchestrator (1.2 release notes) but no Eagle3DecodingConfig, no draft_len_schedule ("dynamic draft
# length", 1.2 release notes) and `speculative_model_dir` as a field. decoding_type is a ClassVar: the key is popped by
# DecodingBaseConfig.from_dict, whose `config_classes` dict is the dispatch. Read whole (121,745 characters).
_RC2_BASE = _names(
    "model tokenizer tokenizer_mode skip_tokenizer_init trust_remote_code tensor_parallel_size dtype revision "
    "tokenizer_revision pipeline_parallel_size context_parallel_size gpus_per_node moe_cluster_parallel_size "
    "moe_tensor_parallel_size moe_expert_parallel_size enable_attention_dp enable_lm_head_tp_in_adp cp_config "
    "load_format fail_fast_on_attention_window_too_large enable_lora lora_config kv_cache_config "
    "enable_chunked_prefill guided_decoding_backend batched_logits_processor iter_stats_max_iterations "
    "request_stats_max_iterations peft_cache_config scheduler_config cache_transceiver_config sparse_attention_config "
    "speculative_config max_batch_size max_input_len max_seq_len max_beam_width max_num_tokens "
    "gather_generation_logits num_postprocess_workers postprocess_tokenizer_dir reasoning_parser decoding_config "
    "mpi_session _mpi_session backend return_perf_metrics orchestrator_type"
)
_RC2_TORCH = _names(
    "build_config garbage_collection_gen0_threshold cuda_graph_config attention_dp_config disable_overlap_scheduler "
    "moe_config attn_backend sampler_type enable_iter_perf_stats enable_iter_req_stats print_iter_log "
    "perf_metrics_max_requests batch_wait_timeout_ms batch_wait_timeout_iters batch_wait_max_tokens_ratio "
    "torch_compile_config enable_autotuner enable_layerwise_nvtx_marker load_format enable_min_latency "
    "stream_interval force_dynamic_quantization allreduce_strategy checkpoint_loader checkpoint_format "
    "kv_connector_config mm_encoder_only ray_worker_extension_cls"
)
_RC2_KV = _names(
    "enable_block_reuse max_tokens max_attention_window sink_token_length free_gpu_memory_fraction host_cache_size "
    "onboard_blocks cross_kv_cache_fraction secondary_offload_min_priority event_buffer_max_size "
    "attention_dp_events_gather_period_ms enable_partial_reuse copy_on_partial_reuse use_uvm max_gpu_total_bytes "
    "dtype mamba_ssm_cache_dtype tokens_per_block"
)
_RC2_DECODING = _names(
    "max_draft_len max_total_draft_tokens speculative_model_dir max_concurrency load_format acceptance_window "
    "acceptance_length_threshold"
)
_RC2_EAGLE = _names(
    "eagle_choices greedy_sampling posterior_threshold use_dynamic_tree dynamic_tree_max_topK num_eagle_layers "
    "max_non_leaves_per_layer eagle3_one_model eagle3_layers_to_capture"
)
READ_RC2 = Reading(
    "1090804222",
    "NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py, code-index file id 1090804222 (no commit named)",
    "the 1.2.0rc1-rc2 line on main (2025-10/11), before the release/1.2 branch",
    {
        "BaseLlmArgs": _keys(_RC2_BASE),
        "TorchLlmArgs": _keys(_RC2_BASE, _RC2_TORCH),
        "KvCacheConfig": _keys(_RC2_KV),
        "CudaGraphConfig": _keys(("batch_sizes", "max_batch_size", "enable_padding")),
        "DecodingBaseConfig": _keys(_RC2_DECODING),
        "EagleDecodingConfig": _keys(_RC2_DECODING, _RC2_EAGLE),
        "NGramDecodingConfig": _keys(
            _RC2_DECODING, _names("max_matching_ngram_size is_keep_all is_use_oldest is_public_pool")
        ),
        "DraftTargetDecodingConfig": _keys(_RC2_DECODING),
        "MedusaDecodingConfig": _keys(_RC2_DECODING, ("medusa_choices", "num_medusa_heads")),
        "LookaheadDecodingConfig": _keys(
            _RC2_DECODING, ("max_window_size", "max_ngram_size", "max_verification_set_size")
        ),
    },
    {  # DecodingBaseConfig.from_dict's config_classes (MTP, SaveState, UserProvided, AUTO: classes not recorded)
        "Eagle": "EagleDecodingConfig",
        "NGram": "NGramDecodingConfig",
        "DraftTarget": "DraftTargetDecodingConfig",
        "Medusa": "MedusaDecodingConfig",
        "Lookahead": "LookaheadDecodingConfig",
    },
    whole=True,
)

# code-index file id 7019226376: main between the 1.2.0rc2 line and 1.3.0rc7. It imports AliasChoices, ConfigDict
# and NonNegativeInt (absent from 1.2.0rc2.post2's _modules page) but not `_str_to_torch_dtype_dict` (present in
# nvidia.github.io/TensorRT-LLM/1.3.0rc7/_modules/.../llm_args.html); it has what the 1.2 release notes list
# (eagle3_model_arch "mistral_large3", draft_len_schedule) and the newer API: decoding_type a Literal field,
# Eagle3DecodingConfig (decoding_type "Eagle3", no field of its own), `speculative_model` with the alias
# `speculative_model_dir`, allow_advanced_sampling; no dynamic-tree bound yet (EagleDecodingConfig.validate_eagle_config
# only asks for dynamic_tree_max_topK and max_total_draft_tokens > 0). Read up to character 48,000 of 139,423: the
# speculative classes and CudaGraphConfig, not BaseLlmArgs / TorchLlmArgs / KvCacheConfig.
_E13_DECODING = _names(
    "max_draft_len max_total_draft_tokens speculative_model speculative_model_dir max_concurrency draft_len_schedule "
    "load_format acceptance_window acceptance_length_threshold allow_advanced_sampling decoding_type"
)
_E13_EAGLE = (*_RC2_EAGLE, "eagle3_model_arch")
READ_E13 = Reading(
    "7019226376",
    "NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py, code-index file id 7019226376 (no commit named)",
    "main after the 1.2.0rc2 line, before 1.3.0rc7: on either side of the release/1.2 branch point",
    {
        "CudaGraphConfig": _keys(("batch_sizes", "max_batch_size", "enable_padding")),
        "DecodingBaseConfig": _keys(_E13_DECODING),
        "EagleDecodingConfig": _keys(_E13_DECODING, _E13_EAGLE),
        "Eagle3DecodingConfig": _keys(_E13_DECODING, _E13_EAGLE),
        "NGramDecodingConfig": _keys(
            _E13_DECODING, _names("max_matching_ngram_size is_keep_all is_use_oldest is_public_pool")
        ),
        "DraftTargetDecodingConfig": _keys(_E13_DECODING),
        "MedusaDecodingConfig": _keys(_E13_DECODING, ("medusa_choices", "num_medusa_heads")),
    },
    {  # the decoding_type Literal of each class read
        "Eagle": "EagleDecodingConfig",
        "Eagle3": "Eagle3DecodingConfig",
        "NGram": "NGramDecodingConfig",
        "Draft_Target": "DraftTargetDecodingConfig",
        "Medusa": "MedusaDecodingConfig",
    },
    whole=False,
)

# fcd3f316: the only commit the index names for this path, and the oldest version read — the 0.21 line (2025-05/06),
# not a newer main. Its imports are those of nvidia.github.io/TensorRT-LLM/0.21.0rc0 (and 0.21.0rc2)/_modules/.../
# llm_args.html (`tensorrt_llm.lora_manager`, `..auto_parallel`, pydantic's Field imported directly); BaseLlmArgs
# forbids unknown keys but DecodingBaseConfig and KvCacheConfig are plain BaseModels (unknown keys silently dropped);
# the PyTorch flow took its draft from `pytorch_weights_path`, the KV cache dtype from the top-level `kv_cache_dtype`,
# CUDA graphs from `use_cuda_graph` / `cuda_graph_*`, and NGram's draft length from `prompt_lookup_num_tokens`.
_F_BASE = _names(
    "model tokenizer tokenizer_mode skip_tokenizer_init trust_remote_code tensor_parallel_size dtype revision "
    "tokenizer_revision pipeline_parallel_size context_parallel_size gpus_per_node moe_cluster_parallel_size "
    "moe_tensor_parallel_size moe_expert_parallel_size enable_attention_dp cp_config load_format enable_lora "
    "max_lora_rank max_loras max_cpu_loras lora_config enable_prompt_adapter max_prompt_adapter_token quant_config "
    "kv_cache_config enable_chunked_prefill guided_decoding_backend batched_logits_processor "
    "iter_stats_max_iterations request_stats_max_iterations peft_cache_config scheduler_config "
    "cache_transceiver_config speculative_config batching_type normalize_log_probs max_batch_size max_input_len "
    "max_seq_len max_beam_width max_num_tokens gather_generation_logits num_postprocess_workers "
    "postprocess_tokenizer_dir reasoning_parser garbage_collection_gen0_threshold decoding_config mpi_session "
    "_mpi_session backend"
)
_F_TORCH = _names(
    "build_config use_cuda_graph cuda_graph_batch_sizes cuda_graph_max_batch_size cuda_graph_padding_enabled "
    "disable_overlap_scheduler moe_max_num_tokens moe_load_balancer attn_backend moe_backend mixed_sampler "
    "enable_trtllm_sampler kv_cache_dtype enable_iter_perf_stats enable_iter_req_stats print_iter_log "
    "torch_compile_config autotuner_enabled enable_layerwise_nvtx_marker load_format enable_min_latency "
    "stream_interval"
)
_F_DECODING = ("max_draft_len", "speculative_model")
READ_F = Reading(
    "fcd3f316",
    "NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py @ fcd3f31682808ae56118ae43c1d7864a3a945e6f",
    "the 0.21 line (2025-05/06): older than every other version read; no release trtspec writes for",
    {
        "BaseLlmArgs": _keys(_F_BASE),
        "TorchLlmArgs": _keys(_F_BASE, _F_TORCH),
        "KvCacheConfig": _keys(
            _names(
                "enable_block_reuse max_tokens max_attention_window sink_token_length free_gpu_memory_fraction "
                "host_cache_size onboard_blocks cross_kv_cache_fraction secondary_offload_min_priority "
                "event_buffer_max_size enable_partial_reuse copy_on_partial_reuse"
            )
        ),
        "DecodingBaseConfig": _keys(_F_DECODING),
        "EagleDecodingConfig": _keys(
            _F_DECODING,
            _names(
                "eagle_choices greedy_sampling posterior_threshold use_dynamic_tree dynamic_tree_max_topK "
                "num_eagle_layers max_non_leaves_per_layer pytorch_weights_path eagle3_one_model"
            ),
        ),
        "NGramDecodingConfig": _keys(
            _F_DECODING,
            _names("prompt_lookup_num_tokens max_matching_ngram_size is_keep_all is_use_oldest is_public_pool"),
        ),
        "DraftTargetDecodingConfig": _keys(_F_DECODING, ("pytorch_weights_path",)),
        "MedusaDecodingConfig": _keys(_F_DECODING, ("medusa_choices", "num_medusa_heads")),
        "LookaheadDecodingConfig": _keys(
            _F_DECODING, ("max_window_size", "max_ngram_size", "max_verification_set_size")
        ),
    },
    {  # DecodingBaseConfig.from_dict's config_classes (MTP: class not recorded)
        "Eagle": "EagleDecodingConfig",
        "NGram": "NGramDecodingConfig",
        "DraftTarget": "DraftTargetDecodingConfig",
        "Medusa": "MedusaDecodingConfig",
        "Lookahead": "LookaheadDecodingConfig",
    },
    whole=True,
    lenient=frozenset(
        {
            "KvCacheConfig",
            "DecodingBaseConfig",
            "EagleDecodingConfig",
            "NGramDecodingConfig",
            "DraftTargetDecodingConfig",
            "MedusaDecodingConfig",
            "LookaheadDecodingConfig",
        }
    ),
)

READINGS: dict[str, Reading] = {r.name: r for r in (READ_470, READ_E13, READ_RC2, READ_F)}

# release -> the readings that bound it; every key written for the release must be taken by each of them.
# 1.2.1 is the release/1.2.1 branch (triton-inference-server/tensorrtllm_backend dockerfile/
# Dockerfile.triton.trt_llm_backend @ 8addf2f, 2026-04-21: TENSORRTLLM_REPO_TAG=release/1.2.1; release/1.2 existed by
# 2026-03-17, @ 9e828d3: "release/1.2@36e34eeff", 1.2.0rc8). READ_RC2 is before the branch, READ_470 after it,
# READ_E13 on either side. Between
# them the speculative API changed (decoding_type ClassVar -> Literal, Eagle3DecodingConfig added, speculative_model_dir
# -> speculative_model with the old name as an alias), so only names that survive the change are written for 1.2.1:
# decoding_type "Eagle" (EAGLE-3 on the PyTorch backend in all three: spec_dec_mode EAGLE3_ONE_MODEL when
# eagle3_one_model, default true) and `speculative_model_dir`.
# 1.4.0rc1: READ_470 (main of the same months) and the release's API reference signature (SIGNATURES).
RELEASE_READINGS: dict[str, tuple[str, ...]] = {
    "1.2.1": ("1090804222", "7019226376", "470bb720"),
    "1.4.0rc1": ("470bb720",),
}
NESTED = {"kv_cache_config": "KvCacheConfig", "cuda_graph_config": "CudaGraphConfig"}  # option -> its class


def refusals(options: Mapping[str, Any], reading: Reading) -> list[str]:
    """What `reading`'s version does with the keys of an `LLM(**kwargs)` dict that it does not take: one line per key
    ("refused": a StrictBaseModel raises; "dropped": a lenient class ignores it). [] when it takes every key."""
    out: list[str] = []

    def check(cls: str, key: str) -> None:
        if cls not in reading.keys:
            if reading.whole:
                out.append(f"{cls}: no such class in {reading.name} (for {key})")
            return
        if key not in reading.keys[cls]:
            how = "dropped" if cls in reading.lenient else "refused"
            out.append(f"{cls}.{key}: {how} by {reading.name}")

    for key, value in options.items():
        check("TorchLlmArgs", key)
        if key in NESTED and isinstance(value, Mapping):
            for k in value:
                check(NESTED[key], k)
        elif key == "speculative_config" and isinstance(value, Mapping):
            cls = reading.decoding_types.get(value.get("decoding_type"))
            if cls is None:
                out.append(
                    f"speculative_config.decoding_type {value.get('decoding_type')!r}: refused by {reading.name}"
                )
                continue
            for k in value:
                if k != "decoding_type":
                    check(cls, k)
    return out
