"""`OrtEngine`: the `Engine` protocol (builder.speculative.protocols) over the exported target step graph.

One graph serves prefill and steps (see the I/O contract in `builder.export`). Verification runs in
the graph (the decomposed trtspec::TreeVerify), so per step only tokens, masks and paths go in and
the verdict, the nodes' greedy tokens, hidden states and Medusa top-k come out; the host then
compacts the accepted chain's KV in the shared buffer. The greedy graph serves all-greedy batches;
a batch with any sampled row runs the rejection graph (same weights file, loaded on first use).
The host side (rows, input filling, commit) is `builder.engines.batched.BatchedTarget`, shared with
the TensorRT engine; here are the sessions and the IOBindings, whose tensors are the graph's I/O contract
(`builder.export.contract.TARGET`, float32: the CPU form, or the float32 lowering of a GPU-form graph).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

from builder.engines.batched import BatchedTarget
from builder.engines.bindings import LruBindings, Spec
from builder.engines.ort.kv import KVBuffers
from builder.engines.ort.session import Bound, make_session
from builder.export.contract import PLAIN_LOGITS, TARGET, call_spec
from builder.speculative.batch import DraftBatch


class GreedyOnly(ValueError):
    """A sampled request for an engine built without the rejection graph."""


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
    plain: Path | None = None  # the greedy graph for plain steps only (builder.export.verify.plain_twin)


class OrtEngine(BatchedTarget):
    name = "onnxruntime"

    def __init__(
        self, spec: TargetSpec, max_seq_len: int, max_batch_size: int = 1, threads: int = 1, plain_only: bool = False
    ) -> None:
        """`plain_only`: greedy steps hold chains only (root-only included: method none, n-gram with one candidate),
        run by `spec.plain` where there is one, their verdict made on the host (`_verify_on_host`); any other tree
        is then refused (the plain graph has neither tree attention nor tree verification). The plain graph returns no
        hidden states either (its last layer runs the verify nodes only: `plain_twin`): a prefill's and a step's
        `hidden` are zeros, which method none and n-gram never read (EAGLE needs them: `open_engine` refuses it)."""
        self.check_capacity(max_seq_len, spec.capacity)
        self.spec, self.threads = spec, threads
        kv = KVBuffers(spec.layers, max_batch_size, spec.kv_heads, spec.capacity, spec.head_dim)
        super().__init__(
            kv,
            LruBindings(),
            vocab_size=spec.vocab_size,
            hidden_size=spec.hidden_size,
            medusa=spec.medusa,
            max_seq_len=max_seq_len,
            max_batch_size=max_batch_size,
        )
        self.kv: KVBuffers = kv
        self.plain_only = plain_only and spec.plain is not None
        self._sessions = {"greedy": make_session(spec.plain if self.plain_only else spec.greedy, threads)}

    def step(self, seqs, drafts, sampling):  # noqa: ANN001, ANN201 - the Engine protocol's signature
        if self.plain_only and sampling.greedy:
            for d in drafts:  # a chain: its last node sits at depth T - 1 (the tree itself is checked in the step)
                if d.num_nodes > 1 and int(d.depth[-1]) != d.num_nodes - 1:
                    raise ValueError(
                        "this engine was opened for plain steps and chains (method none, n-gram with "
                        "one candidate): a draft tree needs open_engine(..., trees=True)"
                    )
        return super().step(seqs, drafts, sampling)

    def _verify_on_host(
        self, y: dict[str, np.ndarray], rows: np.ndarray, batch: DraftBatch, whole: bool, greedy: bool
    ) -> None:
        """The plain-steps graph (`plain_only`, greedy) verifies a root-only step itself; a chain's verdict is made
        here from its `node_argmax`: accepted = the leading drafts equal to the target's token before them (the
        path is the one chain, so best_path 0 and nothing moves in the KV cache), output_tokens = the target's
        tokens up to the bonus, −1 after (`step` refused any other tree: this graph has no tree attention)."""
        if not (self.plain_only and greedy) or batch.t == 1:  # the rejection graph verifies in-graph
            return
        argmax = y["node_argmax"] if whole else y["node_argmax"][rows]  # [b, T]
        hit = (batch.tokens[:, 1:] == argmax[:, :-1]) & ~batch.pad[:, 1:]  # [b, T-1] draft k+1 is the target's
        n = np.where(hit.all(axis=1), batch.t - 1, np.argmin(hit, axis=1))  # [b] leading hits = accepted drafts
        keep = np.arange(batch.w)[None, :] <= n[:, None]  # [b, W]
        tokens = np.where(keep, argmax[:, : batch.w], -1).astype(np.int32)
        if whole:
            y["accepted_len"][...] = n + 1
            y["best_path"][...] = 0
            y["output_tokens"][...] = tokens
        else:
            y["accepted_len"][rows] = n + 1
            y["best_path"][rows] = 0
            y["output_tokens"][rows] = tokens

    def _chain_verdict(self, y: dict[str, np.ndarray], tokens: list[int]) -> list[int]:
        """`step_chain` on the plain-steps graph: a chain verified here from its host argmax, as `_verify_on_host`
        does for a batch (batch 1 in plain Python on <= T ints: the common n-gram case; one token, a plain step, gives
        the target's token — ArgmaxOnHost's accepted_len / best_path are constants, not read back)."""
        if not self.plain_only:  # the graph's own verdict
            return super()._chain_verdict(y, tokens)
        target: list[int] = y["node_argmax"][0].tolist()
        return target[: _leading_hits(tokens, target, len(tokens)) + 1]

    def _make_binding(self, mode: str, r0: int, r1: int, inputs: Spec, outputs: Spec) -> Bound:
        """A binding of the contract's tensors (`builder.export.contract.TARGET`) at the sizes of `inputs`;
        the host side's own layout (`inputs`, `outputs`) must be exactly that."""
        (b, t), (_, tv), (_, p, w) = inputs["tokens"][0], inputs["verify_index"][0], inputs["paths"][0]
        sizes = {"B": b, "T": t, "Tv": tv, "P": p, "W": w, "C": self.spec.hidden_size}
        if self.spec.medusa is not None:
            sizes |= {"Hm": self.spec.medusa[0], "K": self.spec.medusa[1]}
        x, y = call_spec(TARGET, sizes, rejection=mode == "rejection", medusa=self.spec.medusa is not None)
        for what, ours, theirs in (("inputs", x, inputs), ("outputs", y, outputs)):
            if {k: (v[0], np.dtype(v[1])) for k, v in theirs.items()} != ours:
                raise ValueError(f"the host side's {what} {dict(theirs)} are not the graph contract's {ours}")
        session = self._session(mode)
        same = {"position_ids": "past_len"} if t == 1 else {}  # a root's position is its row's past length
        if mode == "greedy" and self.plain_only:
            return ArgmaxOnHost(session, x, y, self.kv.ortvalues(r0, r1), self.spec.vocab_size, same)
        return Bound(session, x, y, self.kv.ortvalues(r0, r1), same)

    def _session(self, mode: str):
        if mode not in self._sessions:
            if self.spec.rejection is None:
                raise GreedyOnly(
                    "this engine verifies greedily only (the recipe's speculative.verification is "
                    "greedy): sampling (temperature > 0) needs speculative.verification: rejection"
                )
            self._sessions[mode] = make_session(self.spec.rejection, self.threads)
        return self._sessions[mode]


class ArgmaxOnHost(Bound):
    """A binding of the plain-steps graph (`builder.export.verify.plain_twin`), which stops at the verify nodes'
    float32 logits: `run` takes their greedy tokens with NumPy into `node_argmax` (ties: the lowest id, as ONNX's
    ArgMax; ONNX Runtime's kernel is scalar, ~4 µs per 4096-entry row against NumPy's SIMD ~0.3-0.5) and the first
    into `output_tokens` — a root-only step's verdict, with `accepted_len` 1 and `best_path` 0 set once here (a
    chain's binding has T > 1 and its verdict is rewritten every step by `OrtEngine._verify_on_host`). Nothing
    is allocated per run. `fixed_plain_verdict`: `BatchedTarget.step_plain` need not read those constants back."""

    fixed_plain_verdict = True

    def __init__(
        self,
        session,
        inputs: Spec,
        outputs: Spec,
        caches,
        vocab_size: int,  # noqa: ANN001
        same: Mapping[str, str] | None = None,
    ) -> None:
        (b, tv), _ = outputs["node_argmax"]
        super().__init__(session, inputs, {**outputs, PLAIN_LOGITS: ((b, tv, vocab_size), np.float32)}, caches, same)
        y = self.y
        y["accepted_len"][...] = 1  # best_path stays 0 (the arrays start zeroed)
        self._logits, self._argmax = y[PLAIN_LOGITS], y["node_argmax"]
        self._tokens0, self._argmax0 = y["output_tokens"][:, :1], self._argmax[:, :1]

    def run(self) -> None:
        self.run_plain()
        self._tokens0[...] = self._argmax0  # (ndarray assignment, not np.copyto: see run_plain)

    def run_plain(self) -> None:
        """`run` for a caller that reads the greedy tokens from `node_argmax` (`BatchedTarget.step_plain`,
        `decode_greedy`, and `step_chain` through this engine's `_chain_verdict`): `output_tokens` is left as it was —
        one NumPy call less after the session call, ~9 µs cold at 16 rows."""
        # ndarray methods, not np.argmax / np.copyto: their Python-level dispatch runs cold right after a session
        # call (the session evicts the host's caches) and cost ~8 µs more per step (measured on the tiny fixture)
        self.session.run_with_iobinding(self.io)
        self._logits.argmax(axis=2, out=self._argmax)


def _leading_hits(drafted: list[int], target: list[int], nodes: int) -> int:
    """Accepted drafts of a chain: the leading k with drafted[k + 1] == target[k] (the target's token after node k)."""
    n, last = 0, nodes - 1
    while n < last and drafted[n + 1] == target[n]:
        n += 1
    return n
