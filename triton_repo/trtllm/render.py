"""Render TensorRT-LLM's `inflight_batcher_llm` Triton repository from protobuf (never from `${...}` templates).

    facts = render_repository(Path("repo"), TrtllmRepoSettings(engine_dir="/engines/llama3"), Path("hf/llama3"))

    repo/
      <model_name>/config.pbtxt, 1/          ensemble: preprocessing -> tensorrt_llm -> postprocessing
      preprocessing/config.pbtxt, 1/model.py, 1/tokenizer/   trtspec's tokenizer model (standalone file)
      tensorrt_llm/config.pbtxt, 1/          TensorRT-LLM's C++ backend (`backend: "tensorrtllm"`, GPU)
      postprocessing/config.pbtxt, 1/model.py
      tensorrt_llm_bls/config.pbtxt, 1/model.py   the same pipeline as one Python model (BLS calls)
      trtspec-repo.json                      the returned facts

Every config is a `ModelConfig` (tritonclient's model_config_pb2) whose tensors are upstream's, read from
`triton_repo.trtllm.upstream`, and whose parameters carry every key of upstream's template with a value
from the settings or a stated constant. Differences from upstream, each deliberate:

- the ensemble is named `settings.model_name` (upstream: "ensemble");
- the ensemble declares `kv_cache_alloc_total_blocks` once (upstream's template lists it twice);
- `tensorrt_llm` omits `lora_prefetch_dir`: the backend turns any string, "" included, into a prefetch
  folder (`getPeftCacheConfigFromParams`); only an absent key means "no prefetch";
- `model.py` files are trtspec's own (transformers without trust_remote_code; no multimodal paths).

Unset values render as `UNSET` = "": the backend's numeric/bool readers (`std::stoi`, `std::stof`, the bool
parser) throw on it and the backend keeps its default; string readers get "" (the guided-decoding keys,
which the backend reads without a fallback, must exist, and "" switches guided decoding off).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

import triton_repo.trtllm.upstream as U
from builder.files import link_or_copy
from triton_repo.config import pb2, render
from triton_repo.trtllm.settings import SettingsError, TrtllmRepoSettings, bool_str, format_choices, format_id_groups

UNSET = ""
MODELS_DIR = Path(__file__).resolve().with_name("models")  # trtspec's standalone Python-backend model files
MODEL_FILES = {U.PREPROCESSING: "preprocessing.py", U.POSTPROCESSING: "postprocessing.py", U.BLS: "tensorrt_llm_bls.py"}
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "config.json",
)
OMITTED_KEYS = {U.TENSORRT_LLM: ("lora_prefetch_dir",)}
INFO = "trtspec-repo.json"


def dtype_placeholders(s: TrtllmRepoSettings) -> dict[str, str]:
    """Values of the templates' `${..._data_type}` placeholders."""
    return {
        "@logits_datatype": s.logits_datatype,
        # decoder-only Llama: unused; docs/model_config.md: TYPE_FP16 for every model but mllama (TYPE_BF16)
        "@encoder_input_features_data_type": "TYPE_FP16",
        # must equal the FP16 `prompt_embedding_table` the ensemble and BLS templates hard-code (mapped onto it)
        "@prompt_embedding_table_data_type": "TYPE_FP16",
    }


def tensorrt_llm_parameters(s: TrtllmRepoSettings) -> dict[str, str]:
    """Every key of upstream's tensorrt_llm template (minus OMITTED_KEYS) -> its value."""
    w, n, g = s.lookahead if s.lookahead is not None else (UNSET, UNSET, UNSET)
    return {
        "max_beam_width": str(s.max_beam_width),
        "FORCE_CPU_ONLY_INPUT_TENSORS": "no",  # upstream's fixed value
        "gpt_model_type": s.batching_strategy,
        "gpt_model_path": s.engine_dir,
        "encoder_model_path": UNSET,  # decoder-only
        "max_tokens_in_paged_kv_cache": _opt(s.max_tokens_in_paged_kv_cache),
        "max_attention_window_size": _opt(s.max_attention_window_size),
        "sink_token_length": UNSET,
        "batch_scheduler_policy": s.batch_scheduler_policy,
        "kv_cache_free_gpu_mem_fraction": repr(float(s.kv_cache_free_gpu_mem_fraction)),
        "cross_kv_cache_fraction": UNSET,  # encoder-decoder only
        "kv_cache_host_memory_bytes": "0",  # no host offload (the backend's default)
        "kv_cache_onboard_blocks": "true",
        "enable_trt_overlap": "false",  # the backend's defaults
        "exclude_input_in_output": bool_str(s.exclude_input_in_output),
        "cancellation_check_period_ms": str(s.cancellation_check_period_ms),
        "stats_check_period_ms": "100",
        "iter_stats_max_iterations": UNSET,
        "request_stats_max_iterations": UNSET,  # executor defaults
        "enable_kv_cache_reuse": bool_str(s.enable_kv_cache_reuse),
        "normalize_log_probs": "true",
        "enable_chunked_context": bool_str(s.enable_chunked_context),
        "gpu_device_ids": format_id_groups(s.gpu_device_ids),
        "participant_ids": format_id_groups(s.participant_ids),
        "num_nodes": "1",
        # no LoRA: the backend's defaults (64 / 8; the fractions stay unset)
        "lora_cache_optimal_adapter_size": "8",
        "lora_cache_max_adapter_size": "64",
        "lora_cache_gpu_memory_fraction": UNSET,
        "lora_cache_host_memory_bytes": UNSET,
        "decoding_mode": s.decoding_mode,
        "executor_worker_path": U.EXECUTOR_WORKER_PATH,
        "lookahead_window_size": str(w),
        "lookahead_ngram_size": str(n),
        "lookahead_verification_set_size": str(g),
        "medusa_choices": format_choices(s.medusa_choices),
        "eagle_choices": format_choices(s.eagle_choices),
        "gpu_weights_percent": "1.0",
        "enable_context_fmha_fp32_acc": "false",
        "multi_block_mode": "true",
        "cuda_graph_mode": "false",
        "cuda_graph_cache_size": "0",
        "speculative_decoding_fast_logits": "false",
        # read without a fallback by getGuidedDecodingConfigFromParams; the C++ workflow ignores tokenizer_dir
        "tokenizer_dir": UNSET,
        "guided_decoding_backend": UNSET,
        "xgrammar_tokenizer_info_path": UNSET,
    }


def _opt(v: int | None) -> str:
    return UNSET if v is None else str(v)


def parameters(s: TrtllmRepoSettings) -> dict[str, dict[str, str]]:
    """Model name -> parameter key -> value, for the whole repository."""
    return {
        U.PREPROCESSING: {
            "tokenizer_dir": s.tokenizer_dir,
            "add_special_tokens": bool_str(s.add_special_tokens),
            "multimodal_model_path": UNSET,
            "gpt_model_path": s.engine_dir,
            "max_num_images": UNSET,
            "hf_model_path": UNSET,
        },
        U.TENSORRT_LLM: tensorrt_llm_parameters(s),
        U.POSTPROCESSING: {"tokenizer_dir": s.tokenizer_dir, "skip_special_tokens": bool_str(s.skip_special_tokens)},
        U.BLS: {
            "accumulate_tokens": bool_str(s.accumulate_tokens),
            "tensorrt_llm_model_name": U.TENSORRT_LLM,
            "tensorrt_llm_draft_model_name": UNSET,
            "multimodal_encoders_name": UNSET,
        },
        s.model_name: {},
    }


# -- ModelConfig builders ---------------------------------------------------------------------------------


def _add_tensors(items: Any, specs: tuple[U.Tensor, ...], s: TrtllmRepoSettings, output: bool = False) -> None:
    m, dtypes, seen = pb2(), dtype_placeholders(s), set()
    for t in specs:
        if t.name in seen:  # upstream's ensemble repeats one output; a tensor is declared once
            continue
        seen.add(t.name)
        dtype = dtypes[t.dtype] if t.dtype.startswith("@") else f"TYPE_{t.dtype}"
        entry = items.add(name=t.name, data_type=m.DataType.Value(dtype), dims=list(t.dims))
        if t.reshape:
            entry.reshape.SetInParent()  # reshape: { shape: [ ] }
        if not output:
            entry.optional, entry.allow_ragged_batch = t.optional, t.ragged


def _model(
    name: str,
    s: TrtllmRepoSettings,
    inputs: tuple[U.Tensor, ...],
    outputs: tuple[U.Tensor, ...],
    params: dict[str, str],
    **kw: Any,
) -> Any:
    m = pb2()
    cfg = m.ModelConfig(name=name, max_batch_size=s.max_batch_size, **kw)
    _add_tensors(cfg.input, inputs, s)
    _add_tensors(cfg.output, outputs, s, output=True)
    for k, v in params.items():
        cfg.parameters[k].string_value = v
    return cfg


def _instances(cfg, count: int) -> None:
    cfg.instance_group.add(kind=pb2().ModelInstanceGroup.KIND_CPU, count=count)


def _dynamic_batching(cfg, s: TrtllmRepoSettings) -> None:
    db = cfg.dynamic_batching
    db.preferred_batch_size.append(s.max_batch_size)
    db.max_queue_delay_microseconds = s.max_queue_delay_us
    db.default_queue_policy.max_queue_size = s.max_queue_size


def all_configs(s: TrtllmRepoSettings) -> dict[str, Any]:
    """Model name -> ModelConfig for the five models (settings validated first)."""
    s.validate()
    params = parameters(s)
    pre = _model(
        U.PREPROCESSING, s, U.PREPROCESSING_INPUTS, U.PREPROCESSING_OUTPUTS, params[U.PREPROCESSING], backend="python"
    )
    _dynamic_batching(pre, s)
    _instances(pre, s.preprocessing_instances)
    llm = _model(
        U.TENSORRT_LLM, s, U.TENSORRT_LLM_INPUTS, U.TENSORRT_LLM_OUTPUTS, params[U.TENSORRT_LLM], backend="tensorrtllm"
    )
    llm.model_transaction_policy.decoupled = s.decoupled
    _dynamic_batching(llm, s)
    _instances(llm, s.tensorrt_llm_instances)
    post = _model(
        U.POSTPROCESSING,
        s,
        U.POSTPROCESSING_INPUTS,
        U.POSTPROCESSING_OUTPUTS,
        params[U.POSTPROCESSING],
        backend="python",
    )
    post.dynamic_batching.SetInParent()  # dynamic_batching {}
    _instances(post, s.postprocessing_instances)
    bls = _model(U.BLS, s, U.BLS_INPUTS, U.BLS_OUTPUTS, params[U.BLS], backend="python")
    bls.model_transaction_policy.decoupled = s.decoupled
    _instances(bls, s.bls_instances)
    return {
        U.PREPROCESSING: pre,
        U.TENSORRT_LLM: llm,
        U.POSTPROCESSING: post,
        U.BLS: bls,
        s.model_name: ensemble_config(s),
    }


def ensemble_config(s: TrtllmRepoSettings):
    cfg = _model(s.model_name, s, U.ENSEMBLE_INPUTS, U.ENSEMBLE_OUTPUTS, {}, platform="ensemble")
    for model, inputs, outputs in U.ENSEMBLE_STEPS:
        step = cfg.ensemble_scheduling.step.add(model_name=model, model_version=-1)
        for inner, outer in inputs:
            step.input_map[inner] = outer
        for inner, outer in outputs:
            step.output_map[inner] = outer
    return cfg


# -- the repository on disk ------------------------------------------------------------------------------


def _tokenizer_files(src: Path) -> list[Path]:
    if not Path(src).is_dir():
        raise SettingsError(f"{src}: not a folder", field="tokenizer_src")
    found = [Path(src) / f for f in TOKENIZER_FILES if (Path(src) / f).is_file()]
    if not any(f.name in ("tokenizer.json", "tokenizer.model") for f in found):
        raise SettingsError(
            f"{src}: no tokenizer",
            field="tokenizer_src",
            allowed="a folder with tokenizer.json (or tokenizer.model) and tokenizer_config.json",
        )
    return found


def _write(tmp: Path, s: TrtllmRepoSettings, configs: dict[str, Any], tokenizer: list[Path]) -> None:
    for name, cfg in configs.items():
        (tmp / name / "1").mkdir(parents=True, exist_ok=True)
        (tmp / name / "config.pbtxt").write_text(render(cfg), encoding="utf-8")
    for name, file in MODEL_FILES.items():
        shutil.copyfile(MODELS_DIR / file, tmp / name / "1" / "model.py")
    for f in tokenizer:
        link_or_copy(f, tmp / s.tokenizer_dir / f.name)


def render_repository(out: Path, s: TrtllmRepoSettings, tokenizer_src: Path) -> dict[str, Any]:
    """Write the repository at `out` (absent or an empty folder), all or nothing; returns its facts."""
    out = Path(out)
    configs = all_configs(s)
    tokenizer = _tokenizer_files(Path(tokenizer_src))
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise SettingsError(f"{out} exists and is not an empty folder", field="out")
    params = parameters(s)
    facts = {
        "ensemble": s.model_name,
        "models": list(configs),
        "decoding_mode": s.decoding_mode,
        "parameters": {name: params[name] for name in configs},
        "tokenizer_dir": s.tokenizer_dir,
        "tokenizer_files": sorted(f.name for f in tokenizer),
        "upstream": {"pinned": U.PINNED, "repo": U.UPSTREAM_REPO, "sources": U.SOURCES},
        "settings": asdict(s),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir()
        _write(tmp, s, configs, tokenizer)
        (tmp / INFO).write_text(json.dumps(facts, indent=2) + "\n", encoding="utf-8")
        if out.exists():
            out.rmdir()
        os.rename(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return facts
