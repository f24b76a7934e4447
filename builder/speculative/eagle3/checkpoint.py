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
    d2t                            [Vd] int64 (target = draft + d2t) d2t int64, only when Vd < V
    t2d                            [V] bool (membership)            (never written)
    embed_tokens.weight            [V, H] optional (the target's;   (never written)
                                   required when H ≠ Ht)

Weights may be stored as float32, float16 or bfloat16 (loading casts them to the model's dtype); d2t as int64
(SafeAILab, modelopt) or int32 (TensorRT-LLM's own parameter); t2d as bool, and when present it must be exactly
the membership d2t implies.

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
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from builder.errors import UserError
from builder.model.config import LlamaConfig, read_json_object
from builder.model.pickled import EAGLE3

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
OPTIONAL = frozenset({"embed_tokens.weight", "t2d", "d2t"})
AUX_KEY = "eagle_aux_hidden_state_layer_ids"  # modelopt / SGLang under eagle_config (output-of-layer); vLLM top-level
SEMANTICS_KEY = "eagle_aux_layer_semantics"  # vLLM: "vllm" (input-of-layer, default) or "sglang" (output-of-layer)
# safetensors header dtype names (`dtype` of each entry) each kind of tensor may be stored as
FLOAT_DTYPES = ("F32", "F16", "BF16")
D2T_DTYPES = ("I64", "I32")
T2D_DTYPES = ("BOOL",)


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
    _refuse_yarn(llama, source)
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


def _refuse_yarn(llama: dict[str, Any], source: str) -> None:
    for key in ("rope_scaling", "rope_parameters"):
        block = llama.get(key)
        if isinstance(block, dict) and (block.get("rope_type") or block.get("type")) == "yarn":
            raise _refuse(
                f"{key}.rope_type",
                "YaRN RoPE is not implemented for EAGLE-3 drafts. modelopt's export writes it by default "
                "(eagle_export_rope_scaling: yarn, factor 32) over a draft trained with plain RoPE; export with "
                "eagle_export_rope_scaling: {} to keep the training RoPE",
                source,
                "default, llama3",
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


def check_entries(
    entries: Mapping[str, tuple[tuple[int, ...], str]], shape: DraftShape, source: str
) -> dict[str, tuple[tuple[int, ...], str]]:
    """A checkpoint's tensors as {stored key: (shape, safetensors dtype name)} against its config.json: the key set
    of either layout (not both), every shape, every dtype; returns them under SafeAILab's names. No torch."""
    table = {canonical_name(k): v for k, v in entries.items()}
    if len(table) != len(entries):
        raise UserError("the draft holds both midlayer.* and layers.0.* tensors", location=source, field="midlayer")
    expected = expected_shapes(shape)
    optional = OPTIONAL - {"embed_tokens.weight"} if shape.own_embedding else OPTIONAL
    missing = sorted(expected.keys() - table.keys() - optional)
    if missing:
        why = (
            " (a draft of another width than its target carries its own embedding)"
            if missing[0].startswith("embed")
            else ""
        )
        raise UserError(f"missing key(s): {', '.join(missing[:8])}{why}", location=source, field=missing[0])
    for key in sorted(table):
        dims, dtype = table[key]
        if key not in expected:
            raise _refuse(key, f"unexpected key {key!r}", source, "the EAGLE-3 draft keys implied by config.json")
        if tuple(dims) != expected[key]:
            raise UserError(
                f"wrong shape for {key!r}: {tuple(dims)}, config.json implies {expected[key]}",
                location=source,
                field=key,
            )
        allowed = D2T_DTYPES if key == "d2t" else T2D_DTYPES if key == "t2d" else FLOAT_DTYPES
        if dtype not in allowed:
            raise _refuse(key, f"{key} is stored as {dtype}", source, ", ".join(allowed))
    if "d2t" not in table and shape.draft_vocab != shape.cfg.vocab_size:
        raise UserError(
            f"a draft vocabulary of {shape.draft_vocab} < {shape.cfg.vocab_size} tokens needs d2t",
            location=source,
            field="d2t",
        )
    return table


def check_vocab_map(d2t, t2d, vocab_size: int, source: str) -> None:
    """d2t [Vd] (numpy ints) must map draft ids to distinct, ascending target ids inside the vocabulary; t2d [V]
    (numpy bool, optional) must be exactly their membership (SafeAILab `traineagle3/cnets.py`: t2d[j] = j ∈ used)."""
    import numpy as np

    ids = np.arange(len(d2t), dtype=np.int64) + np.asarray(d2t, dtype=np.int64)
    bad = np.flatnonzero((ids < 0) | (ids >= vocab_size))
    if len(bad):
        raise UserError(
            f"d2t maps draft id {int(bad[0])} to token {int(ids[bad[0]])}, outside the target's vocabulary",
            location=source,
            field="d2t",
            allowed=f"draft id + d2t in 0..{vocab_size - 1}",
        )
    if len(ids) > 1 and not bool((ids[1:] > ids[:-1]).all()):
        raise UserError(
            "d2t does not map the draft vocabulary to distinct ascending target ids",
            location=source,
            field="d2t",
            allowed="draft id + d2t strictly increasing",
        )
    if t2d is not None:
        member = np.zeros(vocab_size, dtype=bool)
        member[ids] = True
        differ = np.flatnonzero(member != np.asarray(t2d, dtype=bool))
        if len(differ):
            j = int(differ[0])
            raise UserError(
                f"t2d[{j}] is {bool(t2d[j])} but d2t {'maps' if member[j] else 'does not map'} a draft id to token {j} "
                f"({len(differ)} token(s) differ)",
                location=source,
                field="t2d",
                allowed="t2d[j] = (j is draft id + d2t for some draft id)",
            )


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
    if not isinstance(header, dict):
        raise UserError("not a safetensors file (header is not an object)", location=str(file))
    header.pop("__metadata__", None)
    return header


def header_entries(header: Mapping[str, Any]) -> dict[str, tuple[tuple[int, ...], str]]:
    """{name: (shape, dtype)} of a safetensors header."""
    return {k: (tuple(v["shape"]), str(v["dtype"])) for k, v in header.items()}


_NUMPY = {"I64": "<i8", "I32": "<i4", "BOOL": "|b1"}


def read_small_tensor(file: Path, header: Mapping[str, Any], key: str):
    """One integer/bool tensor of a safetensors file as numpy (d2t, t2d), read without torch."""
    import numpy as np

    entry = header[key]
    start, end = entry["data_offsets"]
    with open(file, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        f.seek(8 + n + start)
        data = f.read(end - start)
    return np.frombuffer(data, dtype=_NUMPY[entry["dtype"]]).reshape(entry["shape"])


def check_folder_header(
    folder: Path, shape: DraftShape, source: str | None = None
) -> dict[str, tuple[tuple[int, ...], str]] | None:
    """The folder's model.safetensors against its config.json without torch: keys, shapes, dtypes, and d2t/t2d's
    values (`check_vocab_map`). None when the folder has no safetensors file (a pickle is read at load time)."""
    file = folder / EAGLE3.weights
    if not file.is_file():
        return None
    header = safetensors_header(file)
    stored = header_entries(header)
    table = check_entries(stored, shape, source or str(file))
    if "d2t" in table:
        t2d = read_small_tensor(file, header, "t2d") if "t2d" in header else None
        check_vocab_map(read_small_tensor(file, header, "d2t"), t2d, shape.cfg.vocab_size, str(file))
    return table


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
