"""Fault injection at the engine boundary, for the fault tests of the served repository (never in production
configs: spec_decoder wraps its engine only when its parameters say `fault_injection: "true"`).

`FaultyEngine(engine)` is the engine itself (every attribute delegates) until `arm(kind)`; then the next
call of that kind fails once, as a real engine failure would, below the decoding loop:

    prefill   the next `start` raises RuntimeError (after the wrapped engine added and took back its rows)
    step      the next `step` raises RuntimeError
    engine    the next `step` raises and so does every `release` after it: the engine's state is beyond
              repair (`EngineBroken` in the decoder: the loop ends, the model reports unready)
    loop      the next `step` raises a BaseException that no failure handling catches: the loop thread dies

`delay_s` slows every step by that many seconds, so that a test's long requests outlive its actions however fast
the engine is (a tiny EAGLE-2 engine finishes 1000 tokens of 4 sequences in about a second).
"""

from __future__ import annotations

import time
from typing import Any

KINDS = ("prefill", "step", "engine", "loop")


class InjectedLoopDeath(BaseException):
    """Escapes every `except Exception`: stands for a bug that kills the scheduler thread."""


class FaultyEngine:
    def __init__(self, engine: Any, delay_s: float = 0.0) -> None:
        self._engine = engine
        self._delay_s = delay_s
        self._armed: set[str] = set()
        self._broken = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def arm(self, kind: str) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown fault {kind!r}; one of {', '.join(KINDS)}")
        self._armed.add(kind)

    def _fire(self, kind: str) -> bool:
        if kind in self._armed:
            self._armed.discard(kind)
            return True
        return False

    def start(self, prompts, sampling):
        if self._fire("prefill"):
            with self._engine.rows.adding(len(prompts)):  # rows are added, then the prefill fails
                raise RuntimeError("injected fault: prefill failed")
        return self._engine.start(prompts, sampling)

    def step(self, seqs, drafts, sampling):
        if self._fire("loop"):
            raise InjectedLoopDeath("injected fault: the scheduler loop dies")
        if self._fire("engine"):
            self._broken = True
            raise RuntimeError("injected fault: the engine failed mid-step")
        if self._fire("step"):
            raise RuntimeError("injected fault: decoding step failed")
        if self._delay_s:
            time.sleep(self._delay_s)
        return self._engine.step(seqs, drafts, sampling)

    def release(self, seq: int) -> None:
        if self._broken:
            raise RuntimeError("injected fault: the engine cannot release a sequence")
        self._engine.release(seq)
