"""EAGLE-3 draft checkpoints: the shape a `config.json` implies, and the two names of its tensors.

No torch here (`trtspec validate` reads these rules; numpy only inside `check_vocab_map`'s callers). Two layouts
carry the same tensors (`docs/eagle3-checkpoints.md` has the table with every runtime's names, file@commit):

    SafeAILab (EAGLE `eagle/traineagle3/cnets.py`; what we write)   modelopt 0.47 export (`hf_spec_export.py`)
    fc.weight                      [H, 3·Ht]                        fc.weight
    midlayer.self_attn.q_proj      [nH·D, 2H]  (k, v: [nKV·D, 2H])  layers.0.self_attn.q_proj …
    midlayer.self_attn.o_proj      [H, nH·D]                        layers.0.self_attn.o_proj
    midlayer.mlp.{gate,up,down}_proj                                layers.0.mlp.…
    midlayer.{input_layernorm,hidden_norm,post_attention_layernorm}  layers.0.…
    norm.weight                    [H]                              norm.weight
    lm_head.weight                 [Vd, H]                          lm_head.weight (the target's when Vd = V)
    d2t                            [Vd] int64 (target = draft + d2t) d2t int64, only when Vd < V (most frequent first)
    t2d                            [V] bool (membership)            (never written)
    embed_tokens.weight            [V, H] optional (the target's;   (never written)
                                   required when H ≠ Ht)

Weights may be stored as float32, float16 or bfloat16 (loading casts them to the model's dtype); d2t as int64
(SafeAILab, modelopt) or int32 (TensorRT-LLM's own parameter); t2d as bool, and when present it must be exactly
the membership d2t implies. d2t may list the draft vocabulary in any order (SafeAILab ascending, modelopt most
frequent first); loading renumbers it ascending with the LM head rows (`vocab_map`).

`config.json`: a Llama config of the one draft layer (`architectures: ["LlamaForCausalLMEagle3"]`; SafeAILab's
training template `eagle/traineagle3/config.json` says `LlamaForCausalLM`, also read) plus `draft_vocab_size`
(absent: the whole vocabulary; we always write it — TensorRT-LLM's two-model flow detects EAGLE-3 by it),
optional `target_hidden_size` (absent: hidden_size; when it differs, the draft carries its own `embed_tokens`, as
SafeAILab's Llama 3.3 70B draft does) and the aux layer ids in output-of-layer ids under
`eagle_config.eagle_aux_hidden_state_layer_ids` (modelopt, SGLang). vLLM reads a top-level
`eagle_aux_hidden_state_layer_ids` in input-of-layer ids (one more) unless `eagle_aux_layer_semantics: "sglang"`;
read here too, converted, and it must agree with eagle_config's. RoPE is the draft's own: no `rope_theta` means
10000 (upstream's official 8B draft has none). `torch_dtype` is not trusted (modelopt 0.47 writes its default
"bfloat16" over float32 weights): the stored dtype is what loads. Variant flags that change the math
("EAGLE-3.1": `norm_before_fc`, `fc_norm`, `norm_output`/`return_hidden_post_norm`, `eh_proj_before_attn`,
`norm_before_residual` true), a biased fc (`bias`), tied embeddings, `use_aux_hidden_state: false` and YaRN RoPE
(modelopt's default `eagle_export_rope_scaling`) are refused naming the key.

The rules live by idea in `draft_config` (config.json, aux layer ids), `draft_tensors` (keys, shapes, dtypes, the
safetensors header) and `vocab_map` (d2t, t2d); this module keeps their names importable from here and holds the
method's recipe check (`check_recipe`, reached by the dotted path in `method.py`).
"""

from __future__ import annotations

from typing import Any

from builder.errors import UserError
from builder.model.pickled import EAGLE3
from builder.speculative.eagle3.draft_config import (
    ARCHITECTURE,
    ARCHITECTURES,
    AUX_KEY,
    SEMANTICS_KEY,
    VARIANT_FLAGS,
    YARN_FIX,
    DraftShape,
    config_aux_layers,
    default_aux_layers,
    input_of_layer,
    output_of_layer,
    parse_config,
    read_shape,
    refuse_yarn,
    resolve_aux_layers,
)
from builder.speculative.eagle3.draft_tensors import (
    D2T_DTYPES,
    FLOAT_DTYPES,
    MODELOPT_PREFIX,
    OPTIONAL,
    SAFEAILAB_PREFIX,
    T2D_DTYPES,
    canonical_name,
    check_entries,
    check_fc_width,
    check_folder_header,
    expected_shapes,
    header_entries,
    read_small_tensor,
    safetensors_header,
)
from builder.speculative.eagle3.vocab_map import check_vocab_map, in_target_order

__all__ = [
    "ARCHITECTURE",
    "ARCHITECTURES",
    "AUX_KEY",
    "D2T_DTYPES",
    "EAGLE3",
    "FLOAT_DTYPES",
    "MODELOPT_PREFIX",
    "OPTIONAL",
    "SAFEAILAB_PREFIX",
    "SEMANTICS_KEY",
    "T2D_DTYPES",
    "VARIANT_FLAGS",
    "YARN_FIX",
    "DraftShape",
    "canonical_name",
    "check_entries",
    "check_fc_width",
    "check_folder_header",
    "check_recipe",
    "check_vocab_map",
    "config_aux_layers",
    "default_aux_layers",
    "expected_shapes",
    "header_entries",
    "in_target_order",
    "input_of_layer",
    "output_of_layer",
    "parse_config",
    "read_shape",
    "read_small_tensor",
    "refuse_yarn",
    "resolve_aux_layers",
    "safetensors_header",
]


# -- the method's check of a recipe against its checkpoint (`method.METHOD.draft.check_config`) --


def check_recipe(c: Any, cfg: dict[str, Any], checks: Any) -> None:
    """The recipe against the draft's config.json (aux ids: recipe, checkpoint, upstream default; widths) and, when
    the folder holds model.safetensors, its header and vocabulary map (keys, shapes, dtypes, fc width, d2t/t2d) —
    all without torch. `c`: the recipe's Eagle3Config; `checks`: `builder.speculative.method.Checks`."""
    source = "config.json" if checks.folder is None else str(checks.folder / "config.json")
    try:
        shape = parse_config(cfg, source)
    except UserError as exc:
        checks.add(_field("speculative.checkpoint", exc), _where(exc), allowed=exc.allowed)
        return
    if checks.folder is not None:
        try:
            check_folder_header(checks.folder, shape)
        except UserError as exc:
            checks.add(_field("speculative.checkpoint", exc), _where(exc), allowed=exc.allowed)
    arch = checks.arch or checks.recipe.model.architecture
    if arch is None:
        return
    try:
        resolve_aux_layers(c.aux_layers, shape.aux_layers, arch.num_layers, source)
    except UserError as exc:
        checks.add(("speculative", "aux_layers"), exc.message, allowed=exc.allowed)
    if shape.target_hidden != arch.hidden_size:
        checks.add(
            ("speculative", "checkpoint", "fc.weight"),
            f"the draft's fc takes 3 × {shape.target_hidden} (target_hidden_size), the target is "
            f"{arch.hidden_size} wide: it must take 3 × {arch.hidden_size}",
            allowed=f"fc.weight [{shape.cfg.hidden_size}, {3 * arch.hidden_size}]",
        )
    if shape.cfg.vocab_size != arch.vocab_size:
        checks.add(
            ("speculative", "checkpoint", "vocab_size"),
            f"the draft's vocab_size {shape.cfg.vocab_size} differs from the target's {arch.vocab_size}",
            allowed=str(arch.vocab_size),
        )


def _where(exc: UserError) -> str:
    return f"{exc.location}: {exc.message}" if exc.location else exc.message


def _field(prefix: str, exc: UserError) -> tuple[str, ...]:
    """The recipe field of a checkpoint problem: speculative.checkpoint + the checkpoint's own key."""
    return tuple(prefix.split(".")) + ((exc.field,) if exc.field else ())
