r"""What SGLang would load from an EAGLE-3 draft (`LlamaForCausalLMEagle3`; sources file@commit in
`builder.speculative.eagle3.upstream`).

SGLang's `LlamaForCausalLMEagle3.load_weights` (python/sglang/srt/models/llama_eagle3.py@03d5a777) renames nothing:
it looks each stored key up as a parameter name, as is or with "model." before it, and skips a key it does not find
without a word. Its draft layer is `model.midlayer`, so modelopt's export names (`layers.0.*`) are all skipped and the
midlayer runs on its initial weights — refused here naming `layers.0.*`. TensorRT-LLM (`^layers\.0\.` → `midlayer.`)
and vLLM (`midlayer.` → `layers.0.`) take both names; the SafeAILab layout (`midlayer.*`, what we write by default)
is the one all of them load.
"""

from __future__ import annotations

from typing import Any, Mapping

from builder.speculative.eagle3.upstream_common import (
    MODELOPT_LAYER,
    SHARDS,
    Entries,
    Loaded,
    Refusal,
    Target,
    check_variants,
    config_shape,
    fill,
    fused,
    fused_layer,
    one_layer,
)


def sglang(cfg: Mapping[str, Any], entries: Entries, target: Target) -> Loaded:
    """SGLang's `LlamaForCausalLMEagle3` (sources: `upstream`)."""
    rt = "SGLang"
    arch = (cfg.get("architectures") or [""])[0]
    if arch != "LlamaForCausalLMEagle3":
        raise Refusal(rt, f"{arch!r} is not the EntryClass LlamaForCausalLMEagle3", "architectures")
    one_layer(rt, cfg)
    check_variants(rt, cfg, ("bias", "tie_word_embeddings"), ())
    s = config_shape(cfg)
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
    table = fused_layer("model.midlayer.", s)
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
        n.replace(fused(n), p) for n in table if any(k in n for k in SHARDS) for p in SHARDS[fused(n)]
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
    lost = sorted(k for k in ignored if k.startswith(MODELOPT_LAYER))
    if lost:
        raise Refusal(
            rt,
            f"modelopt's layout: load_weights has no `layers.0.` → `midlayer.` rename, so these {len(lost)} key(s) "
            f"(e.g. {lost[0]!r}) are skipped without a word and the draft layer keeps its initial weights. Ship the "
            "SafeAILab layout for SGLang: the same tensors with `layers.0.` renamed `midlayer.` (what "
            "Eagle3Draft.save(layout='safeailab') and trtspec train-draft write)",
            MODELOPT_LAYER + "*",
        )
    params = fill(rt, table, renamed, entries)
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
