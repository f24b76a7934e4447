"""The decoding loop: one algorithm over any engine (torch reference, ORT, TensorRT) and drafter.

    out = engine.prefill(prompt);  first token = verify(root-only tree over out's last row)
    loop: draft = drafter.propose(root) → out = engine.step(draft) → tree_verify → engine.commit(path)
          → drafter.update(...)

Without a drafter every step is a root-only tree (T = 1): plain autoregressive decoding through the
very same verification code, which is what makes "speculative output == plain output" a real test.
Words as in the glossary (`builder.speculative`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from builder.speculative.engine import Draft, Drafter, Engine
from plugins.tree_verify.reference import tree_verify


@dataclass(frozen=True)
class Sampling:
    """temperature 0 = greedy. Randomness comes from a seeded generator (reproducible runs)."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass
class Generation:
    token_ids: list[int]  # generated tokens only
    steps: int  # target steps after prefill
    accepted_per_step: list[int]  # accepted draft tokens per step (bonus token excluded)
    prefill_s: float = 0.0
    decode_s: float = 0.0
    accepted_at_depth: list[int] = field(default_factory=list)  # steps whose accepted length ≥ d

    @property
    def tau(self) -> float:
        """Acceptance length: tokens emitted per target step (bonus token included)."""
        return (sum(self.accepted_per_step) + self.steps) / self.steps if self.steps else 0.0


def root_only(root_token: int) -> Draft:
    """A tree of the root alone: one plain decoding step."""
    return Draft(tokens=torch.tensor([root_token], dtype=torch.int64), mask=torch.ones(1, 1, dtype=torch.bool),
                 depth=torch.zeros(1, dtype=torch.int64), paths=torch.zeros(1, 1, dtype=torch.int64))


class _Verifier:
    """tree_verify with this generation's sampling settings and random stream."""

    def __init__(self, sampling: Sampling) -> None:
        self.sampling = sampling
        self.gen = torch.Generator().manual_seed(sampling.seed)

    def __call__(self, logits: torch.Tensor, draft: Draft) -> tuple[list[int], list[int]]:
        # logits [T, V] -> (accepted chain of node indices, root first; emitted tokens incl. bonus)
        s = self.sampling
        kwargs = {}
        if not s.greedy:
            width = int(draft.paths.shape[1])
            kwargs = dict(temperature=torch.tensor([s.temperature]), top_p=torch.tensor([s.top_p]),
                          uniforms=torch.rand(1, width, generator=self.gen))
        res = tree_verify(logits[None], draft.tokens[None].to(torch.int32), draft.paths[None].to(torch.int32),
                          mode="greedy" if s.greedy else "rejection", **kwargs)
        n = int(res.accepted_len[0])
        chain = draft.paths[int(res.best_path[0]), :n].tolist()
        return chain, res.output_tokens[0, :n].tolist()


def generate(
    engine: Engine,
    prompt_ids: Sequence[int],
    max_new_tokens: int,
    drafter: Drafter | None = None,
    sampling: Sampling = Sampling(),
    stop_ids: Sequence[int] = (),
    on_tokens: Callable[[list[int]], None] | None = None,
) -> Generation:
    """Generate up to `max_new_tokens` after `prompt_ids`; stops after the first token in stop_ids."""
    verify = _Verifier(sampling)
    capacity = getattr(engine, "max_seq_len", None)
    engine.reset()
    t0 = time.perf_counter()
    out = engine.prefill(prompt_ids)
    _, first = verify(out.logits[-1:], root_only(0))
    if drafter is not None:
        drafter.reset(prompt_ids, out)
    t1 = time.perf_counter()
    result = Generation(token_ids=list(first), steps=0, accepted_per_step=[], prefill_s=t1 - t0)
    if on_tokens:
        on_tokens(list(first))
    stops = set(stop_ids)
    while len(result.token_ids) < max_new_tokens and result.token_ids[-1] not in stops:
        root = result.token_ids[-1]
        draft = drafter.propose(root) if drafter is not None else root_only(root)
        if capacity is not None and engine.committed_len + len(draft.tokens) > capacity:
            drafter, draft = None, root_only(root)  # no room left for trees: finish plainly
        step = engine.step(draft.tokens, draft.mask, draft.depth)
        chain, emitted = verify(step.logits, draft)
        engine.commit(chain)
        if drafter is not None:
            drafter.update(draft, step, chain, emitted)
        result.steps += 1
        result.accepted_per_step.append(len(chain) - 1)
        emitted = _clip(emitted, max_new_tokens - len(result.token_ids), stops)
        result.token_ids.extend(emitted)
        if on_tokens:
            on_tokens(emitted)
    result.decode_s = time.perf_counter() - t1
    result.token_ids = _clip(result.token_ids, max_new_tokens, stops)
    depth = max(result.accepted_per_step, default=0)
    result.accepted_at_depth = [sum(a >= d for a in result.accepted_per_step) for d in range(1, depth + 1)]
    return result


def _clip(tokens: list[int], limit: int, stops: set[int]) -> list[int]:
    """At most `limit` tokens, ending at the first stop token (kept)."""
    out = tokens[: max(limit, 0)]
    for i, tok in enumerate(out):
        if tok in stops:
            return out[: i + 1]
    return out
