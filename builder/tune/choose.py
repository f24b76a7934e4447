"""The choosers: each picks the setting with the most tokens per millisecond, E[τ] / c.

    Scored        one candidate: its recipe fields, tree nodes per step (root included), E[τ], c (ms)
    best          argmax of E[τ] / c (ties: fewer nodes, then the earlier candidate)
    choose_static the Medusa / EAGLE-1 tree: over depth caps D and sizes n, the n most accepted measured
                  choices of depth <= D (`ranked_measured_choices`), scored with the exact cost of that tree
    schedule      the per-batch-size draft budget (`triton.draft_schedule`): at each batch size the budget
                  whose (truncated) draft has the most tokens per ms, speculation off (1 node) included

`choose_static` is exact when the cost depends on the tree only through its size and depth (and grows
with depth): for a fixed size the top-n choices maximise Σ P, and restricting to depth <= D covers every
depth. With a cost that depends on the level widths too (EAGLE-1 draft calls) it is a search over those
top-n families, each scored exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from builder.speculative.tree import sort_choices
from builder.speculative.tree_search import ranked_measured_choices
from builder.tune.expect import expected_tau

Choice = tuple[int, ...]


@dataclass(frozen=True)
class Scored:
    nodes: int  # tree nodes per step, root included (1 = speculation off)
    tau: float  # E[τ]: tokens emitted per step
    cost_ms: float  # c: ms per step (target + drafter)
    setting: dict[str, Any] = field(default_factory=dict, compare=False)  # the method's recipe fields

    @property
    def rate(self) -> float:
        """Tokens per millisecond."""
        return self.tau / self.cost_ms

    def speedup(self, plain_ms: float) -> float:
        """Predicted speedup over plain decoding (τ = 1 at plain_ms per step)."""
        return self.rate * plain_ms

    def to_json(self, plain_ms: float | None = None) -> dict[str, Any]:
        out = {"nodes": self.nodes, "tau": round(self.tau, 4), "cost_ms": round(self.cost_ms, 5), **self.setting}
        if plain_ms is not None:
            out["speedup"] = round(self.speedup(plain_ms), 4)
        return out


def best(candidates: Iterable[Scored]) -> Scored:
    """The candidate with the most tokens per ms; ties go to fewer nodes, then to the earlier one."""
    top: Scored | None = None
    for c in candidates:
        if top is None or c.rate > top.rate * (1 + 1e-12) or (c.rate >= top.rate * (1 - 1e-12) and c.nodes < top.nodes):
            top = c
    if top is None:
        raise ValueError("no candidate to choose from")
    return top


def choose_static(
    probability: Mapping[Choice, float],
    cost: Callable[[Sequence[Choice], float], float],
    max_nodes: int,
    max_depth: int,
) -> tuple[Scored, list[Scored]]:
    """The best static tree of at most `max_nodes` nodes (root included) and depth <= max_depth, and the best
    tree per size (`cost(choices, tau)` -> ms per step). The root-only tree (n = 1) is a candidate."""
    per_size: dict[int, Scored] = {}
    for depth in range(1, max_depth + 1):
        ranked = ranked_measured_choices(probability, max_nodes - 1, max_depth=depth)
        for n in range(len(ranked) + 1):
            chosen = sort_choices(ranked[:n])
            tau = expected_tau(chosen, probability)
            cand = Scored(n + 1, tau, cost(chosen, tau), {"choices": [list(c) for c in chosen]})
            if n + 1 not in per_size or cand.rate > per_size[n + 1].rate:
                per_size[n + 1] = cand
    table = [per_size[n] for n in sorted(per_size)]
    return best(table), table


def schedule(options: Callable[[int], list[Scored]], batches: Sequence[int], full_nodes: int) -> list[list[int]]:
    """[[max_batch, max_nodes], …] for `triton.draft_schedule`: at each batch size b the node budget of the
    best of `options(b)` (candidates at that batch size, speculation off included); consecutive batch sizes
    with the same budget merge into the larger one. [] when every batch size keeps the full draft."""
    picks = [(b, best(options(b)).nodes) for b in batches]
    if all(n >= full_nodes for _, n in picks):
        return []
    merged: list[list[int]] = []
    for b, n in picks:
        if merged and merged[-1][1] == n:
            merged[-1][0] = b
        else:
            merged.append([b, n])
    return merged
