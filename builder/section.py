"""Shared pydantic base for recipe sections (extra keys forbidden, every field documented).

It sits below both `builder.recipe` (the schema) and `builder.speculative` (each method's config lives
beside the method), so neither imports the other to share it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """Base of every recipe section: unknown keys are errors, values are validated on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)
