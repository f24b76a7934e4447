"""`TorchEagleNet`: the torch face of the `EagleNet` protocol over `EagleDraft` or `Eagle3Draft`, one KV cache per
sequence.

The reference for the ONNX Runtime face (`builder.engines.ort`); see `builder.speculative.protocols.EagleNet`
for the pair/position conventions. An `Eagle3Draft` takes the target's features as the torch engine returns them
(`TorchEngine(features=aux_layers)`: 3·C wide, its fc applied inside `Eagle3Draft.forward`) and its own outputs
(C wide) at deeper levels; the ONNX graphs fold fc into the target step instead (`builder.export.target.Features`).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from builder.model.kv_cache import KVCache
from builder.speculative.eagle.draft_model import EagleDraft
from builder.speculative.eagle3.draft_model import Eagle3Draft
from builder.speculative.protocols import DraftOutput


class TorchEagleNet:
    def __init__(self, draft: EagleDraft | Eagle3Draft, top_k: int, capacity: int, max_batch_size: int = 1) -> None:
        self.draft, self.top_k, self.capacity = draft.eval(), top_k, capacity
        self.hidden_size = draft.cfg.hidden_size
        self._free = [draft.new_cache(capacity) for _ in range(max_batch_size)]
        self._cache: dict[int, KVCache] = {}

    def start(self, seqs: Sequence[int]) -> None:
        for s in seqs:
            self._cache[s] = self._free.pop()
            self._cache[s].reset()

    def release(self, seq: int) -> None:
        self._free.append(self._cache.pop(seq))

    def committed_len(self, seq: int) -> int:
        return self._cache[seq].committed

    def committed_lens(self, seqs: Sequence[int]) -> np.ndarray:
        return np.array([self._cache[s].committed for s in seqs], np.int64)

    @torch.no_grad()
    def extend(self, seqs: Sequence[int], tokens: np.ndarray, hidden: np.ndarray, num_new: np.ndarray) -> DraftOutput:
        outs = []
        for row, s in enumerate(seqs):
            cache, m = self._cache[s], int(num_new[row])
            start = cache.reserve(m)
            mask = torch.ones(m, start + m, dtype=torch.bool)
            mask[:, start:] = torch.tril(mask[:, start:])  # causal among the new pairs
            out = self._run(tokens[row, :m], hidden[row, :m], np.arange(start, start + m), mask, cache, start)
            cache.commit_all()
            outs.append(out[-1:])  # (1, C)
        return self._topk(torch.stack(outs))  # (B, 1, C)

    @torch.no_grad()
    def expand(
        self,
        seqs: Sequence[int],
        tokens: np.ndarray,
        hidden: np.ndarray,
        position_ids: np.ndarray,
        write_offset: int,
        tree_mask: np.ndarray,
    ) -> DraftOutput:
        outs = []
        f = tokens.shape[1]
        for row, s in enumerate(seqs):
            cache = self._cache[s]
            committed = cache.reserve(write_offset + f)
            mask = torch.ones(f, committed + write_offset + f, dtype=torch.bool)
            mask[:, committed:] = torch.from_numpy(np.array(tree_mask[row, :, : write_offset + f]))
            outs.append(self._run(tokens[row], hidden[row], position_ids[row], mask, cache, committed + write_offset))
        return self._topk(torch.stack(outs))  # (B, F, C)

    def _run(
        self,
        tokens: np.ndarray,
        hidden: np.ndarray,
        positions: np.ndarray,
        mask: torch.Tensor,
        cache: KVCache,
        start: int,
    ) -> torch.Tensor:
        # tokens [F], hidden [F, C] (EAGLE-3's target features: [F, 3·C]), positions [F], mask [F, start + F]
        # -> draft output [F, C]
        d = self.draft
        x = torch.from_numpy(np.ascontiguousarray(hidden)).to(d.dtype)[None]
        pos = torch.from_numpy(np.array(positions, dtype=np.int64))[None]
        return d(torch.from_numpy(np.asarray(tokens, dtype=np.int64))[None], x, pos, mask[None], cache, start)[0]

    def _topk(self, out: torch.Tensor) -> DraftOutput:  # out [B, F, C]
        logp, tokens = self.draft.draft_topk(out, self.top_k)  # (B, F, K) each
        return DraftOutput(out.float().numpy(), tokens.numpy(), logp.numpy())
