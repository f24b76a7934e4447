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
"""

from __future__ import annotations

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
