"""`none` as a method: no draft, every step a plain one (the decoding loop runs without a drafter)."""

# trtllm: the method's TensorRT-LLM mapping (method.Trtllm)

from __future__ import annotations

from builder.speculative.method import Checks, EngineFlow, Facts, Method, PytorchFlow, Trtllm
from builder.speculative.none.config import NoSpeculation


def facts(_config: NoSpeculation) -> Facts:
    return Facts(nodes=0, levels=0, label="none", chains_only=True)


def check(_config: NoSpeculation, c: Checks) -> None:
    given = c.recipe.build.max_draft_len
    if given:
        c.add(("build", "max_draft_len"), f"max_draft_len={given} without speculation", allowed="0")


METHOD = Method(
    name="none",
    config=NoSpeculation,
    summary="plain autoregressive decoding",
    facts=facts,
    make_drafter=lambda _config, _net: lambda: None,
    drafts=False,
    check=check,
    trtllm=Trtllm(
        engine=EngineFlow(build_mode=None, decoding_mode="top_k_top_p"),
        pytorch=PytorchFlow(decoding_type=None),  # plain decoding: no speculative_config
    ),
)
