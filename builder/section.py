"""Shared pydantic base for recipe sections (extra keys forbidden, every field documented).

It sits below both `builder.recipe` (the schema) and `builder.speculative` (each method's config lives
beside the method), so neither imports the other to share it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """Base of every recipe section: unknown keys are errors, values are validated on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)


VERIFICATION_DOC = (
    "What the engine verifies. rejection (default): greedy requests verify greedily and sampled ones "
    "(temperature > 0) by tree rejection sampling, which keeps the target's distribution; both step "
    "graphs are built. greedy: only the greedy step graph is built and sampled requests are refused."
)

DRAFT_WEIGHTS_DOC = (
    "cpu targets: the draft's weight MatMuls in the graph ONNX Runtime runs as block-quantized int8 or int4 "
    "(com.microsoft MatMulNBits, block 32, int8 activations), so a draft call reads a quarter / an eighth of "
    "float32's bytes — the CPU's form of a GPU draft's one-byte FP8 weights. Lossless (the target verifies every "
    "token); the acceptance rate may move a little. Null (default): float32. GPU targets refuse it (their draft's "
    "precision follows quantization)."
)
