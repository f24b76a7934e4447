"""config.json of the TensorRT-LLM checkpoint, as `PretrainedConfig.to_dict()` serialises it.

Sources (TensorRT-LLM, `tensorrt_llm/models/`):
* `modeling_utils.py` @ b35ac1b64368513d215c57d2ed01d62d910df8da (1.2.0rc2): `PretrainedConfig.__init__`
  fields (architecture, dtype, vocab_size, hidden_size, num_hidden_layers, num_attention_heads,
  hidden_act, logits_dtype, norm_epsilon, runtime_defaults, position_embedding_type,
  num_key_value_heads, intermediate_size, max_position_embeddings, mapping, quantization,
  use_parallel_embedding, embedding_sharding_dim, head_size, qk_layernorm, rotary_embedding_dim);
  `to_dict` = the instance dict with `mapping.to_dict()` minus rank and `QuantConfig` as a dataclass dict
  (quant_algo, kv_cache_quant_algo, group_size, smoothquant_val, clamp_val, use_meta_recipe,
  has_zero_point, pre_quant_scale, exclude_modules, mamba_ssm_cache_dtype).
* `llama/config.py` @ 89fd9b74ab7ae753b4c6b3db25a400dca7ea54a0: `LLaMAConfig` adds mlp_bias, attn_bias,
  rotary_base, rotary_scaling (HF's `rope_scaling` dict as is, so Llama 3.1's "llama3" scaling keeps
  factor / low_freq_factor / high_freq_factor / original_max_position_embeddings), residual_mlp,
  disable_weight_only_quant_plugin, remove_duplicated_kv_heads, fc_after_embed,
  use_input_layernorm_in_first_layer, use_last_layernorm, layer_idx_offset, the multipliers,
  has_partial_lora_mask, tie_word_embeddings. `moe` is left out: absent, LLaMAConfig builds its
  dense default (num_experts 0).
* A draft's fields (`MedusaConfig.to_dict`, `EagleConfig.to_dict`) are its own module's (`medusa.py`, `eagle.py`:
  the method's `Draft.config`), over the target's dict with the method's architecture (`EngineFlow.architecture`).
* `quantization/quantize.py` `quantize_layers`: default exclude_modules ['*lm_head', '*router',
  '*vocab_embedding', '*position_embedding', '*block_embedding', '*shared_expert_gate'] (fnmatch on
  TRT-LLM module names). Draft parts stay in the model dtype (the quantize stage's rule): the draft's own
  pattern joins the list (`Draft.exclude`: '*medusa_heads*' as `quantization/quantize_by_modelopt.py` adds for
  unquantized heads, '*eagle_nets*').
"""

from __future__ import annotations

from typing import Any

from builder.model.config import LlamaConfig
from builder.trtllm.checkpoint.mapping import mapping_config

DEFAULT_EXCLUDES = [
    "*lm_head",
    "*router",
    "*vocab_embedding",
    "*position_embedding",
    "*block_embedding",
    "*shared_expert_gate",
]


def rotary_scaling(cfg: LlamaConfig) -> dict[str, Any] | None:
    """HF's rope_scaling dict for Llama 3.1 scaling (None for plain RoPE)."""
    s = cfg.rope_scaling
    if s is None:
        return None
    return {
        "factor": s.factor,
        "low_freq_factor": s.low_freq_factor,
        "high_freq_factor": s.high_freq_factor,
        "original_max_position_embeddings": s.original_max_position_embeddings,
        "rope_type": "llama3",
    }


def quantization(fp8: bool, kv_fp8: bool, lm_head_fp8: bool, draft_exclude: str | None) -> dict[str, Any]:
    """The `quantization` object (QuantConfig as a dict); `draft_exclude`: the draft's pattern (`Draft.exclude`)."""
    excludes = None
    if fp8:
        excludes = [e for e in DEFAULT_EXCLUDES if not (lm_head_fp8 and e == "*lm_head")]
        excludes += [draft_exclude] if draft_exclude else []
    return {
        "quant_algo": "FP8" if fp8 else None,
        "kv_cache_quant_algo": "FP8" if kv_fp8 else None,
        "group_size": 128,
        "smoothquant_val": 0.5,
        "clamp_val": None,
        "use_meta_recipe": False,
        "has_zero_point": False,
        "pre_quant_scale": False,
        "exclude_modules": excludes,
        "mamba_ssm_cache_dtype": None,
    }


def llama_config(
    cfg: LlamaConfig, architecture: str, dtype: str, tp: int, pp: int, quant: dict[str, Any], parallel_embedding: bool
) -> dict[str, Any]:
    """The LLaMAConfig dict of one Llama stack."""
    return {
        "architecture": architecture,
        "dtype": dtype,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "hidden_act": "silu",
        "logits_dtype": "float32",
        "norm_epsilon": cfg.rms_norm_eps,
        "runtime_defaults": None,
        "position_embedding_type": "rope_gpt_neox",
        "num_key_value_heads": cfg.num_key_value_heads,
        "intermediate_size": cfg.intermediate_size,
        "max_position_embeddings": cfg.max_position_embeddings,
        "mapping": mapping_config(tp, pp),
        "quantization": dict(quant),
        "use_parallel_embedding": parallel_embedding,
        "embedding_sharding_dim": 0,
        "head_size": cfg.head_dim,
        "qk_layernorm": False,
        "rotary_embedding_dim": cfg.head_dim,
        "mlp_bias": False,
        "attn_bias": False,
        "rotary_base": cfg.rope_theta,
        "rotary_scaling": rotary_scaling(cfg),
        "residual_mlp": False,
        "disable_weight_only_quant_plugin": False,
        "remove_duplicated_kv_heads": False,
        "fc_after_embed": False,
        "use_input_layernorm_in_first_layer": True,
        "use_last_layernorm": True,
        "layer_idx_offset": 0,
        "embedding_multiplier": 1.0,
        "attention_multiplier": 1.0,
        "residual_multiplier": 1.0,
        "output_multiplier_scale": 1.0,
        "has_partial_lora_mask": False,
        "tie_word_embeddings": cfg.tie_word_embeddings,
    }
