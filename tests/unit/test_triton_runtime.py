"""spec_decoder's pieces without a server: request checks, incremental detokenization, the version
check, and the scheduler (join, leave, cancel, streaming chunks) over the tiny fixture's engine."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from builder.recipe.loader import load_recipe
from builder.speculative.decoding import Decoder, DraftSchedule, Request
from builder.stages.decoders import build_decoder
from triton_repo.compat import built_versions, mismatch
from triton_repo.detok import LOOKBACK, text_delta, window
from triton_repo.jobs import Chunk, Job
from triton_repo.request import Limits, RequestError, parse
from triton_repo.scheduler import Scheduler

REPO = Path(__file__).resolve().parents[2]
LIMITS = Limits(vocab=4096, max_input_len=16, max_seq_len=64, stop_ids=(1,), sampling=True, lookahead=(4, 4, 4))


@pytest.fixture(scope="module")
def tiny():
    return build_decoder(
        load_recipe(str(REPO / "recipes" / "tiny-llama3-eagle2.yaml")), engine="torch", max_batch_size=3
    )


def _encode(text: str, special: bool) -> list[int]:
    return [7] * len(text.split()) or ([] if not text else [7])


def _ok(**extra) -> dict:
    return {"text_input": np.array([b"a b c"], dtype=object), "max_tokens": np.array([4], np.int32), **extra}


GOOD = parse(_ok(), LIMITS, _encode)


@pytest.mark.parametrize(
    "fields,needle",
    [
        ({"max_tokens": np.array([4], np.int32)}, "exactly one of"),
        ({**_ok(), "input_ids": np.array([1, 2], np.int32)}, "exactly one of"),
        (_ok(text_input=np.array([b""], dtype=object)), "empty prompt"),
        (_ok(text_input=np.array([b"\xff\xfe"], dtype=object)), "UTF-8"),
        (_ok(text_input=np.array([" ".join(["w"] * 17).encode()], dtype=object)), "at most 16"),
        ({"input_ids": np.array([5000], np.int32), "max_tokens": np.array([4], np.int32)}, "vocabulary"),
        (_ok(max_tokens=np.array([0], np.int32)), "max_tokens"),
        (_ok(max_tokens=np.array([62], np.int32)), "max_tokens"),
        (_ok(max_tokens=np.array([4.0], np.float32)), "integer"),
        (_ok(max_tokens=np.array([4, 4], np.int32)), "one value"),
        (_ok(temperature=np.array([-0.5], np.float32)), "temperature"),
        (_ok(temperature=np.array([np.inf], np.float32)), "temperature"),
        (_ok(top_p=np.array([0.0], np.float32)), "top_p"),
        (_ok(top_p=np.array([np.nan], np.float32)), "top_p"),
        (_ok(seed=np.array([-3], np.int64)), "seed"),
        (_ok(stream=np.array([1], np.int32)), "BOOL"),
        (_ok(lookahead_window=np.array([5], np.int32)), "lookahead_window"),
        (_ok(lookahead_ngram=np.array([1], np.int32)), "lookahead_ngram"),
        (_ok(lookahead_verification_set=np.array([-1], np.int32)), "lookahead_verification_set"),
        (_ok(stop=np.array([b""], dtype=object)), "stop"),
        (_ok(stop_ids=np.array([3, -1, 9999], np.int32)), "stop_ids"),
    ],
)
def test_bad_requests_are_refused_with_the_field_named(fields, needle):
    with pytest.raises(RequestError, match=needle):
        parse(fields, LIMITS, _encode)


def test_good_requests():
    assert GOOD.request.prompt == (7, 7, 7) and GOOD.request.max_new_tokens == 4 and GOOD.text and not GOOD.stream
    assert GOOD.request.stop_ids == (1,) and GOOD.request.speculate and GOOD.request.lookahead is None
    p = parse(
        _ok(
            lookahead_window=np.array([2], np.int32),
            stop=np.array([b"x y", b"z"], dtype=object),
            stop_ids=np.array([3, 4, -1, 5], np.int32),
            temperature=np.array([0.7], np.float32),
            stream=np.array([True]),
        ),
        LIMITS,
        _encode,
    )
    assert p.request.lookahead == (2, 4, 4) and p.stream
    assert p.request.stop_sequences == ((7, 7), (7, 7), (7,), (7,), (3, 4), (5,))
    assert p.request.sampling.temperature == pytest.approx(0.7)
    no_sampling = Limits(**{**LIMITS.__dict__, "sampling": False, "lookahead": None})
    with pytest.raises(RequestError, match="rejection"):
        parse(_ok(temperature=np.array([0.7], np.float32)), no_sampling, _encode)
    with pytest.raises(RequestError, match="Lookahead"):
        parse(_ok(lookahead_window=np.array([2], np.int32)), no_sampling, _encode)


def test_incremental_detokenization_never_breaks_utf8(tiny):
    """Any chunking of any id sequence: the deltas concatenate to decode(all ids), and no delta but the
    last ends inside a character (multi-byte characters split across byte-level tokens included)."""
    tok = tiny.tokenizer
    text = "naïve café — 日本語 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 def f(x):\n    return x ** 2  # ✓ ≥ ≤"
    ids = tok.encode(text, add_special_tokens=False).ids
    rng = random.Random(0)
    for _ in range(50):
        sent, out = 0, []
        while sent < len(ids):
            n = min(len(ids), sent + rng.randint(1, 4))
            final = n == len(ids)
            win, prefix = window(ids[:n], sent, final)
            assert prefix <= LOOKBACK
            out.append(text_delta(tok, win, prefix, final))
            sent = n
        assert "".join(out) == tok.decode(ids)
        assert all("\ufffd" not in d for d in out)
    assert text_delta(tok, [], 0, True) == ""


def test_version_check_names_both_sides():
    meta = {"format": 1, "versions": {"onnxruntime": "1.32.0", "trtspec": "0.1.0"}}
    same = {"engine_format": "1", "onnxruntime": "1.32.0", "trtspec": "0.1.0"}
    assert mismatch(built_versions(meta), same) is None
    msg = mismatch(built_versions(meta), {**same, "onnxruntime": "1.20.1"})
    assert "onnxruntime 1.32.0" in msg and "onnxruntime 1.20.1" in msg and "trtspec" not in msg.split(":")[0]


class _Sink:
    def __init__(self, cancel_after: int | None = None, fail_after: int | None = None) -> None:
        self.chunks: list[Chunk] = []
        self.cancel_after, self.fail_after = cancel_after, fail_after
        self.done = threading.Event()

    def cancelled(self) -> bool:
        return self.cancel_after is not None and len(self.chunks) >= self.cancel_after

    def send(self, chunk: Chunk) -> None:
        if self.fail_after is not None and len(self.chunks) >= self.fail_after:
            self.done.set()
            raise ConnectionError("client gone")
        self.chunks.append(chunk)
        if chunk.final:
            self.done.set()


def test_scheduler_joins_leaves_cancels_and_stays_exact(tiny):
    tok = tiny.tokenizer
    prompts = [
        "def fibonacci(n):",
        "import os\n",
        "class Stack:",
        "for i in range(10):",
        "x = [1, 2, 3]\n",
        "with open(p) as f:",
    ]
    reqs = [
        Request(tuple(tok.encode(p).ids), n, stop_ids=tuple(tiny.stop_ids))
        for p, n in zip(prompts, [18, 7, 25, 11, 30, 14])
    ]
    want = [g.token_ids for g in Decoder(tiny.engine).run(reqs)]
    decoder = Decoder(tiny.engine, tiny.make_drafter(), DraftSchedule([[1, 12], [2, 6], [3, 1]]))
    sched = Scheduler(decoder, queue_delay_s=0.001).start()
    sinks = [_Sink() for _ in reqs]
    cancelled, gone = _Sink(cancel_after=2), _Sink(fail_after=1)
    try:
        for i, (r, s) in enumerate(zip(reqs, sinks)):
            sched.submit(Job(r, stream=i % 2 == 0, sink=s))
            if i == 1:
                sched.submit(Job(reqs[4], stream=True, sink=cancelled))
                sched.submit(Job(reqs[2], stream=True, sink=gone))
            time.sleep(0.01 * (i % 3))  # arrivals spread over steps: requests join a running batch
        for s in [*sinks, cancelled, gone]:
            assert s.done.wait(120)
    finally:
        sched.stop()
    for i, (s, w) in enumerate(zip(sinks, want)):
        final = s.chunks[-1]
        assert final.final and sum(c.final for c in s.chunks) == 1
        assert final.output_tokens == len(w) and final.finish_reason in ("length", "stop")
        if i % 2 == 0:  # streamed: the windows' new ids concatenate to the output
            assert len(s.chunks) > 1
            ids: list[int] = []
            for c in s.chunks:
                ids += c.ids[c.prefix_len :]
            assert ids == w
        else:
            assert len(s.chunks) == 1 and s.chunks[0].ids == w and s.chunks[0].prefix_len == 0
    assert cancelled.chunks[-1].final and cancelled.chunks[-1].finish_reason == "cancelled"
    assert sched.stats.max_batch == 3 and sched.stats.cancelled == 2
    assert decoder.active == [] and decoder.free_slots == 3  # every slot came back
