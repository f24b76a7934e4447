"""What each upstream runtime would load from an EAGLE-3 draft checkpoint — read, not run (none installs here).

One pure function per runtime, `(config.json dict, {stored key: (shape, safetensors dtype)}, Target) -> Loaded`,
mirrors that runtime's module construction (its parameter names and shapes, from the config keys it reads) and its
`load_weights` (its renames, what it fuses, skips or refuses), and says which target layers it would capture —
in our output-of-layer ids, after its own convention — and how it maps draft ids to target ids. Where the runtime
would fail, or would run with a parameter the checkpoint never filled, or with other math than ours (variant
flags), the reader raises `Refusal` naming the key. The sources read, file@commit (the table in
docs/eagle3-checkpoints.md says the same):

- TensorRT-LLM: `tensorrt_llm/_torch/models/modeling_speculative.py`@00679c66c3e38f6d2651ad0a5bef0f94d862e36c
  (`Eagle3DraftModel`, `Eagle3DecoderLayer`, `Eagle3ForCausalLM.load_weights`: `^layers.0.` → `midlayer.`, "model."
  before every key but lm_head, lm_head from the target when the draft has none, `d2t` an int32 parameter only when
  draft_vocab_size ≠ vocab_size, `embed_tokens` only when target_hidden_size ≠ hidden_size),
  `modeling_auto.py`@01bffee125e24ebe5b4a63437840a9422eb70868 (two-model flow: EAGLE-3 detected only by
  `draft_vocab_size`), `_torch/speculative/eagle3.py`@001e67005b4f64b69b0045456870be48ab7b2cf0 (layers to capture:
  the LLM-API option `eagle3_layers_to_capture`, sorted, else {1, N/2-1, N-4}, "Not enough hidden layers" for N ≤ 5;
  captured after layer i: output-of-layer ids). The draft's config ids are not read.
- vLLM: `vllm/model_executor/models/llama_eagle3.py`@00bd1493b3e82d6c13c68ee8a0e1c5a96707e190 (`midlayer.` →
  `layers.0.`, `d2t` → `draft_id_to_target_id`, `t2d` skipped, `embed_tokens` loaded only when present, an unknown
  key is a KeyError, fc = 3 × target_hidden_size, `eagle_config.use_aux_hidden_state`, `norm_before_residual`),
  `vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py`@0cfdd2e15d6991f354c6e22fd7f7e7577afe0424 (ids from the
  top-level `eagle_aux_hidden_state_layer_ids` as they are; eagle_config's are not read; else the model's default),
  `vllm/model_executor/models/llama.py`@e06c9ba2a6ea923a84add30f5dafaea126429b81 (default (2, N/2, N-3); captured
  before layer idx: input-of-layer ids). Some vLLM versions also read `eagle_aux_layer_semantics: "sglang"` (+1).
- SGLang: `python/sglang/srt/models/llama_eagle3.py`@03d5a7771f6082e7737a5f19cae7d1e863087013 (EntryClass
  `LlamaForCausalLMEagle3`; `d2t` → `hot_token_id = d2t + arange`, `t2d` skipped, a key that is not a parameter
  (with or without "model.") skipped silently — so `layers.0.*` never reaches `midlayer`), `models/llama.py`
  @00239548f1cd1a06ca145a5447a86738090a48f1 (ids + 1, default [2, N/2, N-3], captured before layer i),
  `model_executor/model_runner.py`@0005834cdb2a5b7472789ccbf0d3361b5cf853b8 (ids from
  `eagle_config.eagle_aux_hidden_state_layer_ids` only).
- modelopt 0.47 (installed; its loader runs in the tests): `torch/export/plugins/hf_spec_export.py`
  (`EagleExporter._extract_state_dict`: the `eagle_module.` prefix dropped, `LLAMA_EAGLE_SINGLE_LAYER`), and
  `torch/speculative/plugins/modeling_eagle.py` (`EagleModule`: d2t buffer only when draft_vocab_size < vocab_size,
  lm_head only then or with `has_lm_head`), `plugins/hf_eagle.py` (forward hooks on the target's layer outputs in
  layer order, default sorted({1, N/2-1, N-4})).

No torch at module level: these read names and shapes only; the tests compare the tensors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

Entries = Mapping[str, tuple[tuple[int, ...], str]]  # stored key -> (shape, safetensors dtype name)
FLOAT = ("F32", "F16", "BF16")
INDEX = ("I64", "I32")


@dataclass(frozen=True)
class Target:
    """The target model a draft is loaded over."""

    num_layers: int
    hidden_size: int
    vocab_size: int


@dataclass(frozen=True)
class Param:
    """One runtime parameter: its shape, the stored keys that fill it (concatenated along dim 0 in this order: fused
    q/k/v, gate/up) and what it is in our draft (`Eagle3Draft` state_dict names, same order)."""

    shape: tuple[int, ...]
    sources: tuple[str, ...]
    meaning: tuple[str, ...]


@dataclass(frozen=True)
class Loaded:
    """What a runtime would run with."""

    runtime: str
    params: dict[str, Param]
    shared: dict[str, str]  # runtime module -> our name, taken from the target ("embed_tokens.weight")
    ignored: tuple[str, ...]  # stored keys the runtime skips (t2d, a shared embedding, …)
    aux_layers: tuple[int, ...]  # the target features it concatenates, output-of-layer ids, in its order
    draft_vocab: int
    vocab_map: str  # "d2t" (target id = draft id + d2t) or "identity"
    notes: tuple[str, ...] = field(default=())


class Refusal(Exception):
    """The runtime would fail on this checkpoint, or run it with other weights or other math than ours."""

    def __init__(self, runtime: str, message: str, key: str | None = None) -> None:
        super().__init__(f"{runtime}: {key + ': ' if key else ''}{message}")
        self.runtime, self.key = runtime, key


@dataclass(frozen=True)
class _Shape:
    """The numbers a runtime reads from the draft's config.json (HF LlamaConfig defaults where it has them)."""

    H: int
    nH: int
    nKV: int
    D: int
    I: int
    V: int
    Vd: int | None  # draft_vocab_size as written (None: absent)
    Ht: int | None  # target_hidden_size as written

    @property
    def vd(self) -> int:
        return self.V if self.Vd is None else self.Vd

    @property
    def ht(self) -> int:
        return self.H if self.Ht is None else self.Ht


def _shape(cfg: Mapping[str, Any]) -> _Shape:
    H, nH = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    return _Shape(
        H=H,
        nH=nH,
        nKV=int(cfg.get("num_key_value_heads") or nH),
        D=int(cfg.get("head_dim") or H // nH),
        I=int(cfg["intermediate_size"]),
        V=int(cfg["vocab_size"]),
        Vd=None if cfg.get("draft_vocab_size") is None else int(cfg["draft_vocab_size"]),
        Ht=None if cfg.get("target_hidden_size") is None else int(cfg["target_hidden_size"]),
    )


def _layer(prefix: str, s: _Shape) -> dict[str, tuple[tuple[int, ...], tuple[str, ...]]]:
    """The draft layer as the serving runtimes build it (fused qkv and gate_up, as their Llama layers):
    runtime name -> (shape, our names in concatenation order)."""
    m = "midlayer."
    return {
        prefix + "self_attn.qkv_proj.weight": (
            ((s.nH + 2 * s.nKV) * s.D, 2 * s.H),
            tuple(m + f"self_attn.{p}_proj.weight" for p in "qkv"),
        ),
        prefix + "self_attn.o_proj.weight": ((s.H, s.nH * s.D), (m + "self_attn.o_proj.weight",)),
        prefix + "mlp.gate_up_proj.weight": ((2 * s.I, s.H), (m + "mlp.gate_proj.weight", m + "mlp.up_proj.weight")),
        prefix + "mlp.down_proj.weight": ((s.H, s.I), (m + "mlp.down_proj.weight",)),
        prefix + "input_layernorm.weight": ((s.H,), (m + "input_layernorm.weight",)),
        prefix + "hidden_norm.weight": ((s.H,), (m + "hidden_norm.weight",)),
        prefix + "post_attention_layernorm.weight": ((s.H,), (m + "post_attention_layernorm.weight",)),
    }


# the stored key each fused part comes from, as the runtimes' stacked_params_mapping (shard suffixes)
_SHARDS = {".qkv_proj.": (".q_proj.", ".k_proj.", ".v_proj."), ".gate_up_proj.": (".gate_proj.", ".up_proj.")}


def _fill(
    runtime: str,
    table: dict[str, tuple[tuple[int, ...], tuple[str, ...]]],
    renamed: Mapping[str, str],  # runtime name a stored key goes to -> the stored key
    entries: Entries,
) -> dict[str, Param]:
    """Each runtime parameter with the stored keys that fill it; a parameter left unfilled, or filled with a wrong
    shape or dtype, is a Refusal (the runtime would fail, or run on its random init)."""
    params = {}
    for name, (shape, meaning) in table.items():
        parts = next((v for k, v in _SHARDS.items() if k in name), None)
        wanted = [name.replace(_fused(name), p) for p in parts] if parts else [name]
        missing = [w for w in wanted if w not in renamed]
        if missing:
            raise Refusal(runtime, f"{missing[0]} is never loaded: the parameter would keep its initial value", name)
        sources = tuple(renamed[w] for w in wanted)
        rows = sum(entries[k][0][0] for k in sources)
        got = (rows, *entries[sources[0]][0][1:])
        if got != shape:
            raise Refusal(runtime, f"stored {list(sources)} make {got}, the runtime builds {shape}", name)
        for k in sources:
            want = INDEX if name.endswith(("d2t", "draft_id_to_target_id")) else FLOAT
            if entries[k][1] not in want:
                raise Refusal(runtime, f"{k} is {entries[k][1]}", name)
        params[name] = Param(shape, sources, meaning)
    return params


def _fused(name: str) -> str:
    return next(k for k in _SHARDS if k in name)


def _variants(runtime: str, cfg: Mapping[str, Any], top: Sequence[str], eagle: Sequence[str]) -> None:
    e = cfg.get("eagle_config") or {}
    for key in top:
        if cfg.get(key):
            raise Refusal(runtime, "true: the runtime would run a variant (other math than the draft's)", key)
    for key in eagle:
        if e.get(key):
            raise Refusal(runtime, "true: the runtime would run a variant (other math)", f"eagle_config.{key}")


def _one_layer(runtime: str, cfg: Mapping[str, Any]) -> None:
    if int(cfg.get("num_hidden_layers", 1)) != 1:
        raise Refusal(runtime, "more than one draft layer (not what we write or run)", "num_hidden_layers")


# --- TensorRT-LLM ---------------------------------------------------------------------------------------------------


def tensorrt_llm(
    cfg: Mapping[str, Any],
    entries: Entries,
    target: Target,
    *,
    layers_to_capture: Sequence[int] | None = None,
    one_model: bool = True,
) -> Loaded:
    """TensorRT-LLM's PyTorch flow (module docstring). `layers_to_capture`: the LLM-API option
    `eagle3_layers_to_capture` (output-of-layer ids); `one_model`: `eagle3_one_model` (default True; the two-model
    flow builds the draft through AutoModelForCausalLM, which detects EAGLE-3 by draft_vocab_size only)."""
    rt = "TensorRT-LLM"
    if not one_model:
        arch = (cfg.get("architectures") or [""])[0]
        if "draft_vocab_size" not in cfg:
            raise Refusal(rt, f"absent: AutoModelForCausalLM resolves {arch!r} as is (not EAGLE-3)", "draft_vocab_size")
        if "EAGLE3" + arch.replace("Eagle3", "") != "EAGLE3LlamaForCausalLM":
            raise Refusal(rt, f"{arch!r} does not resolve to EAGLE3LlamaForCausalLM", "architectures")
    _one_layer(rt, cfg)
    _variants(
        rt,
        cfg,
        ("norm_output", "fc_norm", "bias"),
        ("eh_proj_before_attn", "norm_before_fc", "return_hidden_post_norm"),
    )
    s = _shape(cfg)
    vd = s.vd  # `_ensure_draft_vocab_size`: absent -> vocab_size (a warning)
    if layers_to_capture is None:
        if target.num_layers <= 5:
            raise Refusal(rt, "Not enough hidden layers for default EAGLE3 capture", "eagle3_layers_to_capture")
        layers = (1, target.num_layers // 2 - 1, target.num_layers - 4)
    else:
        layers = tuple(sorted(layers_to_capture))
    if len(set(layers)) != len(layers) or min(layers) < 0 or max(layers) >= target.num_layers:
        raise Refusal(
            rt, f"{list(layers)} are not layers of the {target.num_layers}-layer target", "eagle3_layers_to_capture"
        )
    table = _layer("model.midlayer.", s)
    table["model.fc.weight"] = ((s.H, s.ht * len(layers)), ("fc.weight",))
    table["model.norm.weight"] = ((s.H,), ("norm.weight",))
    table["lm_head.weight"] = ((vd, s.H), ("lm_head.weight",))
    shared: dict[str, str] = {}
    if s.ht != s.H:
        table["model.embed_tokens.weight"] = ((s.V, s.H), ("embed_tokens.weight",))
    else:
        shared["model.embed_tokens"] = "embed_tokens.weight"
    if vd != s.V:
        table["model.d2t"] = ((vd,), ("d2t",))
    renamed = {}
    for key in entries:
        new = re.sub(r"^layers\.0\.", "midlayer.", key)
        renamed["lm_head.weight" if "lm_head" in new else "model." + new] = key
    if "lm_head.weight" not in renamed:  # load_lm_head_from_target
        if (vd, s.H) != (target.vocab_size, target.hidden_size):
            raise Refusal(
                rt,
                f"absent: the target's LM head {(target.vocab_size, target.hidden_size)} is not {(vd, s.H)}",
                "lm_head.weight",
            )
        del table["lm_head.weight"]
        shared["lm_head"] = "lm_head.weight"
    params = _fill(rt, table, renamed, entries)
    used = {k for p in params.values() for k in p.sources}
    return Loaded(
        rt,
        params,
        shared,
        tuple(sorted(set(entries) - used)),
        layers,
        vd,
        "d2t" if vd != s.V else "identity",
    )


# --- vLLM -----------------------------------------------------------------------------------------------------------


def vllm(cfg: Mapping[str, Any], entries: Entries, target: Target, *, semantics: str | None = None) -> Loaded:
    """vLLM's `Eagle3LlamaForCausalLM` (module docstring). `semantics`: `eagle_aux_layer_semantics` of the versions
    that read it ("sglang": the config's ids are output-of-layer); None: the draft config's key, else "vllm"."""
    rt = "vLLM"
    _one_layer(rt, cfg)
    _variants(rt, cfg, ("norm_before_residual",), ())
    e = cfg.get("eagle_config") or {}
    if not e.get("use_aux_hidden_state", True):
        raise Refusal(rt, "false: no fc, no aux hidden states", "eagle_config.use_aux_hidden_state")
    s = _shape(cfg)
    vd = s.vd
    ids = cfg.get("eagle_aux_hidden_state_layer_ids")
    if ids:
        semantics = semantics or cfg.get("eagle_aux_layer_semantics") or "vllm"
        inputs = tuple(i + 1 for i in ids) if semantics == "sglang" else tuple(ids)
    else:  # LlamaForCausalLM.get_eagle3_aux_hidden_state_layers
        inputs = (2, target.num_layers // 2, target.num_layers - 3)
    captured = sorted({i for i in inputs if 0 <= i < target.num_layers})  # `if idx in aux_hidden_state_layers`
    if len(captured) != 3:
        raise Refusal(
            rt,
            f"captures inputs of layers {captured} of the {target.num_layers}-layer target, fc takes 3",
            "eagle_aux_hidden_state_layer_ids",
        )
    if captured[0] == 0:
        raise Refusal(
            rt, "the input of layer 0 is the embedding, not a layer output", "eagle_aux_hidden_state_layer_ids"
        )
    table = _layer("model.layers.0.", s)
    table["model.fc.weight"] = ((s.H, 3 * s.ht), ("fc.weight",))
    table["model.norm.weight"] = ((s.H,), ("norm.weight",))
    table["lm_head.weight"] = ((vd, s.H), ("lm_head.weight",))
    renamed, ignored = {}, []
    for key in entries:
        if "t2d" in key:
            ignored.append(key)
            continue
        if "d2t" in key:
            renamed[key.replace("d2t", "draft_id_to_target_id")] = key
            continue
        new = key if "lm_head" in key else "model." + key
        new = new.replace("midlayer.", "layers.0.")
        renamed[new] = key
    shared: dict[str, str] = {}
    if "model.embed_tokens.weight" in renamed:
        table["model.embed_tokens.weight"] = ((s.V, s.H), ("embed_tokens.weight",))
    elif s.ht != s.H:
        raise Refusal(
            rt,
            f"absent: the target's {target.hidden_size}-wide embedding cannot feed a {s.H}-wide draft",
            "embed_tokens.weight",
        )
    else:
        shared["model.embed_tokens"] = "embed_tokens.weight"
    if "draft_id_to_target_id" in renamed:
        table["draft_id_to_target_id"] = ((vd,), ("d2t",))
    elif vd != s.V:
        raise Refusal(rt, "absent: draft_id_to_target_id stays zeros, draft id j would stand for token j", "d2t")
    for new, key in renamed.items():
        if new not in table and not any(new.replace(p, _fused_name(p)) in table for p in _PARTS):
            raise Refusal(rt, f"KeyError: {new!r} is not a parameter", key)
    params = _fill(rt, table, renamed, entries)
    return Loaded(
        rt,
        params,
        shared,
        tuple(sorted(ignored)),
        tuple(i - 1 for i in captured),
        vd,
        "d2t" if "draft_id_to_target_id" in params else "identity",
    )


_PARTS = (".q_proj.", ".k_proj.", ".v_proj.", ".gate_proj.", ".up_proj.")


def _fused_name(part: str) -> str:
    return ".qkv_proj." if part in (".q_proj.", ".k_proj.", ".v_proj.") else ".gate_up_proj."


# --- SGLang ---------------------------------------------------------------------------------------------------------


def sglang(cfg: Mapping[str, Any], entries: Entries, target: Target) -> Loaded:
    """SGLang's `LlamaForCausalLMEagle3` (module docstring)."""
    rt = "SGLang"
    arch = (cfg.get("architectures") or [""])[0]
    if arch != "LlamaForCausalLMEagle3":
        raise Refusal(rt, f"{arch!r} is not the EntryClass LlamaForCausalLMEagle3", "architectures")
    _one_layer(rt, cfg)
    _variants(rt, cfg, ("bias", "tie_word_embeddings"), ())
    s = _shape(cfg)
    e = cfg.get("eagle_config") or {}
    ids = e.get("eagle_aux_hidden_state_layer_ids")
    inputs = (2, target.num_layers // 2, target.num_layers - 3) if ids is None else tuple(i + 1 for i in ids)
    captured = sorted({i for i in inputs if 0 <= i < target.num_layers})  # `if i in self.layers_to_capture`
    if len(captured) != 3 or captured[0] == 0:
        raise Refusal(
            rt,
            f"captures inputs of layers {captured} of the {target.num_layers}-layer target, fc takes 3 layer outputs",
            "eagle_config.eagle_aux_hidden_state_layer_ids",
        )
    from_target = s.Vd is None  # load_lm_head_from_target
    vd = s.vd
    table = _layer("model.midlayer.", s)
    table["model.fc.weight"] = ((s.H, 3 * s.ht), ("fc.weight",))
    table["model.norm.weight"] = ((s.H,), ("norm.weight",))
    shared: dict[str, str] = {}
    notes: tuple[str, ...] = ()
    if from_target:
        shared["lm_head"] = "lm_head.weight"
        notes = ("no draft_vocab_size: a stored lm_head is replaced by the target's (equal only if it is a copy)",)
        if "lm_head.weight" in entries and entries["lm_head.weight"][0] != (s.V, s.H):
            raise Refusal(
                rt,
                f"{entries['lm_head.weight'][0]} into a ({s.V}, {s.H}) head (draft_vocab_size absent)",
                "lm_head.weight",
            )
    else:
        table["lm_head.weight"] = ((vd, s.H), ("lm_head.weight",))
    if s.ht != s.H:  # set_embed keeps the draft's own
        table["model.embed_tokens.weight"] = ((s.V, s.H), ("embed_tokens.weight",))
    else:
        shared["model.embed_tokens"] = "embed_tokens.weight"
    renamed, ignored = {}, []
    params_names = set(table) | {
        n.replace(_fused(n), p) for n in table if any(k in n for k in _SHARDS) for p in _SHARDS[_fused(n)]
    }
    for key in entries:
        if "d2t" in key:  # hot_token_id, not a parameter
            continue
        if "t2d" in key:
            ignored.append(key)
            continue
        name = key if key in params_names else "model." + key
        if name in params_names:
            renamed[name] = key
        else:
            ignored.append(key)  # skipped without a word
    if "d2t" not in entries and vd != s.V:
        raise Refusal(rt, "absent: no hot_token_id, draft ids would be taken as target ids", "d2t")
    params = _fill(rt, table, renamed, entries)
    if shared.get("model.embed_tokens") and "embed_tokens.weight" in entries:
        ignored.append("embed_tokens.weight")  # set_embed replaces it with the target's
    return Loaded(
        rt,
        params,
        shared,
        tuple(sorted(set(ignored))),
        tuple(i - 1 for i in captured),
        vd,
        "d2t" if "d2t" in entries else "identity",
        notes,
    )


# --- modelopt -------------------------------------------------------------------------------------------------------


def modelopt(cfg: Mapping[str, Any], entries: Entries, target: Target, *, has_lm_head: bool | None = None) -> Loaded:
    """modelopt 0.47's `EagleModule` as its exporter names it (`hf_spec_export.py` `LLAMA_EAGLE_SINGLE_LAYER`, the
    prefix `eagle_module.`): what a strict `load_state_dict` of the checkpoint into the converted model needs (the
    tests run it). SafeAILab's `midlayer.` is modelopt's `layers.0.`. `has_lm_head`: the architecture option (None:
    as modelopt's default, only a reduced vocabulary gets a head of its own)."""
    rt = "modelopt"
    _one_layer(rt, cfg)
    s = _shape(cfg)
    vd = s.vd
    if s.ht != s.H:
        raise Refusal(rt, "EagleModule's fc maps hidden_size features (no target_hidden_size)", "target_hidden_size")
    own_head = vd != s.V or bool(has_lm_head)
    table = _hf_layer("eagle_module.layers.0.", s)
    table["eagle_module.fc.weight"] = ((s.H, s.ht * 3), ("fc.weight",))
    table["eagle_module.norm.weight"] = ((s.H,), ("norm.weight",))
    shared: dict[str, str] = {"model.embed_tokens": "embed_tokens.weight"}
    if own_head:
        table["eagle_module.lm_head.weight"] = ((vd, s.H), ("lm_head.weight",))
    else:
        shared["lm_head"] = "lm_head.weight"
    if vd < s.V:
        table["eagle_module.d2t"] = ((vd,), ("d2t",))
    renamed, ignored = {}, []
    for key in entries:
        if (
            key in ("t2d", "embed_tokens.weight")
            or (key == "d2t" and vd == s.V)
            or (key == "lm_head.weight" and not own_head)
        ):
            ignored.append(key)
            continue
        renamed["eagle_module." + re.sub(r"^midlayer\.", "layers.0.", key)] = key
    for new, key in renamed.items():
        if new not in table:
            raise Refusal(rt, f"unexpected key {new!r} in a strict load_state_dict", key)
    params = _fill(rt, table, renamed, entries)
    e = cfg.get("eagle_config") or {}
    ids = e.get("eagle_aux_hidden_state_layer_ids") or [
        1,
        max(0, target.num_layers // 2 - 1),
        max(0, target.num_layers - 4),
    ]
    layers = tuple(sorted(set(ids)))  # hooks fire in layer order
    if len(layers) != 3 or max(layers) >= target.num_layers:
        raise Refusal(
            rt,
            f"hooks on layers {list(layers)} of the {target.num_layers}-layer target, fc takes 3",
            "eagle_config.eagle_aux_hidden_state_layer_ids",
        )
    return Loaded(rt, params, shared, tuple(sorted(ignored)), layers, vd, "d2t" if vd < s.V else "identity")


def _hf_layer(prefix: str, s: _Shape) -> dict[str, tuple[tuple[int, ...], tuple[str, ...]]]:
    """The draft layer under HF's module names (separate q/k/v, gate/up), as modelopt keeps them."""
    m = "midlayer."
    rows = {"q": s.nH * s.D, "k": s.nKV * s.D, "v": s.nKV * s.D}
    table = {
        prefix + f"self_attn.{p}_proj.weight": ((rows[p], 2 * s.H), (m + f"self_attn.{p}_proj.weight",)) for p in "qkv"
    }
    table[prefix + "self_attn.o_proj.weight"] = ((s.H, s.nH * s.D), (m + "self_attn.o_proj.weight",))
    for p, shape in (("gate", (s.I, s.H)), ("up", (s.I, s.H)), ("down", (s.H, s.I))):
        table[prefix + f"mlp.{p}_proj.weight"] = (shape, (m + f"mlp.{p}_proj.weight",))
    for n in ("input_layernorm", "hidden_norm", "post_attention_layernorm"):
        table[prefix + f"{n}.weight"] = ((s.H,), (m + f"{n}.weight",))
    return table


READERS: dict[str, Callable[..., Loaded]] = {
    "tensorrt_llm": tensorrt_llm,
    "vllm": vllm,
    "sglang": sglang,
    "modelopt": modelopt,
}
