"""What vLLM would load from an EAGLE-3 draft (`Eagle3LlamaForCausalLM`; sources file@commit in
`builder.speculative.eagle3.upstream`).
"""

from __future__ import annotations

from typing import Any, Mapping

from builder.speculative.eagle3.upstream_common import (
    Entries,
    Loaded,
    Refusal,
    Target,
    check_variants,
    config_shape,
    fill,
    fused_layer,
    one_layer,
)


def vllm(cfg: Mapping[str, Any], entries: Entries, target: Target, *, semantics: str | None = None) -> Loaded:
    """vLLM's `Eagle3LlamaForCausalLM` (sources: `upstream`). `semantics`: `eagle_aux_layer_semantics` of the versions
    that read it ("sglang": the config's ids are output-of-layer); None: the draft config's key, else "vllm"."""
    rt = "vLLM"
    one_layer(rt, cfg)
    check_variants(rt, cfg, ("norm_before_residual",), ())
    e = cfg.get("eagle_config") or {}
    if not e.get("use_aux_hidden_state", True):
        raise Refusal(rt, "false: no fc, no aux hidden states", "eagle_config.use_aux_hidden_state")
    s = config_shape(cfg)
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
    table = fused_layer("model.layers.0.", s)
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
    params = fill(rt, table, renamed, entries)
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
