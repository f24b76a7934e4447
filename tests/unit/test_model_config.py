"""LlamaConfig parsing: both RoPE spellings, derived fields, and precise rejections."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from builder.errors import UserError
from builder.model.config import Llama3RopeScaling, LlamaConfig

# Meta-Llama-3.1-8B-Instruct's config.json as published (transformers 4 spelling), trimmed of token ids.
LLAMA31_8B = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "vocab_size": 128256,
}


def _with(**changes: object) -> dict:
    raw = json.loads(json.dumps(LLAMA31_8B))
    for key, value in changes.items():
        if value is None:
            raw.pop(key, None)
        else:
            raw[key] = value
    return raw


def test_llama31_transformers4_spelling() -> None:
    cfg = LlamaConfig.from_hf_dict(LLAMA31_8B)
    assert (cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size) == (128256, 4096, 14336)
    assert (cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads) == (32, 32, 8)
    assert cfg.head_dim == 128 and cfg.kv_groups == 4
    assert cfg.rope_theta == 500000.0 and cfg.rms_norm_eps == 1e-5
    assert cfg.rope_scaling == Llama3RopeScaling(8.0, 1.0, 4.0, 8192)
    assert cfg.tie_word_embeddings is False and cfg.max_position_embeddings == 131072


def test_transformers5_rope_parameters_spelling() -> None:
    raw = _with(
        rope_scaling=None,
        rope_theta=None,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    )
    assert LlamaConfig.from_hf_dict(raw) == LlamaConfig.from_hf_dict(LLAMA31_8B)


def test_saved_by_transformers_roundtrip(tmp_path) -> None:
    from tests.unit.model_utils import LLAMA3_SCALING, hf_config

    hf_config(head_dim=16, rope_scaling=dict(LLAMA3_SCALING), tie_word_embeddings=True).save_pretrained(tmp_path)
    cfg = LlamaConfig.from_json(tmp_path)
    assert cfg.head_dim == 16 and cfg.num_key_value_heads == 2 and cfg.tie_word_embeddings
    assert cfg.rope_theta == 500.0
    assert cfg.rope_scaling == Llama3RopeScaling(8.0, 1.0, 4.0, 32)


def test_llama3_without_scaling_and_explicit_head_dim() -> None:
    cfg = LlamaConfig.from_hf_dict(_with(rope_scaling=None, head_dim=64))  # Llama 3.0 has rope_scaling null
    assert cfg.rope_scaling is None and cfg.head_dim == 64


@pytest.mark.parametrize(
    ("changes", "field", "needle"),
    [
        (dict(architectures=["MistralForCausalLM"]), "architectures", "LlamaForCausalLM"),
        (dict(architectures=None, model_type=None), "architectures", "missing"),
        (dict(architectures=None, model_type="mistral"), "model_type", "llama"),
        (dict(rope_scaling={"rope_type": "yarn", "factor": 4.0}), "rope_scaling.rope_type", "llama3"),
        (
            dict(rope_scaling=None, rope_parameters={"rope_type": "dynamic", "factor": 2.0}),
            "rope_parameters.rope_type",
            "default, llama3",
        ),
        (
            dict(rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0}),
            "rope_scaling.high_freq_factor",
            "missing",
        ),
        (dict(hidden_act="gelu"), "hidden_act", "silu"),
        (dict(attention_bias=True), "attention_bias", "false"),
        (dict(num_key_value_heads=5), "num_key_value_heads", "multiple"),
        (dict(vocab_size=None), "vocab_size", "missing"),
        (dict(hidden_size="4096"), "hidden_size", "positive integer"),
    ],
)
def test_rejections_name_field_and_allowed(changes: dict, field: str, needle: str) -> None:
    with pytest.raises(UserError) as info:
        LlamaConfig.from_hf_dict(_with(**changes), source="ckpt/config.json")
    err = info.value
    assert err.field == field and err.location == "ckpt/config.json"
    assert needle in str(err)


def test_from_json_errors(tmp_path) -> None:
    with pytest.raises(UserError, match="no config.json"):
        LlamaConfig.from_json(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON") as info:
        LlamaConfig.from_json(tmp_path)
    assert info.value.location == str(tmp_path / "config.json")


def test_config_module_does_not_import_torch() -> None:
    code = "import sys, builder.model, builder.model.config; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
