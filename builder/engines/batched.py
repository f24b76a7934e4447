"""The host side of an engine over the exported target step graph, shared by the ONNX Runtime and the
TensorRT engines: the `Engine` protocol (builder.speculative.engine) minus the runtime.

`BatchedTarget` keeps the running batch in dense rows (`builder.engines.rows`), fills the graph's inputs
for a prefill or a step (I/O contract: `builder.export`), reads the verdict, commits the accepted chain
(KV compaction in the backend's buffer) and hands back NumPy results. A backend supplies

* `kv` — its KV buffers (`KVRows`: compact a committed chain, move a row, capacity), and
* `_make_binding(mode, r0, r1, inputs, outputs)` — a `Binding` for rows [r0, r1) of the greedy or
  rejection graph: host arrays `x` (inputs) and `y` (outputs) of exactly the shapes `target_io` gives,
  and `run()`, after which `y` holds the graph's outputs and the rows' caches the new nodes' KV.

Subclasses call `check_capacity` before allocating anything (the base does not check again).

Failures leave nothing behind: a prefill that raises takes its new rows back (`RowTable.adding`), every
draft's paths are checked against its tree before the commit compacts KV along them (`check_paths`), and
an accepted length the draft cannot hold is refused before anything moves.

Bindings are kept per shape key (mode, rows, T, Tv, P, W) in the backend's cache, so steady-state
decoding allocates nothing. The greedy graph serves all-greedy batches; a batch with any sampled row
runs the rejection graph.
"""

from __future__ import annotations

from collections import OrderedDict
from functools import lru_cache
from typing import Callable, Hashable, Mapping, Protocol, Sequence


import numpy as np

from builder.engines.rows import RowTable
from builder.speculative.engine import Draft, PrefillResult, SamplingBatch, StepResult, check_draft

Shape = tuple[int, ...]
Spec = Mapping[str, tuple[Shape, type]]  # name -> (shape, numpy dtype)


class Binding(Protocol):
    x: dict[str, np.ndarray]  # inputs, filled in place before run()
    y: dict[str, np.ndarray]  # outputs, valid after run()

    def run(self) -> None: ...


class KVRows(Protocol):
    capacity: int

    def compact(self, row: int, start: int, nodes: np.ndarray) -> None: ...
    def move_row(self, dst: int, src: int, length: int) -> None: ...


class BindingCache(Protocol):
    def get(self, key: Hashable, build: Callable[[], Binding]) -> Binding: ...


class LruBindings:
    """The most recently used bindings, keyed by shape; built on demand."""

    def __init__(self, size: int = 32) -> None:
        self.size = size
        self._items: OrderedDict[Hashable, Binding] = OrderedDict()

    def get(self, key: Hashable, build: Callable[[], Binding]) -> Binding:
        item = self._items.get(key)
        if item is None:
            item = self._items[key] = build()
            if len(self._items) > self.size:
                self._items.popitem(last=False)
        else:
            self._items.move_to_end(key)
        return item


def target_io(mode: str, b: int, t: int, tv: int, p: int, w: int, hidden_size: int,
              medusa: tuple[int, int] | None) -> tuple[dict[str, tuple[Shape, type]], dict[str, tuple[Shape, type]]]:  # fmt: skip
    """(inputs, outputs) of one target-graph call: name -> (shape, numpy dtype); caches not included."""
    inputs: dict[str, tuple[Shape, type]] = {
        "tokens": ((b, t), np.int64), "position_ids": ((b, t), np.int64), "tree_mask": ((b, t, t), np.bool_),
        "past_len": ((b,), np.int64), "num_nodes": ((b,), np.int64), "verify_index": ((b, tv), np.int64),
        "paths": ((b, p, w), np.int32),
    }  # fmt: skip
    if mode == "rejection":
        inputs |= {"temperature": ((b,), np.float32), "top_p": ((b,), np.float32), "uniforms": ((b, w), np.float32)}
    outputs: dict[str, tuple[Shape, type]] = {
        "accepted_len": ((b,), np.int32), "best_path": ((b,), np.int32), "output_tokens": ((b, w), np.int32),
        "node_argmax": ((b, tv), np.int64), "hidden": ((b, t, hidden_size), np.float32),
    }  # fmt: skip
    if medusa is not None:
        outputs["medusa_topk"] = ((b, *medusa), np.int64)
    return inputs, outputs


@lru_cache(maxsize=64)
def _eye(t: int) -> np.ndarray:
    eye: np.ndarray = np.eye(t, dtype=bool)
    eye.flags.writeable = False
    return eye


class BatchedTarget:
    """The `Engine` protocol over a target step graph; subclasses supply the runtime (module docstring)."""

    name = "batched"

    def __init__(self, kv: KVRows, bindings: BindingCache, *, vocab_size: int, hidden_size: int,
                 medusa: tuple[int, int] | None, max_seq_len: int, max_batch_size: int) -> None:  # fmt: skip
        self.kv, self._bound = kv, bindings
        self._last: tuple[Hashable, Binding | None] = ((), None)  # the latest (shape key, binding): the fast path
        self.vocab_size, self.hidden_size, self.medusa = vocab_size, hidden_size, medusa
        self.max_seq_len, self.max_batch_size = max_seq_len, max_batch_size
        self.rows = RowTable(max_batch_size)
        self.committed: np.ndarray = np.zeros(max_batch_size, dtype=np.int64)  # per row

    @staticmethod
    def check_capacity(max_seq_len: int, capacity: int) -> None:
        if max_seq_len >= capacity:
            raise ValueError(f"max_seq_len {max_seq_len} leaves no room for draft nodes in the exported "
                             f"capacity {capacity}")

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
        with self.rows.adding(len(prompts)) as ids:  # a failing prefill takes its rows back
            try:
                return ids, self._prefill(prompts, lens, sampling, r0)
            except BaseException:
                self.committed[r0 : r0 + len(prompts)] = 0
                raise

    def _prefill(self, prompts: Sequence[Sequence[int]], lens: list[int], sampling: SamplingBatch, r0: int) -> PrefillResult:
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
        hidden = [y["hidden"][i, : lens[i]].copy() for i in range(b)]  # b × [n_i, C]
        topk = y["medusa_topk"].copy() if "medusa_topk" in y else None  # [b, H, K]
        return PrefillResult(y["output_tokens"][:, 0].astype(np.int64), hidden, topk)

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
            check_draft(d, self.vocab_size)  # tokens, mask, depth and paths (the commit compacts KV along them)
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
        x["tree_mask"][:] = _eye(t)  # padding nodes (and idle rows) attend themselves only
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
        out = StepResult(np.empty(b, np.int64), np.full((b, w), -1, np.int64), np.full((b, w), -1, np.int64),
                         np.zeros((b, w, self.hidden_size), np.float32), np.full((b, t), -1, np.int64),
                         None if "medusa_topk" not in y else y["medusa_topk"][rows])  # fmt: skip
        acc, best, toks, hidden, argmax = (y[k] for k in ("accepted_len", "best_path", "output_tokens", "hidden",
                                                           "node_argmax"))  # fmt: skip
        for row, d in zip(rows, drafts):  # every verdict is checked before any KV moves
            k, p = int(acc[row]), int(best[row])
            if not (0 <= p < d.paths.shape[0] and 1 <= k <= d.width and d.paths[p, k - 1] >= 0):
                raise RuntimeError(f"the engine accepted {k} nodes of path {p}, outside the draft's "
                                   f"{d.paths.shape[0]} paths of width {d.width}")  # fmt: skip
        for i, (row, d) in enumerate(zip(rows, drafts)):
            k = int(acc[row])
            chain = d.paths[int(best[row]), :k]
            start = int(self.committed[row])
            self.kv.compact(row, start, chain)
            self.committed[row] = start + k
            out.accepted_len[i] = k
            out.chain[i, :k] = chain
            out.tokens[i, :k] = toks[row, :k]
            out.hidden[i, :k] = hidden[row, chain]
            out.node_argmax[i, : d.num_nodes] = argmax[row, : d.num_nodes]
        return out

    # -- bindings --------------------------------------------------------------------------------

    def _binding(self, sampling: SamplingBatch, r0: int, r1: int, t: int, tv: int, p: int, w: int) -> Binding:
        mode = "greedy" if sampling.greedy else "rejection"
        key = (mode, r0, r1, t, tv, p, w)
        last_key, last = self._last
        if key == last_key and last is not None:  # steady state: the same shape as the previous call
            return last
        bound = self._bound.get(key, lambda: self._build(mode, r0, r1, t, tv, p, w))
        self._last = (key, bound)
        return bound

    def _build(self, mode: str, r0: int, r1: int, t: int, tv: int, p: int, w: int) -> Binding:
        inputs, outputs = target_io(mode, r1 - r0, t, tv, p, w, self.hidden_size, self.medusa)
        bound = self._make_binding(mode, r0, r1, inputs, outputs)
        if tv == t:
            bound.x["verify_index"][:] = np.arange(t)  # a step verifies every node; set once
        return bound

    def _make_binding(self, mode: str, r0: int, r1: int, inputs: Spec, outputs: Spec) -> Binding:
        raise NotImplementedError
