"""One request's state in the decoding loop (`SequenceState`) and its bookkeeping per step: the tokens a step
emitted, cut at the request's stop rules and length (`emit`), counted per sequence and over the loop (`account`).

Used by the reference step (`builder.speculative.decoding.Decoder.step`) and the fast paths
(`builder.speculative.fast_paths`) alike, so both emit exactly the same tokens and counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from builder.speculative.requests import Generation, Request, Totals

OnTokens = Callable[[int, list[int]], None]  # (request index, newly emitted tokens)


class EngineBroken(RuntimeError):
    """Releasing a sequence failed: the engine's rows or KV can no longer be trusted (the decoder is dead)."""


@dataclass(slots=True)
class SequenceState:
    """An active request: its generation so far, the engine's id for it, whether it drafts."""

    index: int  # the request's index in the caller's list
    req: Request
    gen: Generation
    rng: np.random.Generator  # the request's own sampling uniforms (seeded by req.sampling.seed)
    drafting: bool
    id: int = -1  # the engine's sequence id
    committed: int = 0  # tokens whose KV the engine holds (its committed_len: the prompt, then + accepted per step)
    stops: frozenset[int] = frozenset()  # req.stop_ids
    plain_until: int = 0  # no stop ids, no stop sequences: req.max_new_tokens (tokens emitted while the output stays
    # shorter need no scan), else 0
    tokens: list[int] = field(init=False)  # gen.token_ids (the same list: read per step without going through gen)

    def __post_init__(self) -> None:
        self.tokens = self.gen.token_ids

    def account(self, n: int, drafted: int, toks: list[int], totals: Totals, on_tokens: OnTokens | None) -> None:
        """One step of this sequence: `drafted` draft tokens, `n` emitted (toks[:n]: the accepted drafts, then the
        bonus)."""
        g = self.gen
        g.steps += 1
        g.drafted += drafted
        g.accepted_per_step.append(n - 1)
        self.committed += n
        if len(g.token_ids) + n < self.plain_until:  # no stop rule, not the last tokens
            g.token_ids += toks[:n]
            totals.emitted += n
            if on_tokens is not None:
                on_tokens(self.index, toks[:n])
        else:
            self.emit(toks[:n], totals, on_tokens)

    def emit(self, tokens: list[int], totals: Totals, on_tokens: OnTokens | None) -> None:
        """Append `tokens` up to the request's length, or through its first stop token / stop sequence (finish_reason
        then set), and hand them to `on_tokens`."""
        g, req = self.gen, self.req
        room = req.max_new_tokens - len(g.token_ids)
        if len(tokens) > room:
            tokens = tokens[: max(room, 0)]
        if self.stops or req.stop_sequences:
            for i, tok in enumerate(tokens):
                if tok in self.stops or (
                    req.stop_sequences and _ends_with_any(g.token_ids, tokens[: i + 1], req.stop_sequences)
                ):
                    tokens = tokens[: i + 1]
                    g.finish_reason = "stop"
                    break
        g.token_ids.extend(tokens)
        totals.emitted += len(tokens)
        if not g.finish_reason and len(g.token_ids) >= req.max_new_tokens:
            g.finish_reason = "length"
        if on_tokens is not None and tokens:
            on_tokens(self.index, tokens)


def _ends_with_any(done: list[int], new: list[int], sequences: Sequence[tuple[int, ...]]) -> bool:
    """Whether done + new ends with one of the sequences (only the tail is looked at)."""
    for seq in sequences:
        n = len(seq)
        if n == 0 or n > len(done) + len(new):
            continue
        tail = new[-n:] if n <= len(new) else done[len(done) - (n - len(new)) :] + new
        if tuple(tail) == seq:
            return True
    return False
