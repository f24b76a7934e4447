"""Medusa as a method: extra decoding heads on the target's last hidden state, fused into the target step graph
(`config`, `heads`, `drafter`)."""

# trtllm: the method's TensorRT-LLM mapping (method.Trtllm)

from __future__ import annotations

from builder.model.pickled import MEDUSA
from builder.speculative.medusa.config import MedusaConfig
from builder.speculative.method import (
    FUSED_HEADS,
    TRTLLM_ENGINE_LINE,
    Checks,
    DraftCheckpoint,
    EngineFlow,
    Facts,
    Method,
    NotServed,
    Trtllm,
)


def facts(c: MedusaConfig) -> Facts:
    choices = c.tree  # resolved: inline
    return Facts(
        nodes=len(choices),
        levels=max((len(ch) for ch in choices), default=0),
        label="medusa" + (f"({c.draft_weights})" if c.draft_weights else ""),  # quantized heads: in the graph
        top_k=1 + max((ch[-1] for ch in choices if ch), default=0),
        tentative=len(choices) + 1,
        max_depth=c.num_heads,
    )


def make_drafter(c: MedusaConfig, _net):
    from builder.speculative.medusa.drafter import MedusaDrafter
    from builder.speculative.tree import tree_from_choices

    tree = tree_from_choices(c.tree)
    return lambda: MedusaDrafter(tree)


def check_config(c: MedusaConfig, cfg: dict, checks: Checks) -> None:
    """The recipe's head and layer counts against the heads' config.json (FasterDecoding's keys)."""
    for key, ours in (("medusa_num_heads", "num_heads"), ("medusa_num_layers", "num_layers")):
        if key in cfg and cfg[key] != getattr(c, ours):
            checks.add(("speculative", ours), f"recipe says {getattr(c, ours)}, heads config.json says {cfg[key]}")


METHOD = Method(
    name="medusa",
    config=MedusaConfig,
    summary="Medusa: extra decoding heads on the target's last hidden state",
    facts=facts,
    make_drafter=make_drafter,
    tree_path=lambda _c: ("tree",),
    draft=DraftCheckpoint(
        what="Medusa heads",
        module="medusa_heads",
        layout=MEDUSA,
        loader="builder.speculative.medusa.heads:load_for_recipe",
        checker="builder.speculative.medusa.heads:check_folder",
        check_config=check_config,
    ),
    exports=FUSED_HEADS,
    tune="builder.tune.static:MEDUSA",
    memory="builder.plan.medusa:MEMORY",
    trtllm=Trtllm(
        # tensorrt_llm/models/medusa (MedusaForCausalLM: num_medusa_heads, num_medusa_layers, max_draft_len);
        # trtllm-build --speculative_decoding_mode medusa; the C++ backend's decoding_mode medusa + medusa_choices
        engine=EngineFlow(
            build_mode="medusa",
            decoding_mode="medusa",
            architecture="MedusaForCausalLM",
            repo_parameter="medusa_choices",
            repo_value=lambda c: tuple(tuple(ch) for ch in c.tree),
            checkpoint="builder.trtllm.checkpoint.medusa:DRAFT",
        ),
        pytorch=NotServed(
            "MedusaDecodingConfig refuses the PyTorch backend (supports_backend, tensorrt_llm/llmapi/llm_args.py): "
            f"Medusa is served by {TRTLLM_ENGINE_LINE}'s engine flow only"
        ),
    ),
)
