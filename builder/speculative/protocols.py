"""The runtime interface — protocols and the data that crosses them: batched engines that verify inside the step,
drafters, draft networks, and the optional capabilities the decoding loop's fast paths use.

Engines (`builder/engines`: the torch reference, ONNX Runtime, TensorRT) hold the target model
and the KV cache of up to `max_batch_size` sequences, each with its own committed length. Sequences
join (`start`: prefill) and leave (`release`) between steps. One `step` runs the target over every
given sequence's draft (tree attention), verifies it (the `tree_verify` contract, inside the engine:
logits never leave it), commits the accepted chain's KV and returns per sequence what the decoding
loop and the drafters need next. Arrays at this interface are NumPy (cheap per call); engines convert
at their boundary. Words as in the glossary (`builder.speculative`).

    engine.start(prompts, sampling)       -> seq ids, PrefillResult (first token per sequence)
    engine.step(seqs, drafts, sampling)   -> StepResult (accepted chain, emitted tokens, hidden, …)
    engine.release(seq)

Sampling randomness is an input (`SamplingBatch.uniforms`): the loop draws it from each request's own
seeded generator, so a request's output does not depend on what it was batched with.

Capabilities (runtime-checkable protocols of methods; `implements` tells, once, when a `Decoder` is made):

    engines   ChainStepping (step_chain), GreedyBursting (decode_greedy), PlainStepping (step_plain): greedy steps
              with less host work, each what `step` would do with that call (`builder.engines.batched`)
    drafters  EmittedUpdates (update_emitted), ChainProposing (propose_chain, chains_only), Budgeted (set_budget),
              PlainUpdates (update_plain: a plain step at a budget of 1), Configurable (check, configure:
              per-request Lookahead settings)

The first five serve the loop's fast paths (`builder.speculative.fast_paths`); Budgeted and Configurable serve the
reference step and `Decoder.add`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Container, Protocol, Sequence, Sized, runtime_checkable

import numpy as np

from plugins.tree_verify.contract import TEMPERATURE_EPS


@dataclass(frozen=True)
class Draft:
    """One sequence's draft for one step: nodes with an explicit attention mask, and the paths to verify.

    Drafts made from a static tree share the tree's (read-only) mask, depth and paths arrays.
    All drafters are deterministic (top-k trees, n-grams): q = 1 in rejection mode.
    """

    tokens: np.ndarray  # [T] int64; node 0 = root (the newest emitted token, not yet cached)
    mask: np.ndarray  # [T, T] bool; mask[i, j]: node i attends node j; only j <= i, diagonal true
    depth: np.ndarray  # [T] int64; node i sits at position committed_len + depth[i]
    paths: np.ndarray  # [P, D+1] int32 node indices, -1 padded; every row starts with 0

    @property
    def num_nodes(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def width(self) -> int:  # D+1
        return int(self.paths.shape[1])


_ROOT_MASK = np.ones((1, 1), dtype=bool)
_ROOT_DEPTH = np.zeros(1, dtype=np.int64)
_ROOT_PATHS = np.zeros((1, 1), dtype=np.int32)
for _a in (_ROOT_MASK, _ROOT_DEPTH, _ROOT_PATHS):
    _a.flags.writeable = False


_ROOTS: dict[int, Draft] = {}  # root token -> its root-only draft (read-only tokens; plain steps build nothing)


def root_only(root_token: int) -> Draft:
    """A tree of the root alone: one plain decoding step (one shared, read-only draft per token)."""
    draft = _ROOTS.get(root_token)
    if draft is None:
        tokens = np.array([root_token], dtype=np.int64)
        tokens.flags.writeable = False
        draft = Draft(tokens, _ROOT_MASK, _ROOT_DEPTH, _ROOT_PATHS)
        if len(_ROOTS) >= 65536:
            _ROOTS.clear()
        _ROOTS[int(root_token)] = draft
    return draft


@dataclass(frozen=True)
class Sampling:
    """One request's sampling settings. temperature 0 = greedy; uniforms come from `seed`."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0

    @property
    def greedy(self) -> bool:
        return self.temperature <= TEMPERATURE_EPS


@dataclass
class SamplingBatch:
    """Verification inputs of one engine call, one row per sequence (tree_verify's contract)."""

    temperature: np.ndarray  # [B] fp32; <= TEMPERATURE_EPS verifies the row greedily
    top_p: np.ndarray  # [B] fp32 in (0, 1]
    uniforms: np.ndarray  # [B, W] fp32 in [0, 1); W >= every draft's D+1

    @property
    def greedy(self) -> bool:
        """Every row verifies greedily (remembered for a read-only temperature array: the loop's shared batches)."""
        t = self.temperature
        known = self.__dict__.get("_greedy_of")
        if known is not None and known[0] is t:
            return bool(known[1])
        greedy = bool((t <= TEMPERATURE_EPS).all())
        if not t.flags.writeable:
            self.__dict__["_greedy_of"] = (t, greedy)
        return greedy

    @classmethod
    def all_greedy(cls, batch: int, width: int) -> "SamplingBatch":
        return cls(np.zeros(batch, np.float32), np.ones(batch, np.float32), np.zeros((batch, width), np.float32))


@dataclass
class PrefillResult:
    """What `Engine.start` returns for the sequences it started (in the order given)."""

    tokens: np.ndarray  # [B] int64 the first generated token of each sequence
    hidden: list[np.ndarray]  # B × [n_b, C] fp32 hidden state (after the final norm) at every prompt position
    medusa_topk: np.ndarray | None = None  # [B, H, K] int64 each Medusa head's top-k at the last position


@dataclass
class StepResult:
    """What one `Engine.step` returns, one row per given sequence (in the order given).

    Valid until the engine's next `step`: engines may reuse the arrays (`builder.engines.batched`), so a caller
    that keeps anything past that copies it (the decoding loop and the drafters read what they need first).
    """

    accepted_len: np.ndarray  # [B] int64 tokens emitted = accepted draft tokens + 1 (bonus), >= 1
    chain: np.ndarray  # [B, W] int64 accepted node indices, root first (accepted_len of them), -1 padded
    tokens: np.ndarray  # [B, W] int64 emitted tokens (accepted drafts, then the bonus token), -1 padded
    hidden: np.ndarray  # [B, W, C] fp32 hidden state at the chain's nodes (rows >= accepted_len unspecified)
    node_argmax: np.ndarray  # [B, T] int64 the target's greedy token at every node (Lookahead's window)
    medusa_topk: np.ndarray | None = None  # [B, H, K] int64 Medusa heads' top-k at the last accepted node

    def emitted(self, row: int) -> list[int]:
        return self.tokens[row, : self.accepted_len[row]].tolist()

    def accepted_chain(self, row: int) -> list[int]:
        return self.chain[row, : self.accepted_len[row]].tolist()


_UPPER: dict[int, np.ndarray] = {}  # T -> [T, T] bool strictly upper triangle (cached)
_CHECKED: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}  # read-only (mask, depth) pairs already checked


_PATHS_OK: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # read-only trees checked


def check_paths(draft: Draft) -> None:
    """A draft's paths against its tree: each row starts at the root, holds node indices then -1 padding, and
    its k-th node sits at depth k attending exactly the row's nodes 0..k — so the KV it wrote at committed + k
    is the causal one and the accepted chain can be compacted into place. Read-only trees are checked once."""
    paths, depth, mask = draft.paths, draft.depth, draft.mask
    key = (id(paths), id(mask), id(depth))
    if key in _PATHS_OK:
        return
    t = draft.num_nodes
    if paths.ndim != 2 or 0 in paths.shape or paths.dtype != np.int32:
        raise ValueError(f"paths must be a non-empty int32 [P, D+1] array, got {paths.dtype} {list(paths.shape)}")
    if (paths[:, 0] != 0).any() or paths.min() < -1 or paths.max() >= t:
        raise ValueError(f"every path must start at the root (node 0) and hold node indices 0..{t - 1} or -1 (padding)")
    valid = paths >= 0  # [P, W]
    if (valid[:, 1:] & ~valid[:, :-1]).any():
        raise ValueError("a path's -1 padding must come after all its nodes")
    nodes = np.where(valid, paths, 0)  # [P, W]
    w = paths.shape[1]
    ks = np.arange(w)
    if (np.where(valid, depth[nodes], ks) != ks).any():
        raise ValueError("the k-th node of a path must sit at depth k")
    seen = mask[nodes[:, :, None], nodes[:, None, :]]  # [P, W, W]: node k of the path attends its node j
    need = valid[:, :, None] & valid[:, None, :] & (ks[None, :] <= ks[:, None])[None]
    if (need & ~seen).any() or (np.where(valid, mask.sum(-1)[nodes], ks + 1) != ks + 1).any():
        raise ValueError("node k of a path must attend exactly the path's nodes 0..k (its ancestors)")
    if not (paths.flags.writeable or mask.flags.writeable or depth.flags.writeable) and len(_PATHS_OK) < 4096:
        _PATHS_OK[key] = (paths, mask, depth)  # kept alive, so the ids stay theirs


def check_draft(draft: Draft, vocab_size: int) -> None:
    """A draft's arrays against the contract of `Draft` (shapes, dtypes, mask structure, token range).

    Engines check every draft (`builder.speculative.batch.DraftBatch` does it for a whole step at once, by
    the same rules: `check_trees`). The structure of a shared, read-only tree (static trees, Lookahead
    layouts) is checked once and remembered (the pair is kept alive, so its ids stay its own); only the
    tokens are checked per draft then.
    """
    t = draft.num_nodes
    if draft.tokens.shape != (t,) or t == 0 or draft.tokens.dtype != np.int64:
        raise ValueError(f"tokens must be a non-empty int64 [T] array, got {draft.tokens.dtype} {draft.tokens.shape}")
    if draft.tokens.min() < 0 or draft.tokens.max() >= vocab_size:
        raise ValueError(f"draft token ids must lie in [0, {vocab_size})")
    check_tree(draft)


def check_tree(draft: Draft) -> None:
    """The structure part of `check_draft`: mask, depth and paths against the draft's node count."""
    t = draft.num_nodes
    key = (id(draft.mask), id(draft.depth))
    if key in _CHECKED:
        check_paths(draft)
        return
    if draft.mask.shape != (t, t) or draft.mask.dtype != bool:
        raise ValueError(f"mask must be bool [{t}, {t}], got {draft.mask.dtype} {draft.mask.shape}")
    upper = _UPPER.get(t)
    if upper is None:
        upper = _UPPER[t] = np.triu(np.ones((t, t), dtype=bool), 1)
    if not draft.mask.diagonal().all() or (draft.mask & upper).any():
        raise ValueError("mask must have a true diagonal and attend earlier nodes only (j <= i)")
    if draft.depth.shape != (t,) or draft.depth.min() < 0 or draft.depth[0] != 0:
        raise ValueError(f"depth must be a non-negative int [{t}] array with depth[0] = 0, got {draft.depth.tolist()}")
    if not draft.mask.flags.writeable and not draft.depth.flags.writeable and len(_CHECKED) < 4096:
        _CHECKED[key] = (draft.mask, draft.depth)
    check_paths(draft)  # the commit compacts KV along the paths: a bad one must never reach it


def check_trees(mask: np.ndarray, depth: np.ndarray, paths: np.ndarray) -> None:
    """`check_tree`'s rules for G trees of one shape at once (no cache): the batched face of `check_tree` and
    `check_paths`, with the same messages. mask [G, T, T] bool; depth [G, T] int; paths [G, P, W] int32."""
    g, t = depth.shape[0], mask.shape[-1]
    if mask.dtype != bool or mask.shape != (g, t, t):
        raise ValueError(f"mask must be bool [{t}, {t}], got {mask.dtype} {list(mask.shape[1:])}")
    ar = np.arange(t)
    upper = _UPPER.get(t)
    if upper is None:
        upper = _UPPER[t] = np.triu(np.ones((t, t), dtype=bool), 1)
    if not mask[:, ar, ar].all() or (mask & upper).any():
        raise ValueError("mask must have a true diagonal and attend earlier nodes only (j <= i)")
    if depth.shape != (g, t) or depth.min() < 0 or (depth[:, 0] != 0).any():
        raise ValueError(f"depth must be a non-negative int [{t}] array with depth[0] = 0")
    if paths.ndim != 3 or 0 in paths.shape or paths.dtype != np.int32:
        raise ValueError(f"paths must be a non-empty int32 [P, D+1] array, got {paths.dtype} {list(paths.shape[1:])}")
    if (paths[:, :, 0] != 0).any() or paths.min() < -1 or paths.max() >= t:
        raise ValueError(f"every path must start at the root (node 0) and hold node indices 0..{t - 1} or -1 (padding)")
    valid = paths >= 0  # [G, P, W]
    if (valid[:, :, 1:] & ~valid[:, :, :-1]).any():
        raise ValueError("a path's -1 padding must come after all its nodes")
    w = paths.shape[2]
    nodes = np.where(valid, paths, 0)  # [G, P, W]
    ks = np.arange(w)
    gi = np.arange(g)[:, None, None]  # [G, 1, 1]
    if (np.where(valid, depth[gi, nodes], ks) != ks).any():  # depth[gi, nodes]: [G, P, W] depth of each
        raise ValueError("the k-th node of a path must sit at depth k")
    seen = mask[gi[..., None], nodes[:, :, :, None], nodes[:, :, None, :]]  # [G, P, W, W]: node k attends node j
    need = valid[..., :, None] & valid[..., None, :] & (ks[None, :] <= ks[:, None])
    if (need & ~seen).any() or (np.where(valid, mask.sum(-1)[gi, nodes], ks + 1) != ks + 1).any():
        raise ValueError("node k of a path must attend exactly the path's nodes 0..k (its ancestors)")


class Engine(Protocol):
    """A target model over the KV caches of up to `max_batch_size` sequences."""

    name: str  # "torch" | "onnxruntime" | "tensorrt"
    vocab_size: int
    hidden_size: int
    max_seq_len: int  # KV capacity per sequence, in tokens
    max_batch_size: int

    @property
    def rows(self) -> Sized:
        """The sequences it holds, one row each (`Decoder.rows_in_use`: the loop's count unless a slot leaked)."""
        ...

    def start(self, prompts: Sequence[Sequence[int]], sampling: SamplingBatch) -> tuple[list[int], PrefillResult]:
        """Prefill new sequences (uniforms [B, 1]); returns their ids and first tokens."""
        ...

    def step(self, seqs: Sequence[int], drafts: Sequence[Draft], sampling: SamplingBatch) -> StepResult:
        """Run, verify and commit one draft per given sequence (at most one draft per sequence).

        Afterwards each sequence's cache holds its committed tokens followed by its accepted chain
        (root first), as if they had run causally; the bonus token is the next step's root.
        """
        ...

    def release(self, seq: int) -> None:
        """Forget a sequence; its cache rows are reused."""
        ...

    def committed_len(self, seq: int) -> int:
        """Tokens whose KV is committed for this sequence."""
        ...


class Drafter(Protocol):
    """Proposes drafts for a batch of sequences (Medusa heads, EAGLE draft layer, Lookahead n-grams)."""

    max_nodes: int  # the most nodes a draft of it holds, root included (the KV room a drafting sequence needs)

    def start(self, seqs: Sequence[int], prompts: Sequence[Sequence[int]], prefill: PrefillResult) -> None:
        """Begin new sequences after the engine's prefill."""
        ...

    def propose(self, seqs: Sequence[int], roots: Sequence[int]) -> list[Draft]:
        """Each sequence's next draft, rooted at its newest emitted token."""
        ...

    def update(self, seqs: Sequence[int], drafts: Sequence[Draft], result: StepResult) -> None:
        """Learn a step's result (the drafts are the ones `propose` returned, same order)."""
        ...

    def release(self, seq: int) -> None:
        """Forget a sequence."""
        ...


# -- capabilities: optional methods, each a protocol of its own ----------------------------------------------------


def implements(obj: object, capability: type) -> bool:
    """Whether obj's class has every method of `capability` (one of the runtime-checkable protocols below).

    Judged on the class, as `issubclass(type(obj), capability)`, not `isinstance`: a wrapper that passes unknown
    attributes on to what it wraps (`__getattr__`: fault injection, taps) has the capabilities it defines itself and
    no others — otherwise a fast path would call straight past the wrapper's `step` — whereas `isinstance` on a
    protocol follows `__getattr__` on Python 3.11. A class opts out of a capability it inherits by setting the method
    to None (`step_chain = None`: the tests' way to run the reference path of the same engine class)."""
    return obj is not None and issubclass(type(obj), capability)


@runtime_checkable
class ChainStepping(Protocol):
    """An engine's greedy step of its only sequence with a chain draft (node i at depth i; one token: a plain step)."""

    def step_chain(self, seq: int, tokens: list[int]) -> list[int] | None:
        """`tokens` root first; the tokens the step emits (accepted drafts, then the bonus), the KV committed — what
        `step` does with that draft — or None, with nothing done, where it does not apply (the caller then steps)."""
        ...


@runtime_checkable
class GreedyBursting(Protocol):
    """An engine's plain greedy steps of its only sequence back to back (nothing but the feed between them)."""

    def decode_greedy(self, seq: int, token: int, max_tokens: int, stop_ids: Container[int] = ()) -> list[int] | None:
        """Up to `max_tokens` steps from `token`, ending after a stop id or with the KV cache full: the tokens
        emitted, what as many `step_chain(seq, [token])` calls would emit; None, with nothing done, where
        `step_chain` would refuse."""
        ...


@runtime_checkable
class PlainStepping(Protocol):
    """An engine's greedy plain step of every sequence it holds: roots in, next tokens out, no `Draft` per row."""

    def step_plain(self, seqs: Sequence[int], roots: list[int]) -> list[int] | None:
        """`seqs` every held sequence in row order; what `step` with root-only drafts emits, or None, with nothing
        done, where it does not apply (the caller then steps)."""
        ...


@runtime_checkable
class EmittedUpdates(Protocol):
    """A drafter that learns a step from its emitted tokens alone (no `StepResult` needed)."""

    def update_emitted(self, seq: int, emitted: list[int], depth: int) -> None:
        """`update` for one sequence: the step's emitted tokens and its draft's depth (drafted tokens)."""
        ...


@runtime_checkable
class PlainUpdates(Protocol):
    """A drafter that learns a plain step of a drafting sequence from its tokens alone: the loop then runs the steps a
    budget of 1 turns off as plain steps (`PlainStepping`, no `Draft` per row), the very loop of a request that does
    not speculate."""

    def update_plain(self, seq: int, root: int, token: int) -> None:
        """What `propose` at a 1-node budget and `update` would learn of a step that fed `root` and emitted `token`."""
        ...


@runtime_checkable
class ChainProposing(Protocol):
    """A drafter whose drafts may be chains it hands over as token lists (no `Draft` made)."""

    def chains_only(self) -> bool:
        """Every draft it makes is a chain (fixed when it is made): `propose_chain` then gives each one."""
        ...

    def propose_chain(self, seq: int, root: int) -> list[int]:
        """`propose` for one sequence as tokens, root first; proposing again for the same root gives the same."""
        ...


@runtime_checkable
class Budgeted(Protocol):
    """A drafter that caps its drafts at a node budget (`DraftSchedule`)."""

    def set_budget(self, nodes: int | None) -> None:
        """At most `nodes` nodes per draft from now on, root included (None: no cap; 1: root-only drafts)."""
        ...


@runtime_checkable
class Configurable(Protocol):
    """A drafter whose settings a request may lower for itself (Lookahead's W, N, G)."""

    def check(self, window: int, ngram: int, verification_set: int) -> None:
        """ValueError unless these settings are allowed (each at most the drafter's)."""
        ...

    def configure(self, seq: int, window: int, ngram: int, verification_set: int) -> None:
        """Run this started sequence with these settings."""
        ...


@dataclass
class DraftOutput:
    """One EAGLE draft-network call: predicted hidden states and their top-k continuations. The arrays may be
    the net's own output buffers (no copy per call): valid until the net's next `extend` / `expand`; a caller
    copies what it keeps longer."""

    hidden: np.ndarray  # [B, F, C] fp32 the draft's prediction of the target's next hidden state
    topk_tokens: np.ndarray  # [B, F, K] int64 best first
    topk_logprobs: np.ndarray  # [B, F, K] fp32 draft log-probabilities (<= 0)


class EagleNet(Protocol):
    """The EAGLE draft layer with its own KV cache per sequence (torch and ONNX Runtime faces).

    A pair (h[i], t[i+1]) — target hidden state at position i, token at i+1 — sits at position i.
    `extend` runs and commits new pairs causally; `expand` runs tentative tree nodes after the
    committed pairs (dropped by the next `extend`).
    """

    top_k: int
    hidden_size: int

    def start(self, seqs: Sequence[int]) -> None: ...

    def release(self, seq: int) -> None: ...

    def committed_len(self, seq: int) -> int: ...

    def committed_lens(self, seqs: Sequence[int]) -> np.ndarray:
        """[B] int64 `committed_len` of each sequence."""
        ...

    def extend(
        self,
        seqs: Sequence[int],
        tokens: np.ndarray,  # [B, M] int64 t[i+1] of each new pair, right-padded
        hidden: np.ndarray,  # [B, M, C] fp32 h[i]
        num_new: np.ndarray,  # [B] int64 valid pairs per row (>= 1)
    ) -> DraftOutput:
        """Run and commit new pairs; the output holds each row's LAST valid pair only (F = 1)."""
        ...

    def expand(
        self,
        seqs: Sequence[int],
        tokens: np.ndarray,  # [B, F] int64 the frontier nodes' tokens
        hidden: np.ndarray,  # [B, F, C] fp32 their parents' draft outputs
        position_ids: np.ndarray,  # [B, F] int64
        write_offset: int,  # tentative slots already used this step (the frontier goes after them)
        tree_mask: np.ndarray,  # [B, F, write_offset + F] bool over the tentative slots
    ) -> DraftOutput:
        """Run a tentative tree level (every row has F valid nodes)."""
        ...
