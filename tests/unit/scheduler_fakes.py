"""Shared by the serving runtime's failure-path tests (`test_scheduler_faults.py`, `test_scheduler_faults_engines.py`):
the tiny EAGLE-2 decoder on the torch engine, its requests and their oracle outputs (module-scoped fixtures:
import them into a test module to use them), a recording client (`Sink`) and the scheduler helpers.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from builder.recipe.loader import load_recipe
from builder.speculative.decoding import Decoder, DraftSchedule, Request
from builder.stages.decoders import build_decoder
from triton_repo.jobs import Chunk
from triton_repo.scheduler import Scheduler

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "tiny-llama3-eagle2.yaml"
PROMPTS = ["def fibonacci(n):", "import os\n", "class Stack:", "for i in range(10):", "x = [1, 2, 3]\n"]
LENGTHS = [18, 7, 25, 11, 30]


@pytest.fixture(scope="module")
def tiny():
    return build_decoder(load_recipe(str(RECIPE)), engine="torch", max_batch_size=3)


@pytest.fixture(scope="module")
def reqs(tiny):
    tok = tiny.tokenizer
    return [Request(tuple(tok.encode(p).ids), n, stop_ids=tuple(tiny.stop_ids)) for p, n in zip(PROMPTS, LENGTHS)]


@pytest.fixture(scope="module")
def want(tiny, reqs):
    """Plain greedy decoding on the clean engine: the oracle."""
    return [g.token_ids for g in Decoder(tiny.engine).run(reqs)]


class Sink:
    def __init__(self, cancel_after: int | None = None, fail_send: bool = False, fail_check: bool = False) -> None:
        self.chunks: list[Chunk] = []
        self.cancel_after, self.fail_send, self.fail_check = cancel_after, fail_send, fail_check
        self.done = threading.Event()

    def cancelled(self) -> bool:
        if self.fail_check:
            raise RuntimeError("is_cancelled failed")
        return self.cancel_after is not None and len(self.chunks) >= self.cancel_after

    def send(self, chunk: Chunk) -> None:
        self.chunks.append(chunk)
        if chunk.final or self.fail_send:  # a client that is gone is done: nothing more reaches it
            self.done.set()
        if self.fail_send:
            raise ConnectionError("client gone")

    @property
    def final(self) -> Chunk:
        finals = [c for c in self.chunks if c.final]
        assert len(finals) == 1, self.chunks
        return finals[0]

    def ids(self) -> list[int]:
        out: list[int] = []
        for c in self.chunks:
            out += c.ids[c.prefix_len :]
        return out


def make_scheduler(tiny, engine=None, **kw) -> tuple[Scheduler, Decoder]:
    decoder = Decoder(engine or tiny.engine, tiny.make_drafter(), DraftSchedule([[1, 12], [2, 6], [3, 1]]))
    return Scheduler(decoder, **kw).start(), decoder


def wait_sinks(sinks, timeout: float = 120.0) -> None:
    for s in sinks:
        assert s.done.wait(timeout)


def give_back(tiny) -> None:
    """After a broken engine (whose sequences the decoder never releases): free the shared engine's rows and
    the EAGLE net's caches, so the next test starts clean."""
    for sid in list(tiny.engine.rows.ids):
        tiny.engine.release(sid)
    net = tiny.make_drafter().net
    for sid in list(net._cache):
        net.release(sid)


def long_request(tiny, n: int = 200) -> Request:
    return Request(tuple(tiny.tokenizer.encode("def long_one(x):").ids), n)  # no stop ids: runs n tokens
