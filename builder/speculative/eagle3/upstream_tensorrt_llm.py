"""What TensorRT-LLM's PyTorch flow would load from an EAGLE-3 draft (`Eagle3ForCausalLM`; sources file@commit in
`builder.speculative.eagle3.upstream`).
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

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


def tensorrt_llm(
    cfg: Mapping[str, Any],
    entries: Entries,
    target: Target,
    *,
    layers_to_capture: Sequence[int] | None = None,
    one_model: bool = True,
) -> Loaded:
    """TensorRT-LLM's PyTorch flow (sources: `upstream`). `layers_to_capture`: the LLM-API option
    `eagle3_layers_to_capture` (output-of-layer ids); `one_model`: `eagle3_one_model` (default True; the two-model
    flow builds the draft through AutoModelForCausalLM, which detects EAGLE-3 by draft_vocab_size only)."""
    rt = "TensorRT-LLM"
    if not one_model:
        arch = (cfg.get("architectures") or [""])[0]
        if "draft_vocab_size" not in cfg:
            raise Refusal(rt, f"absent: AutoModelForCausalLM resolves {arch!r} as is (not EAGLE-3)", "draft_vocab_size")
        if "EAGLE3" + arch.replace("Eagle3", "") != "EAGLE3LlamaForCausalLM":
            raise Refusal(rt, f"{arch!r} does not resolve to EAGLE3LlamaForCausalLM", "architectures")
    one_layer(rt, cfg)
    check_variants(
        rt,
        cfg,
        ("norm_output", "fc_norm", "bias"),
        ("eh_proj_before_attn", "norm_before_fc", "return_hidden_post_norm"),
    )
    s = config_shape(cfg)
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
    table = fused_layer("model.midlayer.", s)
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
    params = fill(rt, table, renamed, entries)
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
