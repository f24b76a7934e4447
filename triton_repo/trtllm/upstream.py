"""Upstream's `inflight_batcher_llm` interface for TensorRT-LLM 1.2.x, recorded as data (names, not code).

Source: NVIDIA/TensorRT-LLM `triton_backend/all_models/inflight_batcher_llm/<model>/config.pbtxt` (the
`${...}` templates upstream fills with tools/fill_template.py) and the C++ backend that reads the
`tensorrt_llm` parameters, `triton_backend/inflight_batcher_llm/src/model_instance_state.cc` and
`model_state.cc`. Read through the code index; the commit of each file read is in `SOURCES`.

Which version: tensorrtllm_backend (git mirror, commit e1611ce8 "ci: Update tensorrt_llm (#857)",
2026-06-02) pins `TENSORRTLLM_REPO_TAG=release/1.2.1`, TRT 10.14.1.48, tritonserver 25.12 and the
submodule triton-inference-server/TensorRT-LLM@ca88df0a400515b8206a19eb30cd047eb7661035. That fork
commit is not in the index. The closest stored version: `tensorrt_llm/config.pbtxt` and
`model_instance_state.cc` at 0c8de69a, where `tensorrt_llm/version.py` reads "1.2.0rc8" (the release
1.2.1 follows; tensorrtllm_backend PR #853 moved the pin from 1.2.0rc8 to 1.2.1 changing only the
Dockerfile and the submodule). The other templates are the newest stored versions (their commits
below); an older stored tensorrt_llm template (2a9abd95) still had `enable_trt_overlap` commented out.

Table rows: `name DTYPE dims flags`, flags: o = optional, r = allow_ragged_batch, s = reshape {shape: []}.
A DTYPE `@key` is a template placeholder filled from settings (`render.DTYPE_PLACEHOLDERS`).
"""

from __future__ import annotations

from dataclasses import dataclass

UPSTREAM_REPO = "NVIDIA/TensorRT-LLM"
PINNED = "TensorRT-LLM 1.2.1 (release/1.2.1; tensorrtllm_backend@e1611ce8 -> fork commit ca88df0a, not indexed)"
_T = "triton_backend/all_models/inflight_batcher_llm"
SOURCES = {  # path -> commit read
    f"{_T}/tensorrt_llm/config.pbtxt": "0c8de69a1ca6213eebb20a51873890ff128666c2",  # version.py: 1.2.0rc8
    f"{_T}/preprocessing/config.pbtxt": "08dc37e368e4718ae680bdb9be8da24ebd420a53",
    f"{_T}/postprocessing/config.pbtxt": "89fd9b74ab7ae753b4c6b3db25a400dca7ea54a0",
    f"{_T}/ensemble/config.pbtxt": "2a9abd9536aa62ad3e4b9314be9286b1b1be523b",
    f"{_T}/tensorrt_llm_bls/config.pbtxt": "0193dbd4189221d0fd5e9f20cdb384d3da8dbc24",
    f"{_T}/preprocessing/1/model.py": "01259b1557671a5742aa61fa993d342b9c90dbba",
    f"{_T}/postprocessing/1/model.py": "2e2327b93c0a9aa9abbf4c4672f734b03c1e441f",
    f"{_T}/tensorrt_llm_bls/1/model.py": "0ef1f21efb820cd4d7bb6af1a45dc9fe6f748622",
    "triton_backend/inflight_batcher_llm/src/model_instance_state.cc": "0c8de69a1ca6213eebb20a51873890ff128666c2",
    "triton_backend/inflight_batcher_llm/src/model_state.cc": "5cdd69218f8815d6c8c101ca1facf2ec4ac4b622",
    "triton_backend/inflight_batcher_llm/src/utils.cc": "192908136e53ddfc2f282e81e6ecdb76af06eb50",
}

PREPROCESSING, TENSORRT_LLM, POSTPROCESSING, ENSEMBLE, BLS = (
    "preprocessing",
    "tensorrt_llm",
    "postprocessing",
    "ensemble",
    "tensorrt_llm_bls",
)
COMPOSING_MODELS = (PREPROCESSING, TENSORRT_LLM, POSTPROCESSING, BLS)  # the ensemble's name is ours to choose
PYTHON_MODELS = (PREPROCESSING, POSTPROCESSING, BLS)

# -- legal values (model_instance_state.cc @ 0c8de69a) ------------------------------------------------
BATCHING_STRATEGIES = ("inflight_fused_batching", "inflight_batching", "V1", "v1")  # getBatchingTypeFromParams
SCHEDULER_POLICIES = ("guaranteed_no_evict", "max_utilization")  # getSchedulerConfigFromParams
# the `tensorrt_llm` model's decoding_mode (getExecutorConfigFromParams -> executor::DecodingMode): TensorRT-LLM's
# names, not trtspec's method names (a method's `EngineFlow.decoding_mode` picks one; the served repository has no
# method registry to ask)
TOP_K_TOP_P_MODE, BEAM_SEARCH_MODE = "top_k_top_p", "beam_search"
MEDUSA_MODE, LOOKAHEAD_MODE, EAGLE_MODE = "medusa", "lookahead", "eagle"
DECODING_MODES = (
    "top_k",
    "top_p",
    TOP_K_TOP_P_MODE,
    BEAM_SEARCH_MODE,
    MEDUSA_MODE,
    "redrafter",
    LOOKAHEAD_MODE,
    EAGLE_MODE,
)
LOGITS_DATATYPES = ("TYPE_FP32", "TYPE_FP16", "TYPE_BF16")  # docs/model_config.md: the engine's logits dtype
LOOKAHEAD_RULE = "N >= 1, W >= 1, G >= 0; N == 1 needs W == 1 and G == 0 (LookaheadDecodingConfig::isLegal)"


def lookahead_is_legal(w: int, n: int, g: int) -> bool:
    """cpp/tensorrt_llm/executor/decodingConfig.cpp, LookaheadDecodingConfig::isLegal, as a rule."""
    return n >= 1 and w >= 1 and g >= 0 and (n != 1 or (w == 1 and g == 0))


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str  # "INT32" … or "@placeholder"
    dims: tuple[int, ...]
    optional: bool = False
    ragged: bool = False
    reshape: bool = False  # reshape: { shape: [ ] }


def _table(text: str) -> tuple[Tensor, ...]:
    out = []
    for line in filter(str.strip, text.splitlines()):
        name, dtype, dims, *flags = line.split()
        out.append(
            Tensor(
                name,
                dtype,
                tuple(int(d) for d in dims.strip("[]").split(",")),
                "o" in flags,
                "r" in flags,
                "s" in flags,
            )
        )
    return tuple(out)


TENSORRT_LLM_INPUTS = _table("""
input_ids INT32 [-1] r o
encoder_input_features @encoder_input_features_data_type [-1,-1] r o
encoder_output_lengths INT32 [1] s o
input_lengths INT32 [1] s
request_output_len INT32 [1] s
num_return_sequences INT32 [1] s o
draft_input_ids INT32 [-1] o r
decoder_input_ids INT32 [-1] o r
decoder_input_lengths INT32 [1] o s
draft_logits @logits_datatype [-1,-1] o r
draft_acceptance_threshold FP32 [1] s o
end_id INT32 [1] s o
pad_id INT32 [1] s o
stop_words_list INT32 [2,-1] o r
bad_words_list INT32 [2,-1] o r
embedding_bias FP32 [-1] o r
beam_width INT32 [1] s o
temperature FP32 [1] s o
runtime_top_k INT32 [1] s o
runtime_top_p FP32 [1] s o
runtime_top_p_min FP32 [1] s o
runtime_top_p_decay FP32 [1] s o
runtime_top_p_reset_ids INT32 [1] s o
len_penalty FP32 [1] s o
early_stopping BOOL [1] s o
repetition_penalty FP32 [1] s o
min_tokens INT32 [1] s o
beam_search_diversity_rate FP32 [1] s o
presence_penalty FP32 [1] s o
frequency_penalty FP32 [1] s o
seed UINT64 [1] s o
return_log_probs BOOL [1] s o
return_context_logits BOOL [1] s o
return_generation_logits BOOL [1] s o
return_perf_metrics BOOL [1] s o
return_num_input_tokens BOOL [1] s o
return_num_output_tokens BOOL [1] s o
exclude_input_in_output BOOL [1] s o
stop BOOL [1] s o
streaming BOOL [1] s o
prompt_embedding_table @prompt_embedding_table_data_type [-1,-1] o r
prompt_table_extra_ids UINT64 [-1] o r
prompt_vocab_size INT32 [1] s o
cross_attention_mask BOOL [-1,-1] o r
mrope_rotary_cos_sin FP32 [-1] o
mrope_position_deltas INT64 [1] o
lora_task_id UINT64 [1] s o
lora_weights FP16 [-1,-1] o r
lora_config INT32 [-1,3] o r
context_phase_params UINT8 [-1] o r
skip_cross_attn_blocks BOOL [1] o r
retention_token_range_starts INT32 [-1] o r
retention_token_range_ends INT32 [-1] o r
retention_token_range_priorities INT32 [-1] o r
retention_token_range_durations_ms INT32 [-1] o r
retention_decode_priority INT32 [1] o r
retention_decode_duration_ms INT32 [1] o r
guided_decoding_guide_type STRING [1] o r
guided_decoding_guide STRING [1] o r
lookahead_window_size INT32 [1] o r
lookahead_ngram_size INT32 [1] o r
lookahead_verification_set_size INT32 [1] o r
""")

_STATS = """
batch_index INT32 [1]
sequence_index INT32 [1]
"""
_KV_AND_TIMES = """
kv_cache_alloc_new_blocks INT32 [1]
kv_cache_reused_blocks INT32 [1]
kv_cache_alloc_total_blocks INT32 [1]
arrival_time_ns INT64 [1]
first_scheduled_time_ns INT64 [1]
first_token_time_ns INT64 [1]
last_token_time_ns INT64 [1]
acceptance_rate FP32 [1]
total_accepted_draft_tokens INT32 [1]
total_draft_tokens INT32 [1]
num_input_tokens INT32 [1]
num_output_tokens INT32 [1]
"""
_LOGPROBS_LOGITS = """
cum_log_probs FP32 [-1]
output_log_probs FP32 [-1,-1]
context_logits @logits_datatype [-1,-1]
generation_logits @logits_datatype [-1,-1,-1]
"""
TENSORRT_LLM_OUTPUTS = _table(
    "output_ids INT32 [-1,-1]\nsequence_length INT32 [-1]"
    + _LOGPROBS_LOGITS
    + _STATS
    + "context_phase_params UINT8 [-1]"
    + _KV_AND_TIMES
)

PREPROCESSING_INPUTS = _table("""
QUERY STRING [1]
DECODER_QUERY STRING [1] o
IMAGE_BYTES UINT8 [-1,-1,-1,-1] o
IMAGE_URL STRING [1] o
IMAGES STRING [-1] o
VIDEO_BYTES UINT8 [-1,-1,-1,-1] o
REQUEST_OUTPUT_LEN INT32 [1]
BAD_WORDS_DICT STRING [-1] o
STOP_WORDS_DICT STRING [-1] o
EMBEDDING_BIAS_WORDS STRING [-1] o
EMBEDDING_BIAS_WEIGHTS FP32 [-1] o
END_ID INT32 [1] o
PAD_ID INT32 [1] o
PROMPT_TABLE_EXTRA_ID UINT64 [1] o
""")
PREPROCESSING_OUTPUTS = _table("""
INPUT_ID INT32 [-1]
REQUEST_INPUT_LEN INT32 [1]
DECODER_INPUT_ID INT32 [-1]
REQUEST_DECODER_INPUT_LEN INT32 [1]
BAD_WORDS_IDS INT32 [2,-1]
STOP_WORDS_IDS INT32 [2,-1]
EMBEDDING_BIAS FP32 [-1]
REQUEST_OUTPUT_LEN INT32 [-1]
OUT_END_ID INT32 [1]
OUT_PAD_ID INT32 [1]
OUT_PROMPT_TABLE_EXTRA_IDS UINT64 [-1]
PIXEL_VALUES FP16 [-1,-1,-1,-1]
ASPECT_RATIO_IDS INT64 [-1]
ASPECT_RATIO_MASK INT64 [-1,-1]
CROSS_ATTENTION_MASK INT64 [-1,-1,-1]
IMAGE_SIZES INT64 [-1,2]
IS_VIDEO_INPUT BOOL [1]
ATTENTION_MASK INT64 [-1]
IMAGE_GRID_THW INT64 [3]
VISION_INPUT_ID INT32 [-1]
""")

POSTPROCESSING_INPUTS = _table("TOKENS_BATCH INT32 [-1,-1]\nSEQUENCE_LENGTH INT32 [-1]")
POSTPROCESSING_OUTPUTS = _table("OUTPUT STRING [-1]")

_CLIENT_SAMPLING = """
end_id INT32 [1] o
pad_id INT32 [1] o
top_k INT32 [1] o
top_p FP32 [1] o
temperature FP32 [1] o
length_penalty FP32 [1] o
repetition_penalty FP32 [1] o
min_tokens INT32 [1] o
presence_penalty FP32 [1] o
frequency_penalty FP32 [1] o
seed UINT64 [1] o
"""
ENSEMBLE_INPUTS = _table(
    """
text_input STRING [1]
decoder_text_input STRING [1] o
max_tokens INT32 [1]
num_return_sequences INT32 [1] o
bad_words STRING [-1] o
stop_words STRING [-1] o
exclude_input_in_output BOOL [1] o
"""
    + _CLIENT_SAMPLING
    + """
return_log_probs BOOL [1] o
return_context_logits BOOL [1] o
return_generation_logits BOOL [1] o
return_perf_metrics BOOL [1] o
return_num_input_tokens BOOL [1] o
return_num_output_tokens BOOL [1] o
beam_width INT32 [1] o
stream BOOL [1] o
prompt_embedding_table FP16 [-1,-1] o
prompt_table_extra_id UINT64 [1] o
prompt_vocab_size INT32 [1] o
embedding_bias_words STRING [-1] o
embedding_bias_weights FP32 [-1] o
lora_task_id UINT64 [1] o
lora_weights FP16 [-1,-1] o r
lora_config INT32 [-1,3] o r
guided_decoding_guide_type STRING [1] o r
guided_decoding_guide STRING [1] o r
"""
)
# Upstream's ensemble lists kv_cache_alloc_total_blocks twice (a slip); recorded as upstream has it.
ENSEMBLE_OUTPUTS = _table(
    "text_output STRING [-1]"
    + _LOGPROBS_LOGITS
    + _STATS
    + _KV_AND_TIMES.replace("kv_cache_alloc_total_blocks INT32 [1]\n", "kv_cache_alloc_total_blocks INT32 [1]\n" * 2)
)

BLS_INPUTS = _table(
    """
text_input STRING [1]
decoder_text_input STRING [1] o
image_input FP16 [-1,3,-1,-1] o
image_bytes_input UINT8 [-1,-1,-1,-1] o
image_url_input STRING [1] o
video_bytes_input UINT8 [-1,-1,-1,-1] o
max_tokens INT32 [1]
bad_words STRING [-1] o
stop_words STRING [-1] o
exclude_input_in_output BOOL [1] o
"""
    + _CLIENT_SAMPLING
    + """
return_log_probs BOOL [1] s o
return_context_logits BOOL [1] s o
return_generation_logits BOOL [1] s o
num_return_sequences INT32 [1] s o
beam_width INT32 [1] o
stream BOOL [1] o
prompt_embedding_table FP16 [-1,-1] o
prompt_vocab_size INT32 [1] o
prompt_table_extra_id UINT64 [1] o
embedding_bias_words STRING [-1] o
embedding_bias_weights FP32 [-1] o
num_draft_tokens INT32 [1] o
use_draft_logits BOOL [1] s o
lora_task_id UINT64 [1] s o
lora_weights FP16 [-1,-1] o r
lora_config INT32 [-1,3] o r
return_perf_metrics BOOL [1] s o
return_num_input_tokens BOOL [1] s o
return_num_output_tokens BOOL [1] s o
guided_decoding_guide_type STRING [1] o
guided_decoding_guide STRING [1] o
"""
)
BLS_OUTPUTS = _table("text_output STRING [-1]" + _LOGPROBS_LOGITS + _STATS + _KV_AND_TIMES)

# -- parameters: every key in each template ------------------------------------------------------------
PARAMETER_KEYS = {
    TENSORRT_LLM: (
        "max_beam_width",
        "FORCE_CPU_ONLY_INPUT_TENSORS",
        "gpt_model_type",
        "gpt_model_path",
        "encoder_model_path",
        "max_tokens_in_paged_kv_cache",
        "max_attention_window_size",
        "sink_token_length",
        "batch_scheduler_policy",
        "kv_cache_free_gpu_mem_fraction",
        "cross_kv_cache_fraction",
        "kv_cache_host_memory_bytes",
        "kv_cache_onboard_blocks",
        "enable_trt_overlap",
        "exclude_input_in_output",
        "cancellation_check_period_ms",
        "stats_check_period_ms",
        "iter_stats_max_iterations",
        "request_stats_max_iterations",
        "enable_kv_cache_reuse",
        "normalize_log_probs",
        "enable_chunked_context",
        "gpu_device_ids",
        "participant_ids",
        "num_nodes",
        "lora_cache_optimal_adapter_size",
        "lora_cache_max_adapter_size",
        "lora_cache_gpu_memory_fraction",
        "lora_cache_host_memory_bytes",
        "lora_prefetch_dir",
        "decoding_mode",
        "executor_worker_path",
        "lookahead_window_size",
        "lookahead_ngram_size",
        "lookahead_verification_set_size",
        "medusa_choices",
        "eagle_choices",
        "gpu_weights_percent",
        "enable_context_fmha_fp32_acc",
        "multi_block_mode",
        "cuda_graph_mode",
        "cuda_graph_cache_size",
        "speculative_decoding_fast_logits",
        "tokenizer_dir",
        "guided_decoding_backend",
        "xgrammar_tokenizer_info_path",
    ),
    PREPROCESSING: (
        "tokenizer_dir",
        "add_special_tokens",
        "multimodal_model_path",
        "gpt_model_path",
        "max_num_images",
        "hf_model_path",
    ),
    POSTPROCESSING: ("tokenizer_dir", "skip_special_tokens"),
    BLS: ("accumulate_tokens", "tensorrt_llm_model_name", "tensorrt_llm_draft_model_name", "multimodal_encoders_name"),
    ENSEMBLE: (),
}
EXECUTOR_WORKER_PATH = "/opt/tritonserver/backends/tensorrtllm/trtllmExecutorWorker"  # the template's fixed value


def _pairs(text: str) -> tuple[tuple[str, str], ...]:
    return tuple(tuple(p.split("=")) for p in text.split())  # type: ignore[misc]


# -- ensemble wiring: (step model, input_map, output_map), each map a tuple of (step tensor, ensemble tensor)
#    written `STEP=ENSEMBLE`
ENSEMBLE_STEPS = (
    (
        PREPROCESSING,
        _pairs("""QUERY=text_input DECODER_QUERY=decoder_text_input REQUEST_OUTPUT_LEN=max_tokens
        BAD_WORDS_DICT=bad_words STOP_WORDS_DICT=stop_words EMBEDDING_BIAS_WORDS=embedding_bias_words
        EMBEDDING_BIAS_WEIGHTS=embedding_bias_weights END_ID=end_id PAD_ID=pad_id
        PROMPT_TABLE_EXTRA_ID=prompt_table_extra_id"""),
        _pairs("""REQUEST_INPUT_LEN=_REQUEST_INPUT_LEN INPUT_ID=_INPUT_ID
        REQUEST_DECODER_INPUT_LEN=_REQUEST_DECODER_INPUT_LEN DECODER_INPUT_ID=_DECODER_INPUT_ID
        REQUEST_OUTPUT_LEN=_REQUEST_OUTPUT_LEN STOP_WORDS_IDS=_STOP_WORDS_IDS BAD_WORDS_IDS=_BAD_WORDS_IDS
        EMBEDDING_BIAS=_EMBEDDING_BIAS OUT_END_ID=_PREPROCESSOR_END_ID OUT_PAD_ID=_PREPROCESSOR_PAD_ID
        OUT_PROMPT_TABLE_EXTRA_IDS=_OUT_PROMPT_TABLE_EXTRA_IDS"""),
    ),
    (
        TENSORRT_LLM,
        _pairs("""input_ids=_INPUT_ID decoder_input_ids=_DECODER_INPUT_ID input_lengths=_REQUEST_INPUT_LEN
        decoder_input_lengths=_REQUEST_DECODER_INPUT_LEN exclude_input_in_output=exclude_input_in_output
        request_output_len=_REQUEST_OUTPUT_LEN end_id=_PREPROCESSOR_END_ID pad_id=_PREPROCESSOR_PAD_ID
        embedding_bias=_EMBEDDING_BIAS runtime_top_k=top_k runtime_top_p=top_p temperature=temperature
        len_penalty=length_penalty repetition_penalty=repetition_penalty min_tokens=min_tokens
        presence_penalty=presence_penalty frequency_penalty=frequency_penalty seed=seed
        return_log_probs=return_log_probs return_context_logits=return_context_logits
        return_generation_logits=return_generation_logits return_perf_metrics=return_perf_metrics
        return_num_input_tokens=return_num_input_tokens return_num_output_tokens=return_num_output_tokens
        num_return_sequences=num_return_sequences beam_width=beam_width streaming=stream
        prompt_embedding_table=prompt_embedding_table prompt_vocab_size=prompt_vocab_size
        stop_words_list=_STOP_WORDS_IDS bad_words_list=_BAD_WORDS_IDS prompt_table_extra_ids=_OUT_PROMPT_TABLE_EXTRA_IDS
        lora_task_id=lora_task_id lora_weights=lora_weights lora_config=lora_config
        guided_decoding_guide_type=guided_decoding_guide_type guided_decoding_guide=guided_decoding_guide"""),
        (("output_ids", "_TOKENS_BATCH"), ("sequence_length", "_SEQUENCE_LENGTH"))
        + tuple((t.name, t.name) for t in _table(_LOGPROBS_LOGITS + _STATS + _KV_AND_TIMES)),
    ),
    (
        POSTPROCESSING,
        _pairs("TOKENS_BATCH=_TOKENS_BATCH SEQUENCE_LENGTH=_SEQUENCE_LENGTH"),
        (("OUTPUT", "text_output"),),
    ),
)
