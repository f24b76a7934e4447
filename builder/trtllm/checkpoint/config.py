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
* `medusa/config.py`: `MedusaConfig.to_dict` = the Llama dict + num_medusa_heads, num_medusa_layers,
  max_draft_len. `eagle/config.py` @ 2a9abd9536aa62ad3e4b9314be9286b1b1be523b: `EagleConfig.to_dict` = the
  Llama dict + num_eagle_layers, max_non_leaves_per_layer, max_draft_len, eagle_net_config (the draft's
  Llama dict); `examples/eagle/convert_checkpoint.py` @ 65b31db1b401d3752b8ebe7c29093cbfb6af04b7 (its
  examples/constraints.txt pins tensorrt_llm 1.3.0rc5) also writes head_dim and head_size in both. That script,
  like `EagleForCausalLM.from_hugging_face` in `eagle/model.py` @ 89fd9b74ab7ae753b4c6b3db25a400dca7ea54a0 (the
  1.2-era source this module cites), builds `EagleForCausalLM(tllm_config)` before `save_checkpoint`, and
  `EagleForCausalLM.__init__` sets, on the same `eagle_net_config` object the saved config.json serialises:
  mapping = Mapping(world_size, tp_size=world_size, pp_size=1), fc_after_embed = True,
  use_input_layernorm_in_first_layer = False, use_last_layernorm = False, layer_idx_offset = the target's
  num_hidden_layers — so upstream's config.json carries those EAGLE values, and so does ours (`eagle_config`).
  (The 0.15-dev converter @ 04a2cacbfd3b9ac76191bd8498ad871607b63a04 dumped its dict as is, without them; the
  1.2 release tag's copy of the script was not among the sources read.)
* `quantization/quantize.py` `quantize_layers`: default exclude_modules ['*lm_head', '*router',
  '*vocab_embedding', '*position_embedding', '*block_embedding', '*shared_expert_gate'] (fnmatch on
  TRT-LLM module names). Draft parts stay in the model dtype (the quantize stage's rule): '*medusa_heads*'
  as `quantization/quantize_by_modelopt.py` adds for unquantized heads, and '*eagle_nets*'.
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


def quantization(fp8: bool, kv_fp8: bool, lm_head_fp8: bool, method: str) -> dict[str, Any]:
    """The `quantization` object (QuantConfig as a dict)."""
    excludes = None
    if fp8:
        excludes = [e for e in DEFAULT_EXCLUDES if not (lm_head_fp8 and e == "*lm_head")]
        excludes += {"medusa": ["*medusa_heads*"], "eagle": ["*eagle_nets*"]}.get(method, [])
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


def medusa_config(base: dict[str, Any], num_heads: int, num_layers: int, max_draft_len: int) -> dict[str, Any]:
    return {
        **base,
        "architecture": "MedusaForCausalLM",
        "num_medusa_heads": num_heads,
        "num_medusa_layers": num_layers,
        "max_draft_len": max_draft_len,
    }


def eagle_config(
    base: dict[str, Any], draft: dict[str, Any], num_eagle_layers: int, max_non_leaves: int, max_draft_len: int
) -> dict[str, Any]:
    """EagleConfig.to_dict() as upstream's converter saves it (module docstring: the EagleNet values)."""
    world = base["mapping"]["world_size"]
    draft = {
        **draft,
        "head_dim": draft["head_size"],
        "mapping": mapping_config(world, 1),
        "fc_after_embed": True,
        "use_input_layernorm_in_first_layer": False,
        "use_last_layernorm": False,
        "layer_idx_offset": base["num_hidden_layers"],
    }
    return {
        **base,
        "architecture": "EagleForCausalLM",
        "head_dim": base["head_size"],
        "num_eagle_layers": num_eagle_layers,
        "max_non_leaves_per_layer": max_non_leaves,
        "max_draft_len": max_draft_len,
        "eagle_net_config": draft,
    }
