"""EAGLE-3 served by our Triton repository under a real tritonserver: the tiny fixture's draft (made by
`trtspec train-draft` in setup), concurrent streamed requests, each equal to plain greedy decoding of the same engine
(`trtspec generate --method none`, the oracle) and drafting for real (accepted tokens per request, the draft layer's
acceptance above one token per step)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tests.integration.conftest import build_repo, oracle, stream_request

RECIPE = "recipes/tiny-llama3-eagle3.yaml"
MODEL = "tiny_llama3"
PROMPTS = ["def fibonacci(n):", "import os\n", "class Stack:", "for i in range(10):"]
TOKENS = 32
SCHEDULE = "triton.draft_schedule=[[4, 13]]"  # the whole tree at every batch size: this test is about drafting


@pytest.fixture(scope="module")
def server(serve):
    return serve(build_repo(RECIPE, SCHEDULE))


def test_concurrent_streams_equal_plain_greedy_and_draft(server):
    want = {p: oracle(RECIPE, p, TOKENS, "--method", "none") for p in PROMPTS}
    got: dict[str, object] = {}

    def one(p: str) -> None:
        got[p] = stream_request(
            server,
            MODEL,
            {"text_input": [p], "max_tokens": np.array([TOKENS], np.int32), "stream": np.array([True])},
        )

    threads = [threading.Thread(target=one, args=(p,)) for p in PROMPTS]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    accepted = steps = 0
    for p in PROMPTS:
        g = got[p]
        assert g.error is None, g.error
        assert g.text == want[p]["text"], (p, g.text, want[p]["text"])
        accepted += g.last["accepted_tokens"]
        steps += g.last["steps"]
    assert steps > 0 and (accepted + steps) / steps > 1.2, (accepted, steps)  # the trained draft is used
