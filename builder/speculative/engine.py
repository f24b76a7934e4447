"""The engine and drafter interfaces the decoding loop runs over.

Engines: the torch reference (builder/model), ONNX Runtime and TensorRT (builder/engines, later).
Batch size 1 in the loop; engines may batch internally. Tensors are torch CPU tensors at this
interface; other engines convert at their boundary. See the glossary in `builder.speculative`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Sequence

if TYPE_CHECKING:  # keep `import builder.speculative.engine` free of torch
    import torch


@dataclass
class StepOutput:
    logits: "torch.Tensor"  # [T, vocab] fp32, one row per input token / node
    hidden: "torch.Tensor"  # [T, hidden] last hidden state after the final norm (Medusa/EAGLE input)


class Engine(Protocol):
    """Target model with a KV cache that supports tree steps and path commits."""

    vocab_size: int
    hidden_size: int

    def reset(self) -> None:
        """Drop all cached state."""

    def prefill(self, token_ids: Sequence[int]) -> StepOutput:
        """Run the prompt causally and commit its KV; returns logits/hidden for every prompt token."""

    def step(
        self,
        tokens: "torch.Tensor",  # [T] int64 node tokens; node 0 = root (newest emitted token, not cached)
        mask: "torch.Tensor",  # [T, T] bool; mask[i, j]: node i attends node j (diagonal true)
        depth: "torch.Tensor",  # [T] int64; node i sits at position committed_len + depth[i]
    ) -> StepOutput:
        """One target pass over T nodes appended after the committed sequence.

        Every node also attends to the whole committed sequence. The nodes' KV is held tentatively
        until `commit`. A tree is the usual case (mask = ancestor matrix); Lookahead's window is not a
        tree, which is why the mask is explicit.
        """

    def commit(self, nodes: Sequence[int]) -> None:
        """Keep the KV of these nodes of the last step, in order (a root-first chain), drop the rest.

        Afterwards the cache holds exactly the committed sequence followed by these nodes, as if they
        had been run causally.
        """

    @property
    def committed_len(self) -> int:
        """Number of tokens whose KV is committed."""
        ...


@dataclass
class Draft:
    """One step's draft: nodes with an explicit attention mask, and the paths to verify."""

    tokens: "torch.Tensor"  # [T] int64; node 0 = root
    mask: "torch.Tensor"  # [T, T] bool attention mask among the nodes
    depth: "torch.Tensor"  # [T] int64 position offset from committed_len (root 0)
    paths: "torch.Tensor"  # [P, D+1] int64 node indices, -1 padded; every row starts with 0
    draft_probs: "torch.Tensor | None" = None  # [T] fp32 q(token) for rejection mode; None = 1.0


class Drafter(Protocol):
    """Proposes drafts (Medusa heads, EAGLE draft layer, Lookahead n-grams)."""

    def reset(self, prompt_ids: Sequence[int], prefill: StepOutput) -> None:
        """Start a new sequence after the engine's prefill."""

    def propose(self, root_token: int) -> Draft:
        """The next step's draft, rooted at the newest emitted token."""

    def update(self, draft: Draft, out: StepOutput, accepted: Sequence[int], emitted: Sequence[int]) -> None:
        """Learn the step's result: accepted node indices (root-first) and emitted tokens (incl. bonus)."""
