"""`TorchEngine`: the reference `Engine` (builder/speculative/engine.py) over the plain-torch Llama.

Batch size 1 at this interface. The cache holds the committed sequence; a step's nodes are written
after it tentatively and survive only through `commit`. Call order: `prefill`, then any number of
`step` → `commit` rounds; `prefill` may also follow a commit (it appends, causally). A second
`step` (or a `prefill`) before the last step's `commit` is a RuntimeError: commit([]) drops all nodes.
Outputs are fp32 (logits and hidden) whatever the model dtype. Runs under `torch.no_grad`, not
`inference_mode`, so callers may modify the returned tensors in place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch

from builder.errors import UserError
from builder.model.kv_cache import KVCache
from builder.model.llama import Llama, causal_mask
from builder.model.loader import load_model, resolve_dtype

from dataclasses import dataclass


@dataclass
class StepOutput:  # the batch-1 interface's output; this module is being replaced by builder.engines
    logits: torch.Tensor  # [T, vocab] fp32
    hidden: torch.Tensor  # [T, hidden] fp32


DEFAULT_MAX_SEQ_LEN = 2048  # KV capacity when from_pretrained is not told one


class TorchEngine:
    """Llama 3 target with a preallocated KV cache of `max_seq_len` tokens, supporting tree steps."""

    def __init__(self, model: Llama, max_seq_len: int) -> None:
        cfg = model.cfg
        if not 0 < max_seq_len <= cfg.max_position_embeddings:
            raise UserError(f"max_seq_len {max_seq_len} must be in 1..max_position_embeddings "
                            f"({cfg.max_position_embeddings})", field="max_seq_len")
        self.model = model.eval()
        self.vocab_size = cfg.vocab_size
        self.hidden_size = cfg.hidden_size
        self.max_seq_len = max_seq_len
        self.cache = KVCache(cfg.num_hidden_layers, 1, cfg.num_key_value_heads, cfg.head_dim, max_seq_len,
                             dtype=model.dtype, device=model.embed_tokens.weight.device)
        self._last_step: tuple[torch.Tensor, torch.Tensor] | None = None  # (mask [T, T], depth [T])

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        dtype: torch.dtype | str = torch.float32,
        max_seq_len: int | None = None,
        allow_pickle: bool = False,
    ) -> TorchEngine:
        """Engine over the HF checkpoint in directory `path` (see `builder.model.loader`).

        `max_seq_len` is the KV capacity in tokens; None means min(2048, max_position_embeddings).
        """
        model = load_model(path, resolve_dtype(dtype), allow_pickle=allow_pickle)
        if max_seq_len is None:
            max_seq_len = min(DEFAULT_MAX_SEQ_LEN, model.cfg.max_position_embeddings)
        return cls(model, max_seq_len)

    @property
    def committed_len(self) -> int:
        return self.cache.committed

    def reset(self) -> None:
        self.cache.reset()
        self._last_step = None

    @torch.no_grad()
    def prefill(self, token_ids: Sequence[int]) -> StepOutput:
        """Run `token_ids` causally after the committed sequence and commit their KV."""
        if self._last_step is not None:
            raise RuntimeError("prefill after a step without commit; call commit(nodes) first")
        tokens = torch.as_tensor(list(token_ids), dtype=torch.int64)  # [T]
        if tokens.ndim != 1 or len(tokens) == 0:
            raise ValueError("prefill needs a non-empty sequence of token ids")
        self._check_vocab(tokens)
        T = len(tokens)
        start = self.cache.reserve(T)
        positions = torch.arange(start, start + T)[None]  # (1, T)
        out = self._forward(tokens, positions, causal_mask(T, past=start), start)
        self.cache.commit_all()
        return out

    @torch.no_grad()
    def step(
        self,
        tokens: torch.Tensor,  # [T] int64
        mask: torch.Tensor,  # [T, T] bool; mask[i, j]: node i attends node j
        depth: torch.Tensor,  # [T] int64; node i sits at position committed_len + depth[i]
    ) -> StepOutput:
        """One pass over T nodes; each attends to the committed sequence plus the nodes `mask` allows."""
        if self._last_step is not None:
            raise RuntimeError("step after a step without commit; call commit(nodes) first")
        T = _check_step_inputs(tokens, mask, depth)
        self._check_vocab(tokens)
        start = self.cache.reserve(T)
        full = torch.cat((torch.ones(T, start, dtype=torch.bool), mask.bool()), dim=1)  # (T, start + T)
        positions = (start + depth.to(torch.int64))[None]  # (1, T)
        out = self._forward(tokens.to(torch.int64), positions, full[None], start)
        self._last_step = (mask.bool().clone(), depth.to(torch.int64).clone())
        return out

    def commit(self, nodes: Sequence[int]) -> None:
        """Keep the KV of `nodes` (a root-first chain of the last step's nodes), drop the rest."""
        if self._last_step is None:
            raise RuntimeError("commit without a preceding step")
        nodes = [int(n) for n in nodes]
        _check_chain(nodes, *self._last_step)
        self.cache.commit(nodes)
        self._last_step = None

    def _forward(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, start: int) -> StepOutput:
        # tokens [T], positions [1, T], mask [1, T, start + T]
        logits, hidden = self.model(tokens[None], positions, mask, self.cache, start)  # (1, T, V), (1, T, C)
        return StepOutput(logits=logits[0].float(), hidden=hidden[0].float())

    def _check_vocab(self, tokens: torch.Tensor) -> None:
        if len(tokens) and (int(tokens.min()) < 0 or int(tokens.max()) >= self.vocab_size):
            raise ValueError(f"token ids must lie in [0, {self.vocab_size}), got {tokens.tolist()}")


def _check_step_inputs(tokens: torch.Tensor, mask: torch.Tensor, depth: torch.Tensor) -> int:
    """Validate a step's tensors; returns T."""
    if tokens.ndim != 1 or len(tokens) == 0 or tokens.is_floating_point():
        raise ValueError(f"tokens must be a non-empty integer [T] tensor, got {tokens.dtype} {tuple(tokens.shape)}")
    T = len(tokens)
    if mask.shape != (T, T) or mask.dtype != torch.bool:
        raise ValueError(f"mask must be bool [{T}, {T}], got {mask.dtype} {tuple(mask.shape)}")
    if not bool(mask.diagonal().all()):
        raise ValueError("mask diagonal must be true (every node attends to itself)")
    if depth.shape != (T,) or depth.is_floating_point() or int(depth.min()) < 0:
        raise ValueError(f"depth must be a non-negative integer [{T}] tensor, got {depth.dtype} {depth.tolist()}")
    return T


def _check_chain(nodes: list[int], mask: torch.Tensor, depth: torch.Tensor) -> None:
    """`nodes` must be a chain the step ran causally: node k at depth k, attending exactly nodes[:k+1]."""
    T = len(depth)
    for k, n in enumerate(nodes):
        if not 0 <= n < T:
            raise ValueError(f"commit: node {n} is out of range for a step of {T} nodes")
        if int(depth[n]) != k:
            raise ValueError(f"commit: node {n} has depth {int(depth[n])} but is at chain position {k}")
        expected = torch.zeros(T, dtype=torch.bool)
        expected[nodes[: k + 1]] = True
        if not torch.equal(mask[n], expected):
            raise ValueError(f"commit: node {n} attends nodes {mask[n].nonzero().flatten().tolist()}, "
                             f"not exactly its chain prefix {sorted(nodes[: k + 1])}")
