"""Recipe section for plain decoding (no draft)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from builder.section import VERIFICATION_DOC, Section


class NoSpeculation(Section):
    method: Literal["none"] = Field(description="Plain autoregressive decoding.")
    verification: Literal["greedy", "rejection"] = Field("rejection", description=VERIFICATION_DOC)
