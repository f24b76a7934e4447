"""EAGLE-3 draft checkpoints: the shape a `config.json` implies, and the two names of its tensors.

No torch here (`trtspec validate` reads these rules). Two layouts carry the same tensors (`../shared/EAGLE3.md` §1):

    SafeAILab (EAGLE `eagle/traineagle3/cnets.py`; what we write)   modelopt export (`hf_spec_export.py`)
    fc.weight                      [H, 3·Ht]                        fc.weight
    midlayer.self_attn.q_proj      [nH·D, 2H]  (k, v: [nKV·D, 2H])  layers.0.self_attn.q_proj …
    midlayer.self_attn.o_proj      [H, nH·D]                        layers.0.self_attn.o_proj
    midlayer.mlp.{gate,up,down}_proj                                layers.0.mlp.…
    midlayer.{input_layernorm,hidden_norm,post_attention_layernorm}  layers.0.…
    norm.weight                    [H]                              norm.weight
    lm_head.weight                 [Vd, H]                          lm_head.weight
    d2t                            [Vd] int64 (target = draft + d2t) d2t (absent when Vd = V)
    t2d                            [V] bool (membership)            (never written)
    embed_tokens.weight            [V, H] optional (the target's)   (never written)

`config.json`: a Llama config of the one draft layer (`architectures: ["LlamaForCausalLMEagle3"]`) plus
`draft_vocab_size` (absent: the whole vocabulary), optional `target_hidden_size` (absent: hidden_size) and
`eagle_config.eagle_aux_hidden_state_layer_ids` in output-of-layer ids (modelopt, TensorRT-LLM, SGLang). RoPE is the
draft's own: no `rope_theta` means 10000 (upstream's official 8B draft has none). Variant flags that change the math
("EAGLE-3.1": `norm_before_fc`, `fc_norm`, `norm_output`, `return_hidden_post_norm`, `eh_proj_before_attn`,
`norm_before_residual` true) are refused naming the key.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.errors import UserError
from builder.model.config import LlamaConfig, read_json_object
from builder.model.pickled import Layout

ARCHITECTURE = "LlamaForCausalLMEagle3"
EAGLE3 = Layout("EAGLE-3", ("model.safetensors",), ("pytorch_model.bin",))
VARIANT_FLAGS = (
    "norm_before_fc",
    "fc_norm",
    "norm_output",
    "return_hidden_post_norm",
    "eh_proj_before_attn",
    "norm_before_residual",
)
MODELOPT_PREFIX, SAFEAILAB_PREFIX = "layers.0.", "midlayer."
OPTIONAL = frozenset({"embed_tokens.weight", "t2d", "d2t"})


@dataclass(frozen=True)
class DraftShape:
    """What a draft's config.json says."""

    cfg: LlamaConfig  # the draft layer (hidden_size H, heads, intermediate, RoPE, vocab_size V = the target's)
    target_hidden: int  # Ht: fc takes 3·Ht
    draft_vocab: int  # Vd: rows of its LM head
    aux_layers: tuple[int, ...] | None  # eagle_config's output-of-layer ids, if it names them


def parse_config(raw: dict[str, Any], source: str) -> DraftShape:
    """The shape of an EAGLE-3 draft from its config.json (module docstring); UserError naming the key."""
    arch = raw.get("architectures")
    if arch is not None and (not isinstance(arch, list) or not arch or "Eagle3" not in str(arch[0])):
        raise UserError(
            f"not an EAGLE-3 draft config: architectures {arch!r}",
            location=source,
            field="architectures",
            allowed=f'["{ARCHITECTURE}"] (or "Eagle3LlamaForCausalLM")',
        )
    eagle = raw.get("eagle_config") or {}
    if not isinstance(eagle, dict):
        raise UserError("eagle_config must be an object", location=source, field="eagle_config")
    for key in VARIANT_FLAGS:
        if raw.get(key) or eagle.get(key):
            raise UserError(
                f"{key}: true changes the draft's math (an 'EAGLE-3.1' variant) and is not implemented",
                location=source,
                field=key,
                allowed="false or absent",
            )
    if int(raw.get("num_hidden_layers", 1)) != 1:
        raise UserError(
            "EAGLE-3 drafts of more than one layer are not implemented",
            location=source,
            field="num_hidden_layers",
            allowed="1",
        )
    llama = {k: v for k, v in raw.items() if k not in ("architectures", "eagle_config", "draft_vocab_size")}
    llama["architectures"] = ["LlamaForCausalLM"]
    llama.setdefault("rope_theta", 10000.0)
    cfg = LlamaConfig.from_hf_dict(llama, source)
    target_hidden = raw.get("target_hidden_size") or cfg.hidden_size
    vd = raw.get("draft_vocab_size", cfg.vocab_size)
    if not isinstance(vd, int) or not 1 <= vd <= cfg.vocab_size:
        raise UserError(
            f"draft_vocab_size {vd!r} is not a size within the vocabulary",
            location=source,
            field="draft_vocab_size",
            allowed=f"1..{cfg.vocab_size}",
        )
    ids = eagle.get("eagle_aux_hidden_state_layer_ids")
    if ids is not None and (not isinstance(ids, list) or not all(isinstance(i, int) for i in ids)):
        raise UserError(
            "eagle_aux_hidden_state_layer_ids must be a list of layer ids",
            location=source,
            field="eagle_config.eagle_aux_hidden_state_layer_ids",
        )
    return DraftShape(cfg, int(target_hidden), vd, None if ids is None else tuple(ids))


def read_shape(folder: Path) -> DraftShape:
    return parse_config(read_json_object(folder / "config.json"), str(folder / "config.json"))


def default_aux_layers(num_layers: int) -> tuple[int, int, int] | None:
    """Upstream's default ids (output-of-layer) for an N-layer target: {1, N/2-1, N-4}; None where they are not three
    distinct layers (N ≤ 5: TensorRT-LLM raises, modelopt collapses them, SafeAILab's give two)."""
    if num_layers <= 5:
        return None
    ids = (1, num_layers // 2 - 1, num_layers - 4)
    return ids if len(set(ids)) == 3 else None


def input_of_layer(ids: tuple[int, ...]) -> tuple[int, ...]:
    """Output-of-layer ids (ours) as input-of-layer ids (SafeAILab's reference, vLLM's top-level key): +1."""
    return tuple(i + 1 for i in ids)


def output_of_layer(ids: tuple[int, ...]) -> tuple[int, ...]:
    """Input-of-layer ids as output-of-layer ids (ours): -1."""
    return tuple(i - 1 for i in ids)


def resolve_aux_layers(
    recipe: list[int] | tuple[int, ...] | None, checkpoint: tuple[int, ...] | None, num_layers: int, source: str
) -> tuple[int, int, int]:
    """The aux ids a recipe runs with: the recipe's, else the checkpoint's, else upstream's default; the two given
    must agree and every id must name one of the target's layers (UserError naming speculative.aux_layers)."""
    field = "speculative.aux_layers"
    if recipe is not None and checkpoint is not None and tuple(recipe) != tuple(checkpoint):
        raise UserError(
            f"aux_layers {list(recipe)} differ from the draft's eagle_config ids {list(checkpoint)} (both "
            "output-of-layer): the draft was trained on the latter",
            location=source,
            field=field,
            allowed=f"{list(checkpoint)} or null",
        )
    ids = recipe if recipe is not None else checkpoint
    if ids is None:
        ids = default_aux_layers(num_layers)
        if ids is None:
            raise UserError(
                f"a {num_layers}-layer target has no upstream default aux layers (it needs more than 5 layers): "
                "name three output-of-layer ids",
                location=source,
                field=field,
                allowed=f"three distinct ids in 0..{num_layers - 1}",
            )
    ids = tuple(int(i) for i in ids)
    if len(ids) != 3 or len(set(ids)) != 3 or min(ids) < 0 or max(ids) >= num_layers:
        raise UserError(
            f"aux_layers {list(ids)} must be three distinct layers of the {num_layers}-layer target",
            location=source,
            field=field,
            allowed=f"three distinct ids in 0..{num_layers - 1}",
        )
    return ids  # type: ignore[return-value]


def expected_shapes(shape: DraftShape) -> dict[str, tuple[int, ...]]:
    """Every key of the SafeAILab layout with its shape (module docstring)."""
    c = shape.cfg
    H, D, I, V = c.hidden_size, c.head_dim, c.intermediate_size, c.vocab_size
    m = SAFEAILAB_PREFIX
    return {
        "fc.weight": (H, 3 * shape.target_hidden),
        m + "self_attn.q_proj.weight": (c.num_attention_heads * D, 2 * H),
        m + "self_attn.k_proj.weight": (c.num_key_value_heads * D, 2 * H),
        m + "self_attn.v_proj.weight": (c.num_key_value_heads * D, 2 * H),
        m + "self_attn.o_proj.weight": (H, c.num_attention_heads * D),
        m + "mlp.gate_proj.weight": (I, H),
        m + "mlp.up_proj.weight": (I, H),
        m + "mlp.down_proj.weight": (H, I),
        m + "input_layernorm.weight": (H,),
        m + "hidden_norm.weight": (H,),
        m + "post_attention_layernorm.weight": (H,),
        "norm.weight": (H,),
        "lm_head.weight": (shape.draft_vocab, H),
        "d2t": (shape.draft_vocab,),
        "t2d": (V,),
        "embed_tokens.weight": (V, H),
    }


def canonical_name(key: str) -> str:
    """A stored key under SafeAILab's names (modelopt's `layers.0.` → `midlayer.`)."""
    return SAFEAILAB_PREFIX + key[len(MODELOPT_PREFIX) :] if key.startswith(MODELOPT_PREFIX) else key


def safetensors_header(file: Path) -> dict[str, Any]:
    """The safetensors header (name -> {dtype, shape, data_offsets}) without reading the tensors (no torch)."""
    with open(file, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise UserError("not a safetensors file (too short)", location=str(file))
        (n,) = struct.unpack("<Q", head)
        if n > 1 << 28:
            raise UserError("not a safetensors file (header too large)", location=str(file))
        try:
            header = json.loads(f.read(n))
        except ValueError as exc:
            raise UserError(f"not a safetensors file: {exc}", location=str(file)) from exc
    header.pop("__metadata__", None)
    return header


def check_fc_width(folder: Path, shape: DraftShape, target_hidden: int) -> None:
    """fc must take 3 × the target's hidden size (read from the safetensors header when there is one)."""
    file = folder / EAGLE3.weights
    want = (shape.cfg.hidden_size, 3 * target_hidden)
    if file.is_file():
        fc = safetensors_header(file).get("fc.weight")
        if fc is not None and tuple(fc["shape"]) != want:
            raise UserError(
                f"fc.weight is {tuple(fc['shape'])}: an EAGLE-3 draft for this target takes the three "
                f"{target_hidden}-wide hidden states, {want}",
                location=str(file),
                field="fc.weight",
                allowed=str(want),
            )
    if shape.target_hidden != target_hidden:
        raise UserError(
            f"the draft was made for a {shape.target_hidden}-wide target, this one is {target_hidden}-wide",
            location=str(folder / "config.json"),
            field="target_hidden_size",
            allowed=str(target_hidden),
        )
