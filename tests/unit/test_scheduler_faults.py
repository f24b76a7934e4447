"""Every failure path of the serving runtime, without a server: the batched engine, the decoding loop, the
scheduler, the metrics exporter and the stub watcher.

Faults come from `triton_repo.faults.FaultyEngine` (the real engine until armed; then the next call fails as
an engine failure would) or, for the ONNX Runtime engine itself, from a binding whose run raises once. After
every fault the outputs must equal plain greedy decoding on a clean engine (the oracle), and no slot or
KV row may be left behind. `pb_utils` exists only inside Triton's stub: the exporter test uses a fake of it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from builder.recipe.loader import load_recipe
from builder.speculative.decoding import Decoder, DraftSchedule, EngineBroken, Request

from builder.speculative.engine import Draft, SamplingBatch, check_paths, root_only
from builder.stages.decoders import build_decoder
from triton_repo.faults import FaultyEngine
from triton_repo.jobs import Chunk, Job, Overloaded, Unavailable
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


def _scheduler(tiny, engine=None, **kw) -> tuple[Scheduler, Decoder]:
    decoder = Decoder(engine or tiny.engine, tiny.make_drafter(), DraftSchedule([[1, 12], [2, 6], [3, 1]]))
    return Scheduler(decoder, **kw).start(), decoder


def _wait(sinks, timeout: float = 120.0) -> None:
    for s in sinks:
        assert s.done.wait(timeout)


def _give_back(tiny) -> None:
    """After a broken engine (whose sequences the decoder never releases): free the shared engine's rows and
    the EAGLE net's caches, so the next test starts clean."""
    for sid in list(tiny.engine.rows.ids):
        tiny.engine.release(sid)
    net = tiny.make_drafter().net
    for sid in list(net._cache):
        net.release(sid)


def _long(tiny, n: int = 200) -> Request:
    return Request(tuple(tiny.tokenizer.encode("def long_one(x):").ids), n)  # no stop ids: runs n tokens


# -- the batched engine -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ort(tmp_path_factory):
    return build_decoder(load_recipe(str(RECIPE)), engine="onnxruntime", max_batch_size=3)


class _RunFailsOnce:
    """The engine's binding cache, except that the next binding's run raises (an ONNX Runtime failure)."""

    def __init__(self, inner) -> None:
        self.inner, self.armed = inner, True

    def get(self, key, build):
        bound = self.inner.get(key, build)
        outer = self

        class Failing:
            x, y = bound.x, bound.y

            def run(self) -> None:
                if outer.armed:
                    outer.armed = False
                    raise RuntimeError("onnxruntime: run failed")
                bound.run()

        return Failing()


def test_a_failing_prefill_gives_its_rows_back(ort, want, reqs):
    engine = ort.engine
    first = Decoder(engine)
    kept = first.add([reqs[0]])[0]
    engine._bound, engine._last = _RunFailsOnce(engine._bound), ((), None)
    with pytest.raises(RuntimeError, match="run failed"):
        engine.start([list(reqs[1].prompt), list(reqs[2].prompt)], SamplingBatch.all_greedy(2, 1))
    assert len(engine.rows) == 1 and engine.committed[1:].tolist() == [0, 0]  # rows added before the failure: gone
    engine._bound = engine._bound.inner
    got = Decoder.__new__(Decoder)  # the same decoder goes on: the kept sequence and two new ones
    del got
    for s in first.add([reqs[1], reqs[2]], 1):
        pass
    done = {}
    while first.active:
        for s in first.step():
            done[s.index] = s.gen.token_ids
    done[kept.index] = kept.gen.token_ids
    assert [done[i] for i in range(3)] == want[:3]
    assert len(engine.rows) == 0


def test_the_engine_refuses_bad_paths_before_any_kv_moves(ort, want, reqs):
    engine = ort.engine
    dec = Decoder(engine)
    seq = dec.add([reqs[3]])[0]
    root = seq.gen.token_ids[-1]
    good = root_only(root)
    bad = Draft(np.array([root, 5, 6], np.int64), np.tril(np.ones((3, 3), bool)), np.array([0, 1, 2]),
                np.array([[0, 2, -1]], np.int32))  # node 2 sits at depth 2, not 1
    committed = engine.committed_len(seq.id)
    with pytest.raises(ValueError, match="depth"):
        engine.step([seq.id], [bad], SamplingBatch.all_greedy(1, 3))
    assert engine.committed_len(seq.id) == committed
    assert engine.step([seq.id], [good], SamplingBatch.all_greedy(1, 1)).emitted(0) == [want[3][1]]
    engine.release(seq.id)


CHAIN = np.tril(np.ones((3, 3), bool))  # root -> a -> b
BAD_PATHS = {
    "first node not the root": (CHAIN, [0, 1, 2], [[1, 2, -1]], "root"),
    "index past the tree": (CHAIN, [0, 1, 2], [[0, 1, 3]], "node indices"),
    "below -1": (CHAIN, [0, 1, 2], [[0, -2, -1]], "node indices"),
    "node after padding": (CHAIN, [0, 1, 2], [[0, -1, 2]], "padding"),
    "skips a level": (CHAIN, [0, 1, 2], [[0, 2, -1]], "depth"),
    "not an ancestor": (np.array([[1, 0, 0], [1, 1, 0], [1, 0, 1]], bool), [0, 1, 1], [[0, 1, -1], [0, 2, -1], [0, 1, 2]],
                        "depth"),
    "attends a node off the path": (np.array([[1, 0, 0], [1, 1, 0], [1, 1, 1]], bool), [0, 1, 1], [[0, 2, -1]], "exactly"),
    "misses an ancestor": (np.array([[1, 0, 0], [1, 1, 0], [0, 1, 1]], bool), [0, 1, 2], [[0, 1, 2]], "exactly"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD_PATHS))
def test_check_paths_refuses(case):
    mask, depth, paths, needle = BAD_PATHS[case]
    d = Draft(np.array([1, 2, 3], np.int64), np.array(mask), np.array(depth, np.int64), np.array(paths, np.int32))
    with pytest.raises(ValueError, match=needle):
        check_paths(d)


def test_check_paths_accepts_trees_lookahead_branches_and_dtypes():
    tree = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], bool)  # root; a, b; a -> c
    check_paths(Draft(np.arange(4, dtype=np.int64), tree, np.array([0, 1, 1, 2]), np.array([[0, 1, 3], [0, 2, -1]], np.int32)))
    check_paths(root_only(7))
    with pytest.raises(ValueError, match="int32"):
        check_paths(Draft(np.arange(4, dtype=np.int64), tree, np.array([0, 1, 1, 2]), np.array([[0, 1, 3]], np.int64)))


# -- the decoding loop ----------------------------------------------------------------------------------


def test_a_drafter_failing_at_start_releases_the_engine_sequences(tiny, reqs, want):
    class Refusing:
        def __init__(self, inner) -> None:
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def start(self, *a):
            raise RuntimeError("drafter refused the prompt")

    dec = Decoder(tiny.engine, Refusing(tiny.make_drafter()))
    with pytest.raises(RuntimeError, match="refused"):
        dec.add(reqs[:2])
    assert dec.rows_in_use == 0 and dec.active == []
    assert Decoder(tiny.engine, tiny.make_drafter()).run(reqs[:2])[1].token_ids == want[1]


def test_a_failing_step_ends_and_releases_every_active_sequence(tiny, reqs, want):
    faulty = FaultyEngine(tiny.engine)
    dec = Decoder(faulty, tiny.make_drafter())
    seqs = dec.add(reqs[:3])
    faulty.arm("step")
    with pytest.raises(RuntimeError, match="decoding step failed"):
        dec.step()
    assert dec.active == [] and dec.rows_in_use == 0 and all(s.gen.finish_reason == "error" for s in seqs)
    assert [g.token_ids for g in dec.run(reqs[:3])] == want[:3]  # the same decoder carries on, exact


def test_a_failing_release_is_a_broken_engine(tiny, reqs):
    faulty = FaultyEngine(tiny.engine)
    dec = Decoder(faulty, tiny.make_drafter())
    dec.add(reqs[:1])
    faulty.arm("engine")
    with pytest.raises(EngineBroken, match="releasing sequence"):
        dec.step()
    _give_back(tiny)  # (the wrapped engine itself is fine)


# -- the scheduler --------------------------------------------------------------------------------------


def test_a_bad_prefill_fails_only_its_own_request(tiny, reqs, want):
    sched, dec = _scheduler(tiny, queue_delay_s=0.05)
    bad = Request(reqs[1].prompt, 5, lookahead=(2, 3, 1))  # per-request Lookahead on an EAGLE drafter: add() raises
    sinks = [Sink(), Sink(), Sink()]
    try:
        for r, s in zip([reqs[0], bad, reqs[2]], sinks):
            sched.submit(Job(r, False, s))
        _wait(sinks)
    finally:
        sched.stop()
    assert sinks[1].final.error_kind == "prefill" and "Lookahead" in sinks[1].final.error
    assert sinks[0].final.ids == want[0] and sinks[2].final.ids == want[2]
    assert dec.rows_in_use == 0 and sched.stats.errors["prefill"] == 1


def test_a_failing_step_fails_its_requests_and_the_loop_goes_on(tiny, reqs, want):
    faulty = FaultyEngine(tiny.engine)
    sched, dec = _scheduler(tiny, engine=faulty)
    first = [Sink(), Sink()]
    try:
        for s in first:
            sched.submit(Job(_long(tiny), True, s))
        while not all(s.chunks for s in first):
            time.sleep(0.005)
        faulty.arm("step")
        _wait(first)
        after = [Sink() for _ in reqs[:3]]
        for r, s in zip(reqs, after):
            sched.submit(Job(r, True, s))
        _wait(after)
    finally:
        sched.stop()
    for s in first:
        assert s.final.error_kind == "step" and "decoding failed" in s.final.error
    assert [s.ids() for s in after] == want[:3]
    assert sched.healthy is False and sched.broken is None  # stopped, not broken
    assert dec.rows_in_use == 0 and sched.stats.errors["step"] == 2


@pytest.mark.parametrize("fault,why", [("loop", "loop died"), ("engine", "engine is broken")])
def test_a_dead_loop_answers_everyone_and_refuses_new_work(tiny, fault, why):
    faulty = FaultyEngine(tiny.engine)
    broken: list[str] = []
    sched, _ = _scheduler(tiny, engine=faulty, on_broken=broken.append)
    active, pending = [Sink() for _ in range(3)], [Sink(), Sink()]
    for s in active + pending:
        sched.submit(Job(_long(tiny), True, s))
    while not all(s.chunks for s in active):
        time.sleep(0.005)
    faulty.arm(fault)
    _wait(active + pending, 30)
    for s in active + pending:
        assert s.final.error_kind == "unavailable" and why in s.final.error
    assert broken and why in broken[0] and len(broken) == 1
    assert not sched.healthy and why in (sched.broken or "")
    with pytest.raises(Unavailable, match=why):
        sched.submit(Job(_long(tiny), True, Sink()))
    sched.stop()
    _give_back(tiny)  # a broken engine's rows stay where they were


def test_a_failing_logger_and_failing_sinks_cannot_kill_the_loop(tiny, reqs, want):
    def log(message: str) -> None:
        raise OSError("log pipe closed")

    faulty = FaultyEngine(tiny.engine)
    sched = Scheduler(Decoder(faulty, tiny.make_drafter()), log=log).start()
    gone, unreadable = Sink(fail_send=True), Sink(fail_check=True)
    try:
        sched.submit(Job(_long(tiny), True, gone))
        sched.submit(Job(_long(tiny), True, unreadable))
        _wait([gone, unreadable])
        faulty.arm("step")
        victims = [Sink(fail_send=True), Sink()]
        for s in victims:
            sched.submit(Job(_long(tiny), True, s))
        _wait(victims)
        ok = Sink()
        sched.submit(Job(reqs[0], False, ok))
        _wait([ok])
    finally:
        sched.stop()
    assert ok.final.ids == want[0] and sched.broken is None, (ok.final, [v.chunks[-1] for v in victims])
    assert sched.stats.ended["cancelled"] >= 2 and sched.stats.errors["step"] >= 1  # (the gone ones, the step)
    assert sched.decoder.rows_in_use == 0


def test_stop_ends_every_pending_and_active_request_with_a_final_error(tiny):
    sched, dec = _scheduler(tiny)
    sinks = [Sink() for _ in range(5)]  # 3 slots: 3 active, 2 pending
    for s in sinks:
        sched.submit(Job(_long(tiny, 400), True, s))
    while sum(bool(s.chunks) for s in sinks) < 3:
        time.sleep(0.005)
    sched.stop()
    for s in sinks:
        assert s.final.error_kind == "shutdown" and "shutting down" in s.final.error
    with pytest.raises(Unavailable):
        sched.submit(Job(_long(tiny), True, Sink()))
    assert dec.rows_in_use == 0 and sched.stats.ended["error"] == 5


def test_a_full_queue_refuses_at_once(tiny):
    sched, dec = _scheduler(tiny, max_queue=2)
    sinks = [Sink() for _ in range(5)]
    try:
        for s in sinks[:3]:  # every slot taken (one at a time: the queue holds 2)
            sched.submit(Job(_long(tiny, 400), True, s))
            while not s.chunks:
                time.sleep(0.002)
        for s in sinks[3:]:
            sched.submit(Job(_long(tiny, 400), True, s))
        with pytest.raises(Overloaded, match="max_queue_size 2"):
            sched.submit(Job(_long(tiny), True, Sink()))
        assert sched.load == (3, 2) and sched.stats.errors["overload"] == 1
    finally:
        sched.stop()


def test_deadlines_end_pending_and_active_requests(tiny):
    sched, dec = _scheduler(tiny)
    now = time.monotonic()
    active = [Sink() for _ in range(3)]
    late = Sink()
    try:
        for i, s in enumerate(active):
            sched.submit(Job(_long(tiny, 900), True, s, deadline=now + (0.3 if i == 0 else 60), arrived=now))
        sched.submit(Job(_long(tiny, 10), True, late, deadline=now + 0.2, arrived=now))  # waits: every slot is taken
        _wait([active[0], late], 30)
    finally:
        sched.stop()
    assert active[0].final.error_kind == "deadline" and len(active[0].ids()) > 0
    assert late.final.error_kind == "deadline" and "0 tokens" in late.final.error and late.ids() == []
    assert sched.stats.errors["deadline"] == 2 and dec.rows_in_use == 0


def test_a_front_model_s_cancel_frees_the_slot_at_the_next_step(tiny, reqs, want):
    sched, dec = _scheduler(tiny)
    s = Sink()
    try:
        sched.submit(Job(_long(tiny, 900), True, s, key="relay-1"))
        while len(s.chunks) < 3:
            time.sleep(0.001)
        steps = sched.stats.steps
        assert sched.cancel("relay-1") and not sched.cancel("no-such-relay")
        _wait([s], 30)
        assert sched.stats.steps - steps <= 2  # at most the step already running, then the slot is free
        assert s.final.finish_reason == "cancelled" and dec.rows_in_use == 0
        assert not sched.cancel("relay-1")  # ended: the key is gone
        ok = Sink()
        sched.submit(Job(reqs[1], False, ok))
        _wait([ok])
    finally:
        sched.stop()
    assert ok.final.ids == want[1]


def test_metric_values_match_what_the_requests_saw(tiny, reqs):
    from triton_repo.metrics import spec_decoder_observations, spec_decoder_values

    sched, dec = _scheduler(tiny)
    sinks = [Sink() for _ in reqs]
    cancelled = Sink(cancel_after=2)
    try:
        for r, s in zip(reqs, sinks):
            sched.submit(Job(r, True, s))
        sched.submit(Job(_long(tiny), True, cancelled))
        _wait(sinks + [cancelled])
    finally:
        sched.stop()
    v, obs = spec_decoder_values(sched), spec_decoder_observations(sched)
    finals = [s.final for s in sinks]
    assert v["trtspec_requests_received_total"] == len(reqs) + 1
    assert v["trtspec_requests_ended_total"]["cancelled"] == 1
    assert sum(v["trtspec_requests_ended_total"][k] for k in ("length", "stop")) == len(reqs)
    assert v["trtspec_output_tokens_total"] >= sum(f.output_tokens for f in finals) + cancelled.chunks[-1].output_tokens
    assert v["trtspec_accepted_tokens_total"] >= sum(f.accepted for f in finals)
    assert v["trtspec_requests_active"] == v["trtspec_requests_queued"] == v["trtspec_kv_rows_in_use"] == 0
    assert len(obs["trtspec_step_seconds"]) == v["trtspec_steps_total"] and len(obs["trtspec_tau"]) == len(reqs) + 1
    assert spec_decoder_observations(sched) == {"trtspec_tau": [], "trtspec_step_seconds": []}  # taken once


# -- the exporter (a fake pb_utils: the real one exists only inside Triton's stub) and the watcher -------


class FakePbUtils:
    """Records what the exporter asks Triton to do (fake of triton_python_backend_utils)."""

    calls: list = []

    class MetricFamily:
        COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"

        def __init__(self, name, description, kind) -> None:
            self.name, self.kind = name, kind

        def Metric(self, labels=None, buckets=None):  # noqa: N802 (Triton's name)
            family = self

            class M:
                def increment(self, v):
                    FakePbUtils.calls.append(("inc", family.name, labels.get("outcome", ""), v))

                def set(self, v):
                    FakePbUtils.calls.append(("set", family.name, v))

                def observe(self, v):
                    FakePbUtils.calls.append(("obs", family.name, v))

            assert (buckets is not None) == (family.kind == "histogram")
            return M()


def test_fake_pb_exporter_sends_increases_changes_and_every_observation():
    from triton_repo.metrics import FRONT, SPEC_DECODER, Exporter

    values = {"trtspec_steps_total": 0, "trtspec_requests_active": 0, "trtspec_requests_ended_total": {"length": 0}}
    seen: list[float] = []
    ex = Exporter(FakePbUtils, SPEC_DECODER, {"model": "m"}, lambda: values, lambda: {"trtspec_tau": list(seen)})
    FakePbUtils.calls.clear()
    values.update(trtspec_steps_total=5, trtspec_requests_active=2, trtspec_requests_ended_total={"length": 3})
    seen += [1.5, 2.0]
    ex.flush()
    seen.clear()
    ex.flush()  # nothing changed: nothing sent
    values["trtspec_requests_active"] = 0
    ex.flush()
    ex.close(flush=False)
    values["trtspec_steps_total"] = 9
    ex.flush()  # closed: nothing sent any more
    assert FakePbUtils.calls == [("obs", "trtspec_tau", 1.5), ("obs", "trtspec_tau", 2.0),
                                 ("inc", "trtspec_steps_total", "", 5.0), ("inc", "trtspec_requests_ended_total", "length", 3.0),
                                 ("set", "trtspec_requests_active", 2.0), ("set", "trtspec_requests_active", 0.0)]  # fmt: skip
    FakePbUtils.calls.clear()
    lazy = {"trtspec_front_cancels_total": 0}
    ex = Exporter(FakePbUtils, FRONT, {"model": "f"}, lambda: lazy, eager=False)
    ex.flush()
    assert FakePbUtils.calls == []  # nothing happened: nothing sent (not even the series' creation)
    lazy["trtspec_front_cancels_total"] = 2
    ex.flush()
    assert FakePbUtils.calls == [("inc", "trtspec_front_cancels_total", "", 2.0)]


def test_watch_finds_a_model_s_stub_and_sees_it_die(tmp_path):
    from triton_repo.watch import alive, stubs_of

    model = tmp_path / "spec_decoder" / "1" / "model.py"
    model.parent.mkdir(parents=True)
    model.write_text("import time\ntime.sleep(60)\n")
    other = tmp_path / "front" / "1" / "model.py"
    other.parent.mkdir(parents=True)
    other.write_text("import time\ntime.sleep(60)\n")
    procs = [subprocess.Popen([sys.executable, str(p)]) for p in (model, other)]
    try:
        deadline = time.monotonic() + 10
        while not (found := stubs_of(tmp_path / "spec_decoder", os.getpid())) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list(found) == [procs[0].pid]
        assert alive(procs[0].pid, found[procs[0].pid])
        procs[0].kill()
        procs[0].wait(10)
        assert not alive(procs[0].pid, found[procs[0].pid]) and stubs_of(tmp_path / "spec_decoder", os.getpid()) == {}
    finally:
        for p in procs:
            p.kill()
            p.wait(10)


# -- the front model's link to spec_decoder (triton_repo.relay): real sockets, no Triton ----------------


def test_relay_inputs_keep_their_dtypes_and_bytes():
    from triton_repo.relay import decode_inputs, encode_inputs

    sent = {"text_input": np.array([b"caf\xc3\xa9 \xff"], dtype=object), "max_tokens": np.array([7], np.int32),
            "temperature": np.array([0.25], np.float32), "stream": np.array([True]), "seed": np.array([2**40], np.int64),
            "stop": np.array([b"a", b"bc"], dtype=object)}  # fmt: skip
    import json

    got = decode_inputs(json.loads(json.dumps(encode_inputs(sent))))
    for name, a in sent.items():
        assert got[name].dtype == a.dtype and got[name].shape == a.shape and got[name].tolist() == a.tolist(), name
    with pytest.raises(ValueError, match="unknown input"):
        decode_inputs({"bogus": {"shape": [1], "values": [1]}})


def test_relay_streams_cancels_by_hanging_up_and_reports_a_dead_server(tmp_path):
    from triton_repo.relay import RelayClosed, RelayServer, relay_request

    hung_up = threading.Event()

    def on_request(conn, inputs, params, request_id):
        def run():
            conn.on_hang_up = hung_up.set
            for i in range(int(inputs["max_tokens"][0])):
                if conn.closed.is_set():
                    return
                conn.send({"text": f"t{i}", "final": False, "id": request_id, "p": params})
                time.sleep(0.01)
            if params.get("die"):
                conn.sock.shutdown(2)  # the server side vanishes without a final message (as a killed stub's does)
                return
            conn.send({"text": "", "final": True})

        threading.Thread(target=run, daemon=True).start()

    server = RelayServer(tmp_path / "s.sock", on_request).start()
    try:
        msgs = list(relay_request(tmp_path / "s.sock", {"max_tokens": np.array([3], np.int32)}, {"x": 1.5}, "r1"))
        assert [m["text"] for m in msgs] == ["t0", "t1", "t2", ""] and msgs[0]["id"] == "r1" and msgs[0]["p"] == {"x": 1.5}
        socks: list = []
        it = relay_request(tmp_path / "s.sock", {"max_tokens": np.array([500], np.int32)}, {}, "r2", socks)
        next(it)
        socks[0].shutdown(2)  # the front hangs up (its client cancelled)
        assert hung_up.wait(5)
        with pytest.raises(RelayClosed):
            list(relay_request(tmp_path / "s.sock", {"max_tokens": np.array([2], np.int32)}, {"die": True}, "r3"))
    finally:
        server.close()
    assert not (tmp_path / "s.sock").exists()
    with pytest.raises(OSError):
        list(relay_request(tmp_path / "s.sock", {"max_tokens": np.array([1], np.int32)}, {}, "r4"))


def test_the_torch_reference_engine_gives_back_rows_and_caches_of_a_failing_prefill(tmp_path):
    """The oracle engine keeps the same promise as the batched ones: a prefill that raises leaves nothing."""
    from builder.engines.torch_engine import TorchEngine
    from builder.model.loader import load_model
    from tests.unit.speculative_models import make_hf_llama

    engine = TorchEngine(load_model(make_hf_llama(tmp_path / "m")), max_seq_len=64, max_batch_size=2)
    free, forward = len(engine._free), engine.model.forward
    calls = {"n": 0}

    def fail_second(*args, **kwargs):  # the second prompt of the batch fails mid-prefill
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("injected prefill failure")
        return forward(*args, **kwargs)

    engine.model.forward = fail_second
    with pytest.raises(RuntimeError, match="injected"):
        engine.start([[5, 6, 7], [8, 9]], SamplingBatch.all_greedy(2, 4))
    engine.model.forward = forward
    assert len(engine.rows) == 0 and len(engine._free) == free
    ids, _ = engine.start([[5, 6, 7], [8, 9]], SamplingBatch.all_greedy(2, 4))  # both slots usable again
    assert len(ids) == 2
