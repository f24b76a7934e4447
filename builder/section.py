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
