"""Recipe section for an EAGLE-1/2 draft layer (SafeAILab layout)."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field

from builder.section import DRAFT_WEIGHTS_DOC, VERIFICATION_DOC, Section


class StaticTree(Section):
    type: Literal["static"] = Field(description="A fixed tree given as choices (EAGLE-1).")
    choices: list[list[int]] | Annotated[str, Field(max_length=4096)] = Field(
        "mc_sim_7b_63",
        description="Inline choices, a preset name under builder/speculative/trees/, or a .json path relative to the recipe. "
        "At most 1024 draft nodes, 64 levels, ranks 0..1023 (checked for every source).",
    )


class DynamicTree(Section):
    type: Literal["dynamic"] = Field(description="A context-dependent tree (EAGLE-2).")
    depth: int = Field(6, gt=0, le=16, description="Draft levels expanded per step.")
    top_k: int = Field(10, gt=0, le=64, description="Frontier nodes expanded (and children kept) per level.")
    total_nodes: int = Field(
        60, gt=0, le=512, description="Draft nodes kept after reranking by cumulative draft probability."
    )


EagleTree = Annotated[Union[StaticTree, DynamicTree], Field(discriminator="type")]


class EagleConfig(Section):
    method: Literal["eagle"] = Field(
        description="EAGLE: a one-layer draft model over [token embedding; target hidden]."
    )
    checkpoint: str = Field(
        max_length=4096,
        description="EAGLE draft: local directory (config.json + model.safetensors) or hf://org/name[@revision].",
    )
    version: Literal[1, 2] = Field(2, description="1: static tree; 2: dynamic tree.")
    tree: EagleTree = Field(
        default_factory=lambda: DynamicTree(type="dynamic"),
        description="Static choices (version 1) or dynamic expansion settings (version 2).",
    )
    verification: Literal["greedy", "rejection"] = Field("rejection", description=VERIFICATION_DOC)
    draft_vocab: int | None = Field(
        None,
        ge=1,
        le=1 << 20,
        description="Draft over this many tokens only: the target LM head's rows for the tokens most frequent in "
        "quantization.calibration.source (stop tokens always kept), as EAGLE-3's d2t / FR-Spec do. Cuts what a "
        "draft level reads (on Llama 3 the 128256-row LM head is most of it); lossless (the target verifies). "
        "Null: the whole vocabulary. At most model.architecture.vocab_size and at least the tree's top-k.",
    )
    draft_weights: Literal["int8", "int4"] | None = Field(None, description=DRAFT_WEIGHTS_DOC)
    allow_pickle: bool = Field(
        False,
        description="Read a draft published as pytorch_model.bin (a pickle, as SafeAILab's EAGLE-1 drafts such as "
        "yuhuili/EAGLE-LLaMA3-Instruct-8B ship) with torch.load(weights_only=True) — plain tensors only, no code "
        "objects; used only when the directory has no model.safetensors. Nothing else pickled is ever read. False "
        "(default): refused; convert it once with `trtspec convert-draft` instead.",
    )
