"""A draft the TensorRT-LLM checkpoint holds beside the target (what a method's `EngineFlow.checkpoint` names), and
the converter's `Inputs` it reads and extends.

TensorRT-LLM 1.2 converts a draft into the target's checkpoint as its own architecture (the method's
`EngineFlow.architecture`): Medusa heads into `MedusaForCausalLM` (`medusa.py`), the EAGLE draft into
`EagleForCausalLM` (`eagle.py`). A method without one (`EngineFlow.checkpoint` None: none, Lookahead) converts the
target alone. The converter (`prepare.py`, `writer.py`) runs the shared steps and asks the `Draft` for the rest, in
this order:

    request   the `CheckpointRequest` fields from the method's resolved recipe section (the checkpoint stage)
    check     its request fields, after the shared ones (tp, pp, draft_dir, 1 <= max_draft_len <= 256)
    index     read its config.json, index its weights in `Inputs.files` under `source` (headers only), check them
              against the target; returns what the writer needs (its own record, `Inputs.indexed`)
    check_quant  what the target's FP8 layout may not do with it (UserError)
    config    config.json: the target's dict (architecture set) plus its own fields
    parts     its tensors in one rank's file, after the target's (`names.Part`)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from builder.model.config import LlamaConfig
from builder.speculative.method import EngineFlow, resolve
from builder.trtllm.checkpoint.names import Quant
from builder.trtllm.checkpoint.sources import SourceFiles

if TYPE_CHECKING:
    from builder.trtllm.checkpoint import CheckpointRequest
    from builder.trtllm.checkpoint.mapping import Mapping
    from builder.trtllm.checkpoint.names import Part

Config = Any  # a method's recipe section, its static tree inline (`Method.resolved`)


def no_quant_rule(_quant: Quant) -> None:
    return None


@dataclass(frozen=True)
class Draft:
    """How one draft is converted (module docstring)."""

    source: str  # its namespace in `SourceFiles` (keys "<source>:<name>") and in `Inputs.stacks`
    exclude: str  # config.json quantization.exclude_modules pattern of its tensors (kept in the model dtype)
    request: Callable[[Config], dict[str, Any]]
    check: Callable[[CheckpointRequest], None]
    index: Callable[[CheckpointRequest, Inputs], Any]
    config: Callable[[dict[str, Any], CheckpointRequest, Inputs], dict[str, Any]]
    parts: Callable[[CheckpointRequest, Inputs, Mapping, str], list[Part]]  # (…, rank, safetensors dtype)
    check_quant: Callable[[Quant], None] = no_quant_rule


@dataclass
class Inputs:
    """Everything the writer needs, checked (`prepare.prepare`; a draft's `index` adds its files, record and stack)."""

    cfg: LlamaConfig
    files: SourceFiles
    flow: EngineFlow  # the method's (architecture; `checkpoint`: its draft)
    quant: Quant = field(default_factory=Quant)
    draft: Draft | None = None  # the method's draft (`drafts.draft_of`); None: the target alone
    indexed: Any = None  # what `draft.index` found (its own record)
    stacks: dict[str, LlamaConfig] = field(default_factory=dict)  # source namespace -> its Llama stack (EAGLE's)

    def stack(self, key: str) -> LlamaConfig:
        """The Llama stack source key `key` ("namespace:name") belongs to."""
        return self.stacks.get(key.partition(":")[0], self.cfg)


def draft_of(flow: EngineFlow) -> Draft | None:
    """The draft a method's engine flow converts with the target (None: the target alone)."""
    if flow.checkpoint is None:
        return None
    draft = resolve(flow.checkpoint)
    if not isinstance(draft, Draft):
        raise TypeError(f"{flow.checkpoint} is a {type(draft).__name__}, not a builder.trtllm.checkpoint.drafts.Draft")
    return draft
