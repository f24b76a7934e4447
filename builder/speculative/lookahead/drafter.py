"""LookaheadDrafter: the zero-weight drafter (Jacobi window + n-gram pool) behind the `Drafter` protocol.

Per step: `propose` lays out root + window + verification set (`window.step_layout`); the engine runs
all nodes; the decoding loop verifies the verification branches; `update` moves the window with the
target's greedy outputs at the window nodes, harvests the full window's n-grams into the pool and,
like TensorRT-LLM (`LookaheadAlgorithm::accept`), also stores the n-grams of the emitted text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from builder.speculative.engine import Draft, StepOutput
from builder.speculative.lookahead.pool import NgramPool
from builder.speculative.lookahead.window import StepLayout, Window, advance_window, init_window, step_layout

if TYPE_CHECKING:
    from builder.speculative.lookahead.config import LookaheadConfig


class LookaheadDrafter:
    """Lookahead decoding's drafter: window W, ngram N, verification set G (see `builder.speculative`)."""

    def __init__(
        self,
        window: int,
        ngram: int,
        verification_set: int,
        *,
        pool_per_key: int | None = None,
        max_keys: int | None = None,
        pool_from_text: bool = True,
        seed: int = 0,
    ) -> None:
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

    @classmethod
    def from_config(cls, config: "LookaheadConfig", **kwargs: object) -> "LookaheadDrafter":
        return cls(config.window, config.ngram, config.verification_set, **kwargs)  # type: ignore[arg-type]

    @property
    def state(self) -> Window:
        """The current window (after `reset`)."""
        if self._window is None:
            raise RuntimeError("LookaheadDrafter.reset() must run before use")
        return self._window

    def reset(self, prompt_ids: Sequence[int], prefill: StepOutput | None = None) -> None:
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

    def update(self, draft: Draft, out: StepOutput, accepted: Sequence[int], emitted: Sequence[int]) -> None:
        layout = self._layout
        if layout is None or draft is not layout.draft:
            raise ValueError("update() needs the Draft returned by the latest propose()")
        target = out.logits.argmax(dim=-1).tolist()  # [T] greedy output per node
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
