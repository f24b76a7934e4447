"""LookaheadDrafter: the zero-weight drafter (Jacobi window + n-gram pool) behind the `Drafter` protocol.

Per step and sequence: `propose` lays out root + window + verification set (`window.step_layout`);
the engine runs all nodes and verifies the verification branches; `update` moves the window with
the target's greedy outputs at the window nodes (`StepResult.node_argmax`), harvests the full
window's n-grams into the pool and, like TensorRT-LLM (`LookaheadAlgorithm::accept`), also stores
the n-grams of the emitted text. Every sequence has its own window and pool (`LookaheadState`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from builder.speculative.engine import Draft, PrefillResult, StepResult
from builder.speculative.lookahead.pool import NgramPool
from builder.speculative.lookahead.window import StepLayout, Window, advance_window, init_window, step_layout

if TYPE_CHECKING:
    from builder.speculative.lookahead.config import LookaheadConfig


class LookaheadState:
    """One sequence's Lookahead state: window W, ngram N, verification set G (see `builder.speculative`)."""

    def __init__(self, window: int, ngram: int, verification_set: int, *, pool_per_key: int | None = None,
                 max_keys: int | None = None, pool_from_text: bool = True, seed: int = 0) -> None:  # fmt: skip
        if window < 1 or ngram < 2 or verification_set < 0:
            raise ValueError(f"need W >= 1, N >= 2, G >= 0; got W={window}, N={ngram}, G={verification_set}")
        self.window, self.ngram, self.verification_set = window, ngram, verification_set
        self.pool = NgramPool(ngram, pool_per_key or max(verification_set, 1), max_keys)
        self.pool_from_text = pool_from_text
        self.seed = seed
        self._window: Window | None = None
        self._layout: StepLayout | None = None
        self._text: tuple[int, ...] = ()  # last N-1 tokens of the text (prompt + emitted) seen so far
        self._root_in_text = False

    @property
    def state(self) -> Window:
        """The current window (after `reset`)."""
        if self._window is None:
            raise RuntimeError("LookaheadState.reset() must run before use")
        return self._window

    def reset(self, prompt_ids: Sequence[int]) -> None:
        self._window = init_window(prompt_ids, self.window, self.ngram, self.seed)
        self._layout = None
        self.pool.clear()
        if self.pool_from_text:
            self.pool.insert_sequence(prompt_ids)
        self._text = tuple(int(t) for t in prompt_ids[-(self.ngram - 1) :])
        self._root_in_text = False

    def propose(self, root_token: int) -> Draft:
        verification = self.pool.verification_set(root_token, self.verification_set)
        self._layout = step_layout(self.state, root_token, verification)
        if self._root_in_text and self._text[-1:] != (int(root_token),):
            self._root_in_text = False  # the loop moved on without telling us; treat the root as new text
        return self._layout.draft

    def update(self, draft: Draft, target: Sequence[int], emitted: Sequence[int]) -> None:
        """target: [T] the target's greedy token at every node; emitted: the step's emitted tokens."""
        layout = self._layout
        if layout is None or draft is not layout.draft:
            raise ValueError("update() needs the Draft returned by the latest propose()")
        self._window, ngrams = advance_window(self.state, layout, target)
        self.pool.insert_all(ngrams)
        root = int(draft.tokens[0])
        new = ((root,) if not self._root_in_text else ()) + tuple(int(t) for t in emitted)
        text = self._text + new
        if self.pool_from_text:
            self.pool.insert_sequence(text)  # only n-grams that end in a new token: _text has <= N-1
        self._text = text[-(self.ngram - 1) :]
        self._root_in_text = bool(emitted)
        self._layout = None


class LookaheadDrafter:
    """Lookahead decoding for a batch of sequences (one `LookaheadState` each)."""

    def __init__(self, window: int, ngram: int, verification_set: int, **kwargs: object) -> None:
        self._make = lambda: LookaheadState(window, ngram, verification_set, **kwargs)  # type: ignore[arg-type]
        self._make()  # validate the settings now
        self.max_nodes = 1 + (ngram - 2) + (window - 1 + verification_set) * (ngram - 1)
        self._seqs: dict[int, LookaheadState] = {}

    @classmethod
    def from_config(cls, config: "LookaheadConfig", **kwargs: object) -> "LookaheadDrafter":
        return cls(config.window, config.ngram, config.verification_set, **kwargs)

    def start(self, seqs: Sequence[int], prompts: Sequence[Sequence[int]], prefill: PrefillResult) -> None:
        for s, p in zip(seqs, prompts):
            state = self._seqs[s] = self._make()
            state.reset(p)

    def propose(self, seqs: Sequence[int], roots: Sequence[int]) -> list[Draft]:
        return [self._seqs[s].propose(int(r)) for s, r in zip(seqs, roots)]

    def update(self, seqs: Sequence[int], drafts: Sequence[Draft], result: StepResult) -> None:
        for row, (s, d) in enumerate(zip(seqs, drafts)):
            self._seqs[s].update(d, result.node_argmax[row, : d.num_nodes].tolist(), result.emitted(row))

    def release(self, seq: int) -> None:
        self._seqs.pop(seq, None)
