"""The decoding loop's request and result types (`builder.speculative.decoding` re-exports them): a `Request`, the
`Generation` it yields, the per-batch-size `DraftSchedule`, and a `Decoder`'s `Timing` and `Totals`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from builder.speculative.protocols import Sampling


@dataclass(frozen=True)
class Request:
    prompt: tuple[int, ...]
    max_new_tokens: int
    sampling: Sampling = Sampling()
    stop_ids: tuple[int, ...] = ()
    speculate: bool = True  # False: plain decoding for this request even when a drafter is present
    stop_sequences: tuple[tuple[int, ...], ...] = ()  # finish once the output ends with one (kept in the output)
    lookahead: tuple[int, int, int] | None = None  # this request's Lookahead W, N, G (each <= the drafter's)


class DraftSchedule:
    """Draft-node budget per batch size: [(max_batch, max_nodes), …] sorted by max_batch.

    A step with b active sequences uses the nodes of the first entry with b <= max_batch; past the
    last entry speculation is off. Nodes count the whole tree, root included: 1 = root only = off.
    The empty schedule puts no cap on any batch size.
    """

    def __init__(self, entries: Sequence[Sequence[int]] = ()) -> None:
        pairs = [(int(b), int(n)) for b, n in entries]
        if any(b < 1 or n < 1 for b, n in pairs) or [b for b, _ in pairs] != sorted({b for b, _ in pairs}):
            raise ValueError(
                f"draft schedule {pairs}: need [max_batch >= 1, max_nodes >= 1] pairs, max_batch strictly increasing"
            )
        self.entries = pairs

    def budget(self, batch: int) -> int | None:
        """Node budget for a step of `batch` sequences (None: no cap)."""
        if not self.entries:
            return None
        return next((n for b, n in self.entries if batch <= b), 1)


@dataclass(slots=True)
class Generation:
    token_ids: list[int]  # generated tokens only
    steps: int = 0  # target steps after prefill
    accepted_per_step: list[int] = field(default_factory=list)  # accepted draft tokens per step (bonus excluded)
    finish_reason: str = ""  # "length" | "stop" | "cancelled"
    drafted: int = 0  # draft tokens proposed over all steps (root excluded)

    @property
    def tau(self) -> float:
        """Acceptance length: tokens emitted per target step (bonus token included)."""
        return (sum(self.accepted_per_step) + self.steps) / self.steps if self.steps else 0.0

    @property
    def accepted_at_depth(self) -> list[int]:
        """Steps whose accepted length reached depth d, for d = 1, 2, …"""
        most = max(self.accepted_per_step, default=0)
        return [sum(a >= d for a in self.accepted_per_step) for d in range(1, most + 1)]


@dataclass
class Timing:
    """Wall time spent per phase, summed over a Decoder's life (seconds)."""

    prefill: float = 0.0
    draft: float = 0.0  # propose + update
    target: float = 0.0  # engine.step: target pass, verification, commit
    steps: int = 0


@dataclass
class Totals:
    """Counters over a Decoder's life (metrics): every sequence step and token, whatever its request's fate."""

    sequence_steps: int = 0  # Σ over target steps of the sequences in them
    drafting_steps: int = 0  # the same, of drafting sequences only (what a `BudgetRule` learns acceptance from)
    drafted: int = 0  # draft tokens proposed (root excluded)
    accepted: int = 0  # draft tokens the target accepted (bonus excluded)
    emitted: int = 0  # tokens handed to requests (prefill's first token included; cut at max_tokens / stop)
