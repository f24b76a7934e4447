"""The shared table of the upstream readers (`builder.speculative.eagle3.upstream`): what a runtime would run with
(`Loaded`, `Param`), the target it loads over, `Refusal`, and the helpers every reader builds its parameter table
with (the draft layer under the serving runtimes' fused names, the fill of each parameter from the stored keys).
Names and shapes only: no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

Entries = Mapping[str, tuple[tuple[int, ...], str]]  # stored key -> (shape, safetensors dtype name)
FLOAT = ("F32", "F16", "BF16")
MODELOPT_LAYER = "layers.0."  # modelopt's export names the draft layer so; SafeAILab (and we) `midlayer.`
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
class ConfigShape:
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


def config_shape(cfg: Mapping[str, Any]) -> ConfigShape:
    H, nH = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    return ConfigShape(
        H=H,
        nH=nH,
        nKV=int(cfg.get("num_key_value_heads") or nH),
        D=int(cfg.get("head_dim") or H // nH),
        I=int(cfg["intermediate_size"]),
        V=int(cfg["vocab_size"]),
        Vd=None if cfg.get("draft_vocab_size") is None else int(cfg["draft_vocab_size"]),
        Ht=None if cfg.get("target_hidden_size") is None else int(cfg["target_hidden_size"]),
    )


def fused_layer(prefix: str, s: ConfigShape) -> dict[str, tuple[tuple[int, ...], tuple[str, ...]]]:
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
SHARDS = {".qkv_proj.": (".q_proj.", ".k_proj.", ".v_proj."), ".gate_up_proj.": (".gate_proj.", ".up_proj.")}


def fill(
    runtime: str,
    table: dict[str, tuple[tuple[int, ...], tuple[str, ...]]],
    renamed: Mapping[str, str],  # runtime name a stored key goes to -> the stored key
    entries: Entries,
) -> dict[str, Param]:
    """Each runtime parameter with the stored keys that fill it; a parameter left unfilled, or filled with a wrong
    shape or dtype, is a Refusal (the runtime would fail, or run on its random init)."""
    params = {}
    for name, (shape, meaning) in table.items():
        parts = next((v for k, v in SHARDS.items() if k in name), None)
        wanted = [name.replace(fused(name), p) for p in parts] if parts else [name]
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


def fused(name: str) -> str:
    return next(k for k in SHARDS if k in name)


def check_variants(runtime: str, cfg: Mapping[str, Any], top: Sequence[str], eagle: Sequence[str]) -> None:
    e = cfg.get("eagle_config") or {}
    for key in top:
        if cfg.get(key):
            raise Refusal(runtime, "true: the runtime would run a variant (other math than the draft's)", key)
    for key in eagle:
        if e.get(key):
            raise Refusal(runtime, "true: the runtime would run a variant (other math)", f"eagle_config.{key}")


def one_layer(runtime: str, cfg: Mapping[str, Any]) -> None:
    if int(cfg.get("num_hidden_layers", 1)) != 1:
        raise Refusal(runtime, "more than one draft layer (not what we write or run)", "num_hidden_layers")
