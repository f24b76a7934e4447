"""Recipe section for Medusa heads (FasterDecoding layout)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from builder.section import DRAFT_WEIGHTS_DOC, VERIFICATION_DOC, Section

Choices = list[list[int]]


class MedusaConfig(Section):
    method: Literal["medusa"] = Field(description="Medusa: extra decoding heads on the target's last hidden state.")
    checkpoint: str = Field(
        max_length=4096,
        description="Medusa heads: local directory (config.json + medusa_lm_head.safetensors) or "
        "hf://org/name[@revision].",
    )
    num_heads: int = Field(gt=0, le=16, description="Number of Medusa heads (head k drafts the token k+2 ahead).")
    num_layers: int = Field(1, gt=0, le=8, description="Residual blocks per head.")
    tree: Choices | Annotated[str, Field(max_length=4096)] = Field(
        "mc_sim_7b_63",
        description="Tree choices: an inline list of top-k rank paths, a named preset under "
        "builder/speculative/trees/ (e.g. mc_sim_7b_63), or a .json file path relative to the recipe. "
        "At most 1024 draft nodes, 64 levels, ranks 0..1023 (checked for every source).",
    )
    verification: Literal["greedy", "rejection"] = Field("rejection", description=VERIFICATION_DOC)
    draft_weights: Literal["int8", "int4"] | None = Field(None, description=DRAFT_WEIGHTS_DOC)
    allow_pickle: bool = Field(
        False,
        description="Read heads saved by FasterDecoding/Medusa's training code as medusa_lm_head.pt (a pickle) with "
        "torch.load(weights_only=True) — plain tensors only, no code objects; used only when the directory has no "
        "medusa_lm_head.safetensors. Nothing else pickled is ever read. False (default): refused; convert it once "
        "with `trtspec convert-draft` instead.",
    )
