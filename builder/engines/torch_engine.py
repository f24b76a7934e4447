"""`TorchEngine`: the reference `Engine` (builder.speculative.protocols) over the plain-torch Llama.

Readable over fast: each sequence has its own batch-1 `KVCache`; `step` runs the sequences one by
one (tree attention through an explicit mask), verifies each draft with the torch reference of the
`tree_verify` contract and commits the accepted chain by compaction. It is the oracle the ONNX
Runtime and TensorRT engines are tested against. Outputs are fp32 whatever the model dtype. Medusa
heads, when given, run on the last accepted node's hidden state (as the fused ONNX graph does).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from builder.engines.rows import RowTable
from builder.errors import UserError
from builder.model.kv_cache import KVCache
from builder.model.llama import Llama, causal_mask
from builder.model.loader import load_model, resolve_dtype
from builder.speculative.medusa.heads import MedusaHeads
from builder.speculative.protocols import Draft, PrefillResult, SamplingBatch, StepResult, check_draft
from plugins.tree_verify.contract import TEMPERATURE_EPS
from plugins.tree_verify.reference import tree_verify

DEFAULT_MAX_SEQ_LEN = 2048  # KV capacity when from_pretrained is not told one


class TorchEngine:
    """Llama 3 target with one preallocated KV cache of `max_seq_len` tokens per sequence."""

    name = "torch"

    def __init__(
        self,
        model: Llama,
        max_seq_len: int,
        max_batch_size: int = 1,
        medusa: MedusaHeads | None = None,
        medusa_topk: int = 0,
        features: tuple[int, ...] = (),  # EAGLE-3's aux layers: `hidden` is their outputs, concatenated
    ) -> None:
        cfg = model.cfg
        if not 0 < max_seq_len <= cfg.max_position_embeddings:
            raise UserError(
                f"max_seq_len {max_seq_len} must be in 1..max_position_embeddings ({cfg.max_position_embeddings})",
                field="max_seq_len",
            )
        if medusa is not None and medusa_topk < 1:
            raise ValueError("Medusa heads need medusa_topk >= 1")
        self.model = model.eval()
        self.features = tuple(features)
        self.vocab_size = cfg.vocab_size
        self.hidden_size = cfg.hidden_size * (len(self.features) or 1)
        self.max_seq_len, self.max_batch_size = max_seq_len, max_batch_size
        self.medusa, self.medusa_topk = (None if medusa is None else medusa.eval()), medusa_topk
        self.rows = RowTable(max_batch_size)
        device = model.embed_tokens.weight.device
        self._free = [
            KVCache(
                cfg.num_hidden_layers,
                1,
                cfg.num_key_value_heads,
                cfg.head_dim,
                max_seq_len,
                dtype=model.dtype,
                device=device,
            )
            for _ in range(max_batch_size)
        ]
        self._cache: dict[int, KVCache] = {}

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        dtype: torch.dtype | str = torch.float32,
        max_seq_len: int | None = None,
        allow_pickle: bool = False,
        **kwargs,
    ) -> TorchEngine:
        """Engine over the HF checkpoint in directory `path` (see `builder.model.loader`).

        `max_seq_len` is the KV capacity in tokens; None means min(2048, max_position_embeddings).
        """
        model = load_model(path, resolve_dtype(dtype), allow_pickle=allow_pickle)
        if max_seq_len is None:
            max_seq_len = min(DEFAULT_MAX_SEQ_LEN, model.cfg.max_position_embeddings)
        return cls(model, max_seq_len, **kwargs)

    def committed_len(self, seq: int) -> int:
        return self._cache[seq].committed

    def release(self, seq: int) -> None:
        self.rows.remove(seq)
        cache = self._cache.pop(seq)
        cache.reset()
        self._free.append(cache)

    @torch.no_grad()
    def start(self, prompts: Sequence[Sequence[int]], sampling: SamplingBatch) -> tuple[list[int], PrefillResult]:
        for p in prompts:
            self._check_tokens(np.asarray(p, dtype=np.int64), "prompt")
            if not 0 < len(p) <= self.max_seq_len:
                raise ValueError(f"prompt of {len(p)} tokens: need 1..{self.max_seq_len}")
        with self.rows.adding(len(prompts)) as ids:  # a failing prefill takes its rows back
            try:
                return ids, self._prefill(ids, prompts, sampling)
            except BaseException:
                for sid in ids:  # and its caches
                    cache = self._cache.pop(sid, None)
                    if cache is not None:
                        cache.reset()
                        self._free.append(cache)
                raise

    def _prefill(self, ids: list[int], prompts: Sequence[Sequence[int]], sampling: SamplingBatch) -> PrefillResult:
        first, hidden, topk = [], [], []
        for row, (sid, prompt) in enumerate(zip(ids, prompts)):
            cache = self._cache[sid] = self._free.pop()
            tokens = torch.as_tensor(list(prompt), dtype=torch.int64)  # [n]
            n = len(tokens)
            cache.reserve(n)
            logits, h = self.model(
                tokens[None], torch.arange(n)[None], causal_mask(n), cache, 0, self.features
            )  # (1, n, V), (1, n, C)
            cache.commit_all()
            res = self._verify(logits[:, -1:], tokens[None, -1:], np.zeros((1, 1), np.int32), sampling, row)
            first.append(int(res.output_tokens[0, 0]))
            hidden.append(h[0].float().numpy())
            if self.medusa is not None:
                topk.append(self._medusa(h[0, -1]))
        return PrefillResult(np.array(first, dtype=np.int64), hidden, np.stack(topk) if topk else None)

    @torch.no_grad()
    def step(self, seqs: Sequence[int], drafts: Sequence[Draft], sampling: SamplingBatch) -> StepResult:
        if len(seqs) != len(drafts) or len(set(seqs)) != len(seqs):
            raise ValueError("step needs one draft per distinct sequence")
        b, t, w = len(seqs), max(d.num_nodes for d in drafts), max(d.width for d in drafts)
        out = StepResult(
            np.ones(b, np.int64),
            np.full((b, w), -1, np.int64),
            np.full((b, w), -1, np.int64),
            np.zeros((b, w, self.hidden_size), np.float32),
            np.full((b, t), -1, np.int64),
            np.zeros((b, self.medusa.num_heads, self.medusa_topk), np.int64) if self.medusa else None,
        )
        for row, (sid, draft) in enumerate(zip(seqs, drafts)):
            check_draft(draft, self.vocab_size)
            cache = self._cache[sid]
            n = draft.num_nodes
            start = cache.reserve(n)
            full = torch.cat((torch.ones(n, start, dtype=torch.bool), torch.from_numpy(np.array(draft.mask))), dim=1)
            positions = torch.from_numpy(start + draft.depth)[None]  # (1, T)
            logits, h = self.model(
                torch.from_numpy(np.array(draft.tokens))[None], positions, full[None], cache, start, self.features
            )
            res = self._verify(logits, torch.from_numpy(np.array(draft.tokens))[None], draft.paths, sampling, row)
            k = int(res.accepted_len[0])
            chain = draft.paths[int(res.best_path[0]), :k].astype(np.int64)
            cache.commit(chain.tolist())
            out.accepted_len[row], out.chain[row, :k] = k, chain
            out.tokens[row, :k] = res.output_tokens[0, :k].numpy()
            out.hidden[row, :k] = h[0, chain].float().numpy()
            out.node_argmax[row, :n] = logits[0].float().argmax(-1).numpy()
            if self.medusa is not None and out.medusa_topk is not None:
                out.medusa_topk[row] = self._medusa(h[0, int(chain[-1])])
        return out

    def _verify(self, logits: torch.Tensor, tokens: torch.Tensor, paths: np.ndarray, sampling: SamplingBatch, row: int):
        # logits [1, T, V], tokens [1, T], paths [P, W] -> tree_verify result for one sequence
        w = paths.shape[1]
        kwargs = {}
        mode = "greedy" if sampling.temperature[row] <= TEMPERATURE_EPS else "rejection"
        if mode == "rejection":
            kwargs = dict(
                temperature=torch.from_numpy(sampling.temperature[row : row + 1]),
                top_p=torch.from_numpy(sampling.top_p[row : row + 1]),
                uniforms=torch.from_numpy(np.ascontiguousarray(sampling.uniforms[row : row + 1, :w])),
            )
        pa = torch.from_numpy(paths.astype(np.int32))[None]  # [1, P, W]: this sequence's tree
        return tree_verify(logits.float(), tokens.to(torch.int32), pa, mode=mode, **kwargs)

    def _medusa(self, hidden: torch.Tensor) -> np.ndarray:  # hidden [C] -> [H, K] int64
        assert self.medusa is not None
        logits = self.medusa(hidden.to(self.medusa[0][-1].weight.dtype)).float()  # (H, V)
        return logits.topk(self.medusa_topk, dim=-1).indices.numpy()

    def _check_tokens(self, tokens: np.ndarray, what: str) -> None:
        if len(tokens) and (int(tokens.min()) < 0 or int(tokens.max()) >= self.vocab_size):
            raise ValueError(f"{what} token ids must lie in [0, {self.vocab_size}), got {tokens.tolist()}")
