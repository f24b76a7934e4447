"""Acceptance statistics from calibration prompts: what E[τ] is computed from.

Prompts come from the recipe's calibration source (`quantization.calibration.source`, e.g. builtin:stdlib:
the fixture corpus's training files), never from the HumanEval prompts the benches and the measured
speedup use. Each prompt is decoded greedily by the torch reference engine (`builder.engines.torch_engine`)
with a real drafter; greedy output does not depend on the drafter (lossless), so every setting is scored
on the same text.

* Static trees (Medusa, EAGLE-1): one decode with a wide *calibration tree* (`calibration_choices`), the
  engine tapped to record each step's accepted chain. Under greedy verification at most one sibling
  matches the target, so the accepted chain is exactly the part of the true continuation's rank path that
  lies in the tree: node c is accepted in a step iff c is a prefix of that path. Hence P(c) = accepted(c) /
  steps for every node of the calibration tree, and any prefix-closed subtree S of it has
  E[τ] = 1 + Σ_{c∈S} P(c) (`builder.tune.expect`) — no independence assumption between depths.
* EAGLE-2 (context-dependent trees) and Lookahead (a pool that depends on the whole history): τ measured
  by decoding with each candidate setting.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from builder.speculative.decoding import Decoder as Loop
from builder.speculative.decoding import Request
from builder.speculative.tree import sort_choices
from builder.speculative.tree_search import best_choices

Choice = tuple[int, ...]


@dataclass
class NodeStats:
    """Per-node acceptance of a static calibration tree (module docstring)."""

    candidates: tuple[Choice, ...]  # the calibration tree's choices (node order)
    steps: int = 0
    accepted: Counter = field(default_factory=Counter)  # choice -> steps whose accepted chain holds it

    def probability(self) -> dict[Choice, float]:
        """P(c): share of steps that accepted node c, for every measured node."""
        return {c: self.accepted[c] / self.steps if self.steps else 0.0 for c in self.candidates}

    def per_depth_rank(self) -> list[list[float]]:  # [depths][ranks]
        """P(rank r is right at depth d | its parent was accepted), pooled over the measured parents."""
        depths = max(len(c) for c in self.candidates)
        ranks = 1 + max(c[-1] for c in self.candidates)
        hit = [[0] * ranks for _ in range(depths)]
        seen = [[0] * ranks for _ in range(depths)]
        for c in self.candidates:
            hit[len(c) - 1][c[-1]] += self.accepted[c]
            seen[len(c) - 1][c[-1]] += self.accepted[c[:-1]] if len(c) > 1 else self.steps
        return [[round(h / s, 4) if s else 0.0 for h, s in zip(hr, sr)] for hr, sr in zip(hit, seen)]

    def to_json(self) -> dict[str, Any]:
        return {"steps": self.steps, "nodes": len(self.candidates), "per_depth_rank": self.per_depth_rank()}


@dataclass
class TauStats:
    """τ of one setting over the calibration prompts."""

    steps: int  # target steps after prefill, all prompts
    tokens: int  # tokens those steps emitted
    accepted_at_depth: list[int]  # steps that accepted >= d draft tokens, d = 1, 2, …

    @property
    def tau(self) -> float:
        return self.tokens / self.steps if self.steps else 1.0


def calibration_choices(max_depth: int, ranks: int, nodes: int) -> list[Choice]:
    """A wide static tree to measure P(c) on: the `nodes` choices of highest prior probability under a
    geometric prior (rank r right with probability 0.6 · 0.4^r at every depth), depth <= max_depth."""
    prior = [[0.6 * 0.4**r for r in range(ranks)] for _ in range(max_depth)]
    return sort_choices(best_choices(prior, nodes))


class _Tap:
    """An engine with a tap on `step`: each row's accepted chain (node indices, root first) is recorded."""

    def __init__(self, engine: Any) -> None:
        self.inner = engine
        self.chains: list[list[int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def step(self, seqs, drafts, sampling):
        res = self.inner.step(seqs, drafts, sampling)
        self.chains.extend(res.accepted_chain(row) for row in range(len(seqs)))
        return res


def _requests(prompts: Sequence[Sequence[int]], max_new: int, stop_ids: Sequence[int]) -> list[Request]:
    return [Request(tuple(p), max_new, stop_ids=tuple(stop_ids)) for p in prompts]


def node_stats(
    engine: Any,
    make_drafter: Callable[[], Any],
    choices: Sequence[Choice],
    prompts: Sequence[Sequence[int]],
    max_new: int,
    stop_ids: Sequence[int],
) -> NodeStats:
    """Decode with the calibration tree `choices` (the drafter's tree) and count accepted nodes."""
    ordered = tuple(sort_choices(choices))
    tap = _Tap(engine)
    Loop(tap, make_drafter()).run(_requests(prompts, max_new, stop_ids))
    stats = NodeStats(ordered, steps=len(tap.chains))
    for chain in tap.chains:
        stats.accepted.update(ordered[node - 1] for node in chain[1:])
    return stats


def tau_stats(
    engine: Any,
    make_drafter: Callable[[], Any],
    prompts: Sequence[Sequence[int]],
    max_new: int,
    stop_ids: Sequence[int],
) -> TauStats:
    """Decode every prompt with a fresh drafter; steps, tokens emitted by them, accepted depths."""
    gens = Loop(engine, make_drafter()).run(_requests(prompts, max_new, stop_ids))
    steps = sum(g.steps for g in gens)
    tokens = sum(g.steps + sum(g.accepted_per_step) for g in gens)
    most = max((a for g in gens for a in g.accepted_per_step), default=0)
    depth = [sum(a >= d for g in gens for a in g.accepted_per_step) for d in range(1, most + 1)]
    return TauStats(steps, tokens, depth)
