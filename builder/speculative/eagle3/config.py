"""Recipe section for an EAGLE-3 draft (SafeAILab or modelopt layout; `builder.speculative.eagle3.checkpoint`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from builder.section import DRAFT_WEIGHTS_DOC, VERIFICATION_DOC, Section
from builder.speculative.eagle.config import DynamicTree, EagleTree

AUX_DOC = (
    "The target layers whose outputs the draft reads (low, middle, high), as 0-based *output-of-layer* ids — the "
    "convention of TensorRT-LLM's `eagle3_layers_to_capture`, modelopt's and SGLang's "
    "`eagle_config.eagle_aux_hidden_state_layer_ids` (HF `output_hidden_states[i + 1]`); SafeAILab's reference and "
    "vLLM's top-level key count *input-of-layer* ids (one more), converted at those boundaries. Null: the "
    "checkpoint's `eagle_config` ids, else upstream's default {1, N/2-1, N-4} for N target layers, which needs "
    "N > 5 (a smaller target must name them)."
)


class Eagle3Config(Section):
    method: Literal["eagle3"] = Field(
        description="EAGLE-3: a one-layer draft over [token embedding; fc(three target hidden states)] with its "
        "own norm and LM head over a reduced draft vocabulary (d2t)."
    )
    checkpoint: str = Field(
        max_length=4096,
        description="EAGLE-3 draft: local directory (config.json + model.safetensors, SafeAILab's `midlayer.*` or "
        "modelopt's `layers.0.*` names) or hf://org/name[@revision].",
    )
    aux_layers: list[int] | None = Field(None, min_length=3, max_length=3, description=AUX_DOC)
    tree: EagleTree = Field(
        default_factory=lambda: DynamicTree(type="dynamic"),
        description="A static tree (choices; a chain is [[0], [0, 0], …]) or EAGLE-2's dynamic expansion, as "
        "upstream's EAGLE-3 drafts.",
    )
    verification: Literal["greedy", "rejection"] = Field("rejection", description=VERIFICATION_DOC)
    draft_weights: Literal["int8", "int4"] | None = Field(None, description=DRAFT_WEIGHTS_DOC)
    allow_pickle: bool = Field(
        False,
        description="Read a draft published as pytorch_model.bin (a pickle, as SafeAILab's EAGLE-3 drafts such "
        "as yuhuili/EAGLE3-LLaMA3.1-Instruct-8B may ship) with torch.load(weights_only=True) — plain tensors "
        "only; used only when the directory has no model.safetensors. False (default): refused.",
    )
