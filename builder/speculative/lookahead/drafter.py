"""LookaheadDrafter: the zero-weight drafter (Jacobi window + n-gram pool) behind the `Drafter` protocol.

Per step and sequence: `propose` lays out root + window + verification set (`window.step_layout`);
the engine runs all nodes and verifies the verification branches; `update` moves the window with
the target's greedy outputs at the window nodes (`StepResult.node_argmax`), harvests the full
window's n-grams into the pool and, like TensorRT-LLM (`LookaheadAlgorithm::accept`), also stores
the n-grams of the emitted text. Every sequence has its own window and pool (`LookaheadState`).

A node budget (`set_budget`) lowers G (the verification set) until the step fits; where even G = 0
does not fit, that step is root-only (the window waits; the emitted text still feeds the pool). A
request may run smaller W, N, G than the drafter's (`configure`), never larger.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from builder.speculative.lookahead.pool import NgramPool
from builder.speculative.lookahead.window import StepLayout, Window, advance_window, init_window, step_layout
from builder.speculative.protocols import Draft, PrefillResult, StepResult, root_only

if TYPE_CHECKING:
    from builder.speculative.lookahead.config import LookaheadConfig


class LookaheadState:
    """One sequence's Lookahead state: window W, ngram N, verification set G (see `builder.speculative`)."""

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

    def nodes(self, verification_set: int) -> int:
        """Tree nodes of a step with this G (root included)."""
        return 1 + (self.ngram - 2) + (self.window - 1 + verification_set) * (self.ngram - 1)

    def fit(self, budget: int | None) -> int | None:
        """The largest G <= verification_set whose step fits `budget` nodes; None when none does."""
        if budget is None:
            return self.verification_set
        g = (budget - 1 - (self.ngram - 2)) // (self.ngram - 1) - (self.window - 1)
        return None if g < 0 else min(g, self.verification_set)

    def propose(self, root_token: int, verification_set: int | None = None) -> Draft:
        g = self.verification_set if verification_set is None else verification_set
        verification = self.pool.verification_set(root_token, g)
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
        self._layout = None
        self.note_text(int(draft.tokens[0]), emitted)

    def note_text(self, root: int, emitted: Sequence[int]) -> None:
        """Learn a step's root and emitted tokens as text (also after a root-only step: the window waits)."""
        if self._root_in_text and self._text[-1:] != (int(root),):
            self._root_in_text = False
        new = ((root,) if not self._root_in_text else ()) + tuple(int(t) for t in emitted)
        text = self._text + new
        if self.pool_from_text:
            self.pool.insert_sequence(text)  # only n-grams that end in a new token: _text has <= N-1
        self._text = text[-(self.ngram - 1) :]
        self._root_in_text = bool(emitted)


class LookaheadDrafter:
    """Lookahead decoding for a batch of sequences (one `LookaheadState` each); `Budgeted` and `Configurable`
    (`builder.speculative.protocols`)."""

    def __init__(self, window: int, ngram: int, verification_set: int, **kwargs: object) -> None:
        self._make = lambda w=window, n=ngram, g=verification_set: LookaheadState(w, n, g, **kwargs)  # type: ignore[arg-type]
        self._make()  # validate the settings now
        self.window, self.ngram, self.verification_set = window, ngram, verification_set
        self.max_nodes = 1 + (ngram - 2) + (window - 1 + verification_set) * (ngram - 1)
        self._seqs: dict[int, LookaheadState] = {}
        self._prompts: dict[int, tuple[int, ...]] = {}
        self._budget: int | None = None
        self._skipped: set[int] = set()  # sequences whose latest draft was root-only (over budget)

    def set_budget(self, nodes: int | None) -> None:
        """Use at most `nodes` tree nodes per step, root included (None: no cap)."""
        self._budget = nodes

    def check(self, window: int, ngram: int, verification_set: int) -> None:
        """ValueError unless 1 <= W, 2 <= N, 0 <= G, each at most the drafter's."""
        if not (
            1 <= window <= self.window and 2 <= ngram <= self.ngram and 0 <= verification_set <= self.verification_set
        ):
            raise ValueError(
                f"Lookahead W={window}, N={ngram}, G={verification_set} outside this drafter's "
                f"1..{self.window}, 2..{self.ngram}, 0..{self.verification_set}"
            )

    def configure(self, seq: int, window: int, ngram: int, verification_set: int) -> None:
        """Run this (started) sequence with its own W, N, G, each at most the drafter's."""
        self.check(window, ngram, verification_set)
        state = self._seqs[seq] = self._make(window, ngram, verification_set)
        state.reset(self._prompts[seq])

    @classmethod
    def from_config(cls, config: "LookaheadConfig", **kwargs: object) -> "LookaheadDrafter":
        return cls(config.window, config.ngram, config.verification_set, **kwargs)

    def start(self, seqs: Sequence[int], prompts: Sequence[Sequence[int]], prefill: PrefillResult) -> None:
        for s, p in zip(seqs, prompts):
            state = self._seqs[s] = self._make()
            state.reset(p)
            self._prompts[s] = tuple(int(t) for t in p)

    def propose(self, seqs: Sequence[int], roots: Sequence[int]) -> list[Draft]:
        drafts = []
        for s, r in zip(seqs, roots):
            state = self._seqs[s]
            g = state.fit(self._budget)
            if g is None:
                self._skipped.add(s)
                drafts.append(root_only(int(r)))
            else:
                self._skipped.discard(s)
                drafts.append(state.propose(int(r), g))
        return drafts

    def update(self, seqs: Sequence[int], drafts: Sequence[Draft], result: StepResult) -> None:
        for row, (s, d) in enumerate(zip(seqs, drafts)):
            if s in self._skipped:
                self._seqs[s].note_text(int(d.tokens[0]), result.emitted(row))
            else:
                self._seqs[s].update(d, result.node_argmax[row, : d.num_nodes].tolist(), result.emitted(row))

    def update_plain(self, seq: int, root: int, token: int) -> None:
        """A plain step's root and token (`PlainUpdates`): what `update` learns after a root-only draft."""
        self._seqs[seq].note_text(root, (token,))

    def release(self, seq: int) -> None:
        self._seqs.pop(seq, None)
        self._prompts.pop(seq, None)
        self._skipped.discard(seq)
