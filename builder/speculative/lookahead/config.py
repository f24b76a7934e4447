"""Recipe section for Lookahead decoding (zero weights: Jacobi window + n-gram pool)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from builder.section import VERIFICATION_DOC, Section


def lookahead_draft_len(window: int, ngram: int, verification_set: int) -> int:
    """Draft tokens per step: `(N-2 if N>1 else 0) + (W-1+G)*(N-1)` (TensorRT-LLM's formula)."""
    return (ngram - 2 if ngram > 1 else 0) + (window - 1 + verification_set) * (ngram - 1)


# The defaults (W = N = G = 4) are also `--method lookahead` on a recipe of another method: the engines of every
# recipe are exported with room for it (`builder.speculative.registry.default_room`).
class LookaheadConfig(Section):
    method: Literal["lookahead"] = Field(description="Lookahead decoding: no draft weights.")
    window: int = Field(4, gt=0, le=64, description="W: Jacobi window width (future positions guessed per level).")
    ngram: int = Field(4, gt=0, le=16, description="N: n-gram length harvested from the window (levels = N-1).")
    verification_set: int = Field(4, ge=0, le=64, description="G: at most this many pool n-grams verified per step.")
    verification: Literal["greedy", "rejection"] = Field("rejection", description=VERIFICATION_DOC)

    @property
    def draft_len(self) -> int:
        return lookahead_draft_len(self.window, self.ngram, self.verification_set)
