"""What modelopt 0.47's `EagleModule` needs of an EAGLE-3 draft in a strict `load_state_dict` (installed; the tests
run it; sources in `builder.speculative.eagle3.upstream`).
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from builder.speculative.eagle3.upstream_common import (
    ConfigShape,
    Entries,
    Loaded,
    Refusal,
    Target,
    config_shape,
    fill,
    one_layer,
)


def modelopt(cfg: Mapping[str, Any], entries: Entries, target: Target, *, has_lm_head: bool | None = None) -> Loaded:
    """modelopt 0.47's `EagleModule` as its exporter names it (`hf_spec_export.py` `LLAMA_EAGLE_SINGLE_LAYER`, the
    prefix `eagle_module.`): what a strict `load_state_dict` of the checkpoint into the converted model needs (the
    tests run it). SafeAILab's `midlayer.` is modelopt's `layers.0.`. `has_lm_head`: the architecture option (None:
    as modelopt's default, only a reduced vocabulary gets a head of its own)."""
    rt = "modelopt"
    one_layer(rt, cfg)
    s = config_shape(cfg)
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
    params = fill(rt, table, renamed, entries)
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


def _hf_layer(prefix: str, s: ConfigShape) -> dict[str, tuple[tuple[int, ...], tuple[str, ...]]]:
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
