"""`OrtEngine`: the `Engine` protocol (builder.speculative.engine) over the exported target step graph.

One graph serves prefill and steps (see the I/O contract in `builder.export`). Verification runs in
the graph (the decomposed trtspec::TreeVerify), so per step only tokens, masks and paths go in and
the verdict, the nodes' greedy tokens, hidden states and Medusa top-k come out; the host then
compacts the accepted chain's KV in the shared buffer. The greedy graph serves all-greedy batches;
a batch with any sampled row runs the rejection graph (same weights file, loaded on first use).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from builder.engines.ort.kv import KVBuffers
from builder.engines.ort.session import Bound, BindingCache, make_session
from builder.engines.rows import RowTable
from builder.speculative.engine import Draft, PrefillResult, SamplingBatch, StepResult, check_draft


@dataclass(frozen=True)
class TargetSpec:
    """What the engine must know about the exported graphs."""

    greedy: Path  # target.ort.onnx of the greedy export
    rejection: Path | None  # target.ort.onnx of the rejection export (None: greedy only)
    layers: int
    kv_heads: int
    head_dim: int
    hidden_size: int
    vocab_size: int
    capacity: int  # CAP the graphs were exported for (max_seq_len + max draft nodes)
    medusa: tuple[int, int] | None = None  # (heads, top-k) when Medusa heads are fused in


class OrtEngine:
    name = "onnxruntime"

    def __init__(self, spec: TargetSpec, max_seq_len: int, max_batch_size: int = 1, threads: int = 1) -> None:
        if max_seq_len >= spec.capacity:
            raise ValueError(f"max_seq_len {max_seq_len} leaves no room for draft nodes in the exported "
                             f"capacity {spec.capacity}")
        self.spec = spec
        self.vocab_size, self.hidden_size = spec.vocab_size, spec.hidden_size
        self.max_seq_len, self.max_batch_size, self.threads = max_seq_len, max_batch_size, threads
        self.rows = RowTable(max_batch_size)
        self.kv = KVBuffers(spec.layers, max_batch_size, spec.kv_heads, spec.capacity, spec.head_dim)
        self.committed = np.zeros(max_batch_size, dtype=np.int64)  # per row
        self._sessions = {"greedy": make_session(spec.greedy, threads)}
        self._bound = BindingCache()

    def committed_len(self, seq: int) -> int:
        return int(self.committed[self.rows.row(seq)])

    def release(self, seq: int) -> None:
        moved = self.rows.remove(seq)
        if moved is not None:
            hole, last = moved
            self.kv.move_row(hole, last, int(self.committed[last]))
            self.committed[hole] = self.committed[last]
        self.committed[len(self.rows)] = 0

    # -- prefill ---------------------------------------------------------------------------------

    def start(self, prompts: Sequence[Sequence[int]], sampling: SamplingBatch) -> tuple[list[int], PrefillResult]:
        lens = [len(p) for p in prompts]
        for p in prompts:
            if not 0 < len(p) <= self.max_seq_len:
                raise ValueError(f"prompt of {len(p)} tokens: need 1..{self.max_seq_len}")
            if min(p) < 0 or max(p) >= self.vocab_size:
                raise ValueError(f"prompt token ids must lie in [0, {self.vocab_size})")
        r0 = len(self.rows)
        ids = self.rows.add(len(prompts))
        b, t = len(prompts), max(lens)
        bound = self._binding(sampling, r0, r0 + b, t, 1, 1, 1)
        x = bound.x
        x["tokens"][:] = 0
        for i, p in enumerate(prompts):
            x["tokens"][i, : lens[i]] = p
        x["position_ids"][:] = np.arange(t)
        x["tree_mask"][:] = np.tril(np.ones((t, t), dtype=bool))
        x["past_len"][:] = 0
        x["num_nodes"][:] = lens
        x["verify_index"][:, 0] = np.array(lens) - 1
        x["paths"][:] = 0
        self._fill_sampling(x, sampling, range(b))
        bound.run()
        y = bound.y
        self.committed[r0 : r0 + b] = lens
        hidden = [y["hidden"][i, : lens[i]].copy() for i in range(b)]
        topk = y["medusa_topk"].copy() if "medusa_topk" in y else None
        return ids, PrefillResult(y["output_tokens"][:, 0].astype(np.int64), hidden, topk)

    # -- step ------------------------------------------------------------------------------------

    def step(self, seqs: Sequence[int], drafts: Sequence[Draft], sampling: SamplingBatch) -> StepResult:
        if len(seqs) != len(drafts) or len(set(seqs)) != len(seqs):
            raise ValueError("step needs one draft per distinct sequence")
        rows = self.rows.rows(list(seqs))
        n_rows = len(self.rows)
        t = max(d.num_nodes for d in drafts)
        p = max(d.paths.shape[0] for d in drafts)
        w = max(d.width for d in drafts)
        for row, d in zip(rows, drafts):
            check_draft(d, self.vocab_size)
            if self.committed[row] + t > self.kv.capacity:
                raise ValueError(f"sequence at {self.committed[row]} tokens has no room for {t} nodes "
                                 f"(capacity {self.kv.capacity})")
        bound = self._binding(sampling, 0, n_rows, t, t, p, w)
        self._fill_step(bound.x, rows, drafts, t, n_rows)
        self._fill_sampling(bound.x, sampling, rows)
        bound.run()
        return self._commit(bound.y, rows, drafts)

    def _fill_step(self, x: dict[str, np.ndarray], rows: list[int], drafts: Sequence[Draft], t: int, n_rows: int) -> None:
        past = self.committed[:n_rows]
        x["tokens"][:] = 0
        x["tree_mask"][:] = np.eye(t, dtype=bool)  # padding nodes (and idle rows) attend themselves only
        x["position_ids"][:] = past[:, None]
        x["past_len"][:] = past
        x["num_nodes"][:] = 0  # rows without a draft this step are idle
        x["paths"][:] = -1
        x["paths"][:, :, 0] = 0
        for row, d in zip(rows, drafts):
            n, (pp, ww) = d.num_nodes, d.paths.shape
            x["tokens"][row, :n] = d.tokens
            x["tree_mask"][row, :n, :n] = d.mask
            x["position_ids"][row, :n] = past[row] + d.depth
            x["num_nodes"][row] = n
            x["paths"][row, :pp, :ww] = d.paths

    @staticmethod
    def _fill_sampling(x: dict[str, np.ndarray], sampling: SamplingBatch, rows: Sequence[int]) -> None:
        if "temperature" not in x:
            return
        x["temperature"][:] = 0.0
        x["top_p"][:] = 1.0
        x["uniforms"][:] = 0.0
        w = min(x["uniforms"].shape[1], sampling.uniforms.shape[1])
        for i, row in enumerate(rows):
            x["temperature"][row] = sampling.temperature[i]
            x["top_p"][row] = sampling.top_p[i]
            x["uniforms"][row, :w] = sampling.uniforms[i, :w]

    def _commit(self, y: dict[str, np.ndarray], rows: list[int], drafts: Sequence[Draft]) -> StepResult:
        b, w, t = len(rows), max(d.width for d in drafts), max(d.num_nodes for d in drafts)
        out = StepResult(np.zeros(b, np.int64), np.full((b, w), -1, np.int64), np.full((b, w), -1, np.int64),
                         np.zeros((b, w, self.hidden_size), np.float32), np.full((b, t), -1, np.int64),
                         None if "medusa_topk" not in y else y["medusa_topk"][rows])  # fmt: skip
        for i, (row, d) in enumerate(zip(rows, drafts)):
            k = int(y["accepted_len"][row])
            chain = d.paths[int(y["best_path"][row]), :k].astype(np.int64)
            start = int(self.committed[row])
            self.kv.compact(row, start, chain)
            self.committed[row] = start + k
            out.accepted_len[i], out.chain[i, :k] = k, chain
            out.tokens[i, :k] = y["output_tokens"][row, :k]
            out.hidden[i, :k] = y["hidden"][row, chain]
            out.node_argmax[i, : d.num_nodes] = y["node_argmax"][row, : d.num_nodes]
        return out

    # -- bindings --------------------------------------------------------------------------------

    def _binding(self, sampling: SamplingBatch, r0: int, r1: int, t: int, tv: int, p: int, w: int) -> Bound:
        mode = "greedy" if sampling.greedy else "rejection"
        return self._bound.get((mode, r0, r1, t, tv, p, w), lambda: self._build(mode, r0, r1, t, tv, p, w))

    def _build(self, mode: str, r0: int, r1: int, t: int, tv: int, p: int, w: int) -> Bound:
        b = r1 - r0
        inputs = {
            "tokens": ((b, t), np.int64), "position_ids": ((b, t), np.int64), "tree_mask": ((b, t, t), np.bool_),
            "past_len": ((b,), np.int64), "num_nodes": ((b,), np.int64), "verify_index": ((b, tv), np.int64),
            "paths": ((b, p, w), np.int32),
        }  # fmt: skip
        if mode == "rejection":
            inputs |= {"temperature": ((b,), np.float32), "top_p": ((b,), np.float32), "uniforms": ((b, w), np.float32)}
        outputs = {
            "accepted_len": ((b,), np.int32), "best_path": ((b,), np.int32), "output_tokens": ((b, w), np.int32),
            "node_argmax": ((b, tv), np.int64), "hidden": ((b, t, self.hidden_size), np.float32),
        }  # fmt: skip
        if self.spec.medusa is not None:
            outputs["medusa_topk"] = ((b, *self.spec.medusa), np.int64)
        bound = Bound(self._session(mode), inputs, outputs, self.kv.ortvalues(r0, r1))
        if tv == t:
            bound.x["verify_index"][:] = np.arange(t)  # a step verifies every node; set once
        return bound

    def _session(self, mode: str):
        if mode not in self._sessions:
            if self.spec.rejection is None:
                raise ValueError("this engine was built for greedy decoding only (temperature 0)")
            self._sessions[mode] = make_session(self.spec.rejection, self.threads)
        return self._sessions[mode]
