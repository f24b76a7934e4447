"""An EAGLE-3 draft's config.json: the shape it implies and the target layers it names (no torch, no numpy).

What the keys mean, which runtime reads which, and what is refused: `builder.speculative.eagle3.checkpoint` (module
docstring) and docs/eagle3-checkpoints.md. RoPE is the draft's own (no `rope_theta`: 10000). YaRN is refused (see
`refuse_yarn`): every serving runtime applies the draft config's rope_scaling, so a YaRN config would be served on
other RoPE than our engines and the torch reference run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from builder.errors import UserError
from builder.model.config import LlamaConfig, read_json_object

ARCHITECTURE = "LlamaForCausalLMEagle3"
# what we write, what vLLM's registry also maps, and SafeAILab's training template (`eagle/traineagle3/config.json`)
ARCHITECTURES = (ARCHITECTURE, "Eagle3LlamaForCausalLM", "LlamaForCausalLM")
VARIANT_FLAGS = (
    "norm_before_fc",
    "fc_norm",
    "norm_output",
    "return_hidden_post_norm",
    "eh_proj_before_attn",
    "norm_before_residual",
)
MODELOPT_PREFIX, SAFEAILAB_PREFIX = "layers.0.", "midlayer."
AUX_KEY = "eagle_aux_hidden_state_layer_ids"  # modelopt / SGLang under eagle_config (output-of-layer); vLLM top-level
SEMANTICS_KEY = "eagle_aux_layer_semantics"  # vLLM: "vllm" (input-of-layer, default) or "sglang" (output-of-layer)


@dataclass(frozen=True)
class DraftShape:
    """What a draft's config.json says."""

    cfg: LlamaConfig  # the draft layer (hidden_size H, heads, intermediate, RoPE, vocab_size V = the target's)
    target_hidden: int  # Ht: fc takes 3·Ht
    draft_vocab: int  # Vd: rows of its LM head
    aux_layers: tuple[int, ...] | None  # the output-of-layer ids it names (eagle_config, or vLLM's key converted)

    @property
    def own_embedding(self) -> bool:
        """A draft narrower or wider than its target cannot share the target's embedding: it carries its own
        (SafeAILab `cnets.py` loads the target's only without `target_hidden_size`)."""
        return self.target_hidden != self.cfg.hidden_size


def _refuse(key: str, message: str, source: str, allowed: str) -> UserError:
    return UserError(message, location=source, field=key, allowed=allowed)


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_config(raw: dict[str, Any], source: str) -> DraftShape:
    """The shape of an EAGLE-3 draft from its config.json (module docstring); UserError naming the key."""
    arch = raw.get("architectures")
    if arch is not None and (not isinstance(arch, list) or len(arch) != 1 or arch[0] not in ARCHITECTURES):
        raise _refuse(
            "architectures", f"not an EAGLE-3 draft config: architectures {arch!r}", source, str(ARCHITECTURES)
        )
    eagle = raw.get("eagle_config") or {}
    if not isinstance(eagle, dict):
        raise UserError("eagle_config must be an object", location=source, field="eagle_config")
    for key in VARIANT_FLAGS:
        if raw.get(key) or eagle.get(key):
            where = key if raw.get(key) else f"eagle_config.{key}"
            raise _refuse(
                where,
                f"{key}: true changes the draft's math (an 'EAGLE-3.1' variant): not implemented",
                source,
                "false or absent",
            )
    if eagle.get("use_aux_hidden_state") is False:
        raise _refuse(
            "eagle_config.use_aux_hidden_state",
            "an EAGLE draft without aux hidden states (no fc over three target features) is not EAGLE-3",
            source,
            "true or absent",
        )
    if raw.get("bias"):
        raise _refuse("bias", "a biased fc is not EAGLE-3's (SafeAILab's fc has no bias)", source, "false or absent")
    if raw.get("tie_word_embeddings"):
        raise _refuse(
            "tie_word_embeddings", "an EAGLE-3 draft has its own LM head over its draft vocabulary", source, "false"
        )
    if raw.get("num_hidden_layers", 1) != 1:
        raise _refuse("num_hidden_layers", "EAGLE-3 drafts of more than one layer are not implemented", source, "1")
    llama = {k: v for k, v in raw.items() if k not in ("architectures", "eagle_config", "draft_vocab_size")}
    llama["architectures"] = ["LlamaForCausalLM"]
    scaling = llama.get("rope_scaling")
    if "rope_parameters" not in llama and not (isinstance(scaling, dict) and "rope_theta" in scaling):
        llama.setdefault("rope_theta", 10000.0)  # HF LlamaConfig's default, what every runtime applies
    refuse_yarn(llama, source)
    cfg = LlamaConfig.from_hf_dict(llama, source)
    target_hidden = raw.get("target_hidden_size", cfg.hidden_size)
    if not _int(target_hidden) or target_hidden < 1:
        raise _refuse(
            "target_hidden_size", f"target_hidden_size {target_hidden!r} is not a width", source, "a positive int"
        )
    vd = raw.get("draft_vocab_size", cfg.vocab_size)
    if vd is None:
        vd = cfg.vocab_size
    if not _int(vd) or not 1 <= vd <= cfg.vocab_size:
        raise _refuse(
            "draft_vocab_size",
            f"draft_vocab_size {vd!r} is not a size within the vocabulary",
            source,
            f"1..{cfg.vocab_size}",
        )
    return DraftShape(cfg, int(target_hidden), vd, config_aux_layers(raw, eagle, source))


YARN_FIX = "eagle_export_rope_scaling={}"


def refuse_yarn(llama: Mapping[str, Any], source: str) -> None:
    """YaRN RoPE in a draft's config is refused, naming the key. Why not supported: modelopt's export injects it by
    default (`EagleConfig.eagle_export_rope_scaling` = yarn, factor 32, original 2048, applied when the draft was
    trained with rope_type "default": modelopt `export/plugins/hf_spec_export.py`) over a draft trained with plain
    RoPE, and every serving runtime honours the draft config's RoPE (TensorRT-LLM `Eagle3Attention`:
    `RopeParams.from_config(config)`, modeling_speculative.py@00679c66; vLLM and SGLang build the midlayer's attention
    from the draft config through their Llama layer, llama_eagle3.py@00bd1493 / @03d5a777). YaRN divides the low
    frequencies by its factor and scales cos/sin by its mscale at every position, inside the original window too:
    served that way the draft runs other math than it was trained with, and than our engines, which implement
    default and llama3 RoPE only. The fix keeps the training RoPE: re-export with eagle_export_rope_scaling={}, or
    delete the injected block from config.json (modelopt writes rope_theta beside it)."""
    for key in ("rope_scaling", "rope_parameters"):
        block = llama.get(key)
        if isinstance(block, dict) and (block.get("rope_type") or block.get("type")) == "yarn":
            raise _refuse(
                f"{key}.rope_type",
                f"YaRN RoPE ({key}: {dict(block)}) is not supported for EAGLE-3 drafts: the serving runtimes apply "
                "it, our engines do not. modelopt's export injects it by default over a draft trained with plain "
                f"RoPE: re-export with {YARN_FIX}, or delete {key} from config.json to serve the RoPE it was "
                "trained with",
                source,
                "default, llama3 (re-export with eagle_export_rope_scaling={})",
            )


def _id_list(value: Any, field: str, source: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(_int(i) for i in value):
        raise _refuse(field, f"{value!r} is not a list of layer ids", source, "three distinct layer ids")
    if len(value) != 3 or len(set(value)) != 3:
        raise _refuse(
            field,
            f"{value} must be three distinct layers (fc takes three target features)",
            source,
            "three distinct layer ids",
        )
    return tuple(value)


def config_aux_layers(raw: Mapping[str, Any], eagle: Mapping[str, Any], source: str) -> tuple[int, ...] | None:
    """The output-of-layer aux ids a config.json names: eagle_config's as they are (modelopt, SGLang), vLLM's
    top-level key converted from input-of-layer ids (unless it declares `eagle_aux_layer_semantics: "sglang"`);
    both present must agree. Ascending: every runtime concatenates the features in layer order."""
    ids = None
    if eagle.get(AUX_KEY) is not None:
        ids = _id_list(eagle[AUX_KEY], f"eagle_config.{AUX_KEY}", source)
    if raw.get(AUX_KEY) is not None:
        semantics = raw.get(SEMANTICS_KEY, "vllm")
        if semantics not in ("vllm", "sglang"):
            raise _refuse(SEMANTICS_KEY, f"unknown semantics {semantics!r}", source, "vllm, sglang")
        top = _id_list(raw[AUX_KEY], AUX_KEY, source)
        top = top if semantics == "sglang" else output_of_layer(top)
        if min(top) < 0:
            raise _refuse(AUX_KEY, f"{list(raw[AUX_KEY])} names the embeddings (input of layer 0)", source, "ids ≥ 1")
        if ids is not None and sorted(ids) != sorted(top):
            raise _refuse(
                AUX_KEY,
                f"top-level {list(raw[AUX_KEY])} ({semantics} semantics) is output-of-layer {sorted(top)}, "
                f"eagle_config's is {list(ids)}",
                source,
                f"{list(input_of_layer(tuple(sorted(ids))))} or absent",
            )
        ids = ids if ids is not None else top
    if ids is not None and min(ids) < 0:
        raise _refuse(f"eagle_config.{AUX_KEY}", f"{list(ids)} holds a negative layer id", source, "ids ≥ 0")
    return None if ids is None else tuple(sorted(ids))


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
    """The aux ids a recipe runs with, ascending (every runtime concatenates the features in layer order): the
    recipe's, else the checkpoint's, else upstream's default. Every id must name one of the target's layers, and the
    recipe's must be the checkpoint's (as sets) — UserError naming speculative.aux_layers."""
    field = "speculative.aux_layers"
    allowed = f"three distinct ids in 0..{num_layers - 1}"

    def in_range(ids, whose: str) -> tuple[int, int, int]:
        ids = tuple(sorted(int(i) for i in ids))
        if len(ids) != 3 or len(set(ids)) != 3 or min(ids) < 0 or max(ids) >= num_layers:
            raise UserError(
                f"{whose} {list(ids)} must be three distinct layers of the {num_layers}-layer target",
                location=source,
                field=field,
                allowed=allowed,
            )
        return ids  # type: ignore[return-value]

    if recipe is not None:
        ids = in_range(recipe, "aux_layers")
        if checkpoint is not None and ids != tuple(sorted(checkpoint)):
            raise UserError(
                f"aux_layers {list(ids)} differ from the draft's eagle_config ids {list(checkpoint)} (both "
                "output-of-layer): the draft was trained on the latter",
                location=source,
                field=field,
                allowed=f"{list(checkpoint)} or null",
            )
        return ids
    if checkpoint is not None:
        return in_range(checkpoint, "the draft's eagle_config ids")
    default = default_aux_layers(num_layers)
    if default is None:
        raise UserError(
            f"a {num_layers}-layer target has no upstream default aux layers (it needs more than 5 layers): "
            "name three output-of-layer ids",
            location=source,
            field=field,
            allowed=allowed,
        )
    return default
