"""`LlamaConfig`: the target model's shape, parsed strictly from an HF `config.json`.

Accepted: `architectures == ["LlamaForCausalLM"]` (or, without `architectures`, `model_type: llama`),
SiLU MLP and attention without biases, RoPE of type `default` or `llama3`. The RoPE settings may be
written the transformers 4 way (`rope_theta` + `rope_scaling`) or the transformers 5 way
(`rope_parameters` holding `rope_theta`, `rope_type` and the scaling fields). Anything else is a
`UserError` naming the field; nothing falls back to a default silently. Where HF itself defines a
default we apply the same one: `rope_theta` 10000, `num_key_value_heads` = heads, `head_dim` =
hidden / heads, `original_max_position_embeddings` = `max_position_embeddings`,
`tie_word_embeddings` false. Keys this model does not use (token ids, `use_cache`, …) are ignored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from builder.errors import UserError

ARCHITECTURES = ("LlamaForCausalLM",)
MODEL_TYPES = ("llama",)  # checked when `architectures` is absent (a bare LlamaConfig.save_pretrained)
ROPE_TYPES = ("default", "llama3")
HIDDEN_ACTS = ("silu",)


@dataclass(frozen=True)
class Llama3RopeScaling:
    """Llama 3.1 frequency-dependent RoPE scaling (`rope_type: llama3`)."""

    factor: float  # 8.0 in Llama 3.1
    low_freq_factor: float  # 1.0
    high_freq_factor: float  # 4.0
    original_max_position_embeddings: int  # 8192


@dataclass(frozen=True)
class LlamaConfig:
    """Shape and numerics of a Llama 3 target (the fields of HF `config.json` this model uses)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: Llama3RopeScaling | None  # None = plain RoPE (`rope_type: default`)
    tie_word_embeddings: bool
    max_position_embeddings: int

    @property
    def kv_groups(self) -> int:
        """Query heads per KV head (GQA group size)."""
        return self.num_attention_heads // self.num_key_value_heads

    @classmethod
    def from_hf_dict(cls, raw: Mapping[str, Any], source: str = "config.json") -> LlamaConfig:
        """Parse a decoded HF `config.json`; `source` names the file in error messages."""
        r = _Reader(raw, source)
        r.check_architecture()
        r.check_choice("hidden_act", HIDDEN_ACTS, default="silu")
        r.check_false("attention_bias")
        r.check_false("mlp_bias")
        heads = r.int_("num_attention_heads")
        hidden = r.int_("hidden_size")
        kv_heads = r.int_("num_key_value_heads", default=heads)
        if heads % kv_heads:
            raise UserError(
                f"num_attention_heads ({heads}) is not a multiple of num_key_value_heads ({kv_heads})",
                location=source,
                field="num_key_value_heads",
            )
        head_dim = r.int_("head_dim", default=None)
        if head_dim is None:
            if hidden % heads:
                raise UserError(
                    f"head_dim is absent and hidden_size ({hidden}) is not a multiple of num_attention_heads ({heads})",
                    location=source,
                    field="head_dim",
                )
            head_dim = hidden // heads
        if head_dim % 2:
            raise UserError(f"head_dim must be even for RoPE, got {head_dim}", location=source, field="head_dim")
        max_pos = r.int_("max_position_embeddings")
        theta, scaling = _parse_rope(r, max_pos)
        return cls(
            vocab_size=r.int_("vocab_size"),
            hidden_size=hidden,
            intermediate_size=r.int_("intermediate_size"),
            num_hidden_layers=r.int_("num_hidden_layers"),
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=head_dim,
            rms_norm_eps=r.float_("rms_norm_eps"),
            rope_theta=theta,
            rope_scaling=scaling,
            tie_word_embeddings=r.bool_("tie_word_embeddings", default=False),
            max_position_embeddings=max_pos,
        )

    @classmethod
    def from_json(cls, path: str | Path) -> LlamaConfig:
        """Read `config.json` (or a checkpoint directory holding one)."""
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        return cls.from_hf_dict(read_json_object(path), source=str(path))


def read_json_object(path: Path, missing: str = "no config.json found") -> dict[str, Any]:
    """A JSON object from `path`; UserError (naming the file) when absent, not JSON or not an object."""
    if not path.is_file():
        raise UserError(missing, location=str(path))
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"config is not valid JSON: {exc}", location=str(path)) from exc
    if not isinstance(raw, dict):
        raise UserError("config must be a JSON object", location=str(path))
    return raw


_MISSING = object()


class _Reader:
    """Typed, strict access to config keys; every failure names the source and the field."""

    def __init__(self, raw: Mapping[str, Any], source: str) -> None:
        self.raw = raw
        self.source = source

    def fail(self, field: str, message: str, allowed: str | None = None) -> UserError:
        return UserError(message, location=self.source, field=field, allowed=allowed)

    def get(self, field: str, default: Any = _MISSING, raw: Mapping[str, Any] | None = None) -> Any:
        raw = self.raw if raw is None else raw
        if field in raw and raw[field] is not None:
            return raw[field]
        if default is _MISSING:
            raise self.fail(field, "required field is missing")
        return default

    def int_(self, field: str, default: Any = _MISSING, raw: Mapping[str, Any] | None = None) -> Any:
        value = self.get(field, default, raw)
        if value is default and default is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise self.fail(field, f"expected a positive integer, got {value!r}")
        return value

    def float_(self, field: str, default: Any = _MISSING, raw: Mapping[str, Any] | None = None) -> float:
        value = self.get(field, default, raw)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise self.fail(field, f"expected a positive number, got {value!r}")
        return float(value)

    def bool_(self, field: str, default: Any = _MISSING) -> bool:
        value = self.get(field, default)
        if not isinstance(value, bool):
            raise self.fail(field, f"expected true or false, got {value!r}")
        return value

    def check_false(self, field: str) -> None:
        if self.bool_(field, default=False):
            raise self.fail(field, "biases are not supported by the Llama 3 reference", allowed="false")

    def check_choice(self, field: str, allowed: tuple[str, ...], default: Any = _MISSING) -> None:
        value = self.get(field, default)
        if value not in allowed:
            raise self.fail(field, f"unsupported value {value!r}", allowed=", ".join(allowed))

    def check_architecture(self) -> None:
        """`architectures` must be ["LlamaForCausalLM"]; if absent, `model_type` must be "llama"."""
        if self.raw.get("architectures") is None and self.raw.get("model_type") is not None:
            self.check_choice("model_type", MODEL_TYPES)
            return
        archs = self.get("architectures")
        if not isinstance(archs, list) or len(archs) != 1 or archs[0] not in ARCHITECTURES:
            raise self.fail(
                "architectures",
                f"unsupported architectures {archs!r}",
                allowed=", ".join(f"[{a!r}]" for a in ARCHITECTURES),
            )


def _parse_rope(r: _Reader, max_pos: int) -> tuple[float, Llama3RopeScaling | None]:
    """RoPE theta and scaling from `rope_parameters` (transformers 5) or `rope_scaling` (4)."""
    params = r.raw.get("rope_parameters")
    legacy = r.raw.get("rope_scaling")
    if params is not None and legacy is not None:
        raise r.fail("rope_scaling", "give either rope_parameters or rope_scaling, not both")
    if params is not None:
        field, block = "rope_parameters", params
    else:
        field, block = "rope_scaling", legacy if legacy is not None else {}
    if not isinstance(block, dict):
        raise r.fail(field, f"expected an object, got {block!r}")
    if "rope_theta" in block and "rope_theta" in r.raw and block["rope_theta"] != r.raw["rope_theta"]:
        raise r.fail(
            f"{field}.rope_theta", f"{block['rope_theta']!r} disagrees with rope_theta {r.raw['rope_theta']!r}"
        )
    theta_src = block if "rope_theta" in block else r.raw
    theta_field = f"{field}.rope_theta" if theta_src is block else "rope_theta"
    theta = _sub_float(r, theta_field, theta_src, "rope_theta", default=10000.0)
    rope_type = block.get("rope_type", block.get("type", "default"))
    if rope_type not in ROPE_TYPES:
        raise r.fail(f"{field}.rope_type", f"unsupported RoPE type {rope_type!r}", allowed=", ".join(ROPE_TYPES))
    if rope_type == "default":
        return theta, None
    scaling = Llama3RopeScaling(
        factor=_sub_float(r, f"{field}.factor", block, "factor"),
        low_freq_factor=_sub_float(r, f"{field}.low_freq_factor", block, "low_freq_factor"),
        high_freq_factor=_sub_float(r, f"{field}.high_freq_factor", block, "high_freq_factor"),
        original_max_position_embeddings=_sub_int(
            r, f"{field}.original_max_position_embeddings", block, "original_max_position_embeddings", max_pos
        ),
    )
    if scaling.high_freq_factor <= scaling.low_freq_factor:
        raise r.fail(
            f"{field}.high_freq_factor",
            f"must exceed low_freq_factor ({scaling.low_freq_factor}), got {scaling.high_freq_factor}",
        )
    return theta, scaling


def _sub_float(r: _Reader, field: str, block: Mapping[str, Any], key: str, default: Any = _MISSING) -> float:
    try:
        return r.float_(key, default, raw=block)
    except UserError as exc:
        raise r.fail(field, exc.message) from None


def _sub_int(r: _Reader, field: str, block: Mapping[str, Any], key: str, default: Any = _MISSING) -> int:
    try:
        return int(r.int_(key, default, raw=block))
    except UserError as exc:
        raise r.fail(field, exc.message) from None
