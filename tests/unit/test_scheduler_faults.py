"""Every failure path of the serving runtime around the decoder, without a server: the scheduler, the metrics
exporter and the stub watcher (the front model's relay to spec_decoder: `test_relay.py`).

Faults come from `triton_repo.faults.FaultyEngine` (the real engine until armed; then the next call fails as
an engine failure would). After every fault the outputs must equal plain greedy decoding on a clean engine
(the oracle), and no slot or KV row may be left behind. `pb_utils` exists only inside Triton's stub: the
exporter test uses a fake of it. The engines' and the decoding loop's own failure paths are in
`test_scheduler_faults_engines.py`; the shared fixtures and fakes in `scheduler_fakes.py`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from builder.speculative.decoding import Decoder, Request
from tests.unit.scheduler_fakes import Sink, give_back, long_request, make_scheduler, reqs, tiny, wait_sinks, want  # noqa: F401 (module-scoped fixtures)
from triton_repo.faults import FaultyEngine
from triton_repo.jobs import Job, Overloaded, Unavailable
from triton_repo.scheduler import Scheduler

# -- the scheduler --------------------------------------------------------------------------------------


def test_a_bad_prefill_fails_only_its_own_request(tiny, reqs, want):
    sched, dec = make_scheduler(tiny, queue_delay_s=0.05)
    bad = Request(reqs[1].prompt, 5, lookahead=(2, 3, 1))  # per-request Lookahead on an EAGLE drafter: add() raises
    sinks = [Sink(), Sink(), Sink()]
    try:
        for r, s in zip([reqs[0], bad, reqs[2]], sinks):
            sched.submit(Job(r, False, s))
        wait_sinks(sinks)
    finally:
        sched.stop()
    assert sinks[1].final.error_kind == "prefill" and "Lookahead" in sinks[1].final.error
    assert sinks[0].final.ids == want[0] and sinks[2].final.ids == want[2]
    assert dec.rows_in_use == 0 and sched.stats.errors["prefill"] == 1


def test_a_failing_step_fails_its_requests_and_the_loop_goes_on(tiny, reqs, want):
    faulty = FaultyEngine(tiny.engine)
    sched, dec = make_scheduler(tiny, engine=faulty)
    first = [Sink(), Sink()]
    try:
        for s in first:
            sched.submit(Job(long_request(tiny), True, s))
        while not all(s.chunks for s in first):
            time.sleep(0.005)
        faulty.arm("step")
        wait_sinks(first)
        after = [Sink() for _ in reqs[:3]]
        for r, s in zip(reqs, after):
            sched.submit(Job(r, True, s))
        wait_sinks(after)
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
    sched, _ = make_scheduler(tiny, engine=faulty, on_broken=broken.append)
    active, pending = [Sink() for _ in range(3)], [Sink(), Sink()]
    for s in active + pending:
        sched.submit(Job(long_request(tiny), True, s))
    while not all(s.chunks for s in active):
        time.sleep(0.005)
    faulty.arm(fault)
    wait_sinks(active + pending, 30)
    for s in active + pending:
        assert s.final.error_kind == "unavailable" and why in s.final.error
    assert broken and why in broken[0] and len(broken) == 1
    assert not sched.healthy and why in (sched.broken or "")
    with pytest.raises(Unavailable, match=why):
        sched.submit(Job(long_request(tiny), True, Sink()))
    sched.stop()
    give_back(tiny)  # a broken engine's rows stay where they were


def test_a_failing_logger_and_failing_sinks_cannot_kill_the_loop(tiny, reqs, want):
    def log(message: str) -> None:
        raise OSError("log pipe closed")

    faulty = FaultyEngine(tiny.engine)
    sched = Scheduler(Decoder(faulty, tiny.make_drafter()), log=log).start()
    gone, unreadable = Sink(fail_send=True), Sink(fail_check=True)
    try:
        sched.submit(Job(long_request(tiny), True, gone))
        sched.submit(Job(long_request(tiny), True, unreadable))
        wait_sinks([gone, unreadable])
        faulty.arm("step")
        victims = [Sink(fail_send=True), Sink()]
        for s in victims:
            sched.submit(Job(long_request(tiny), True, s))
        wait_sinks(victims)
        ok = Sink()
        sched.submit(Job(reqs[0], False, ok))
        wait_sinks([ok])
    finally:
        sched.stop()
    assert ok.final.ids == want[0] and sched.broken is None, (ok.final, [v.chunks[-1] for v in victims])
    assert sched.stats.ended["cancelled"] >= 2 and sched.stats.errors["step"] >= 1  # (the gone ones, the step)
    assert sched.decoder.rows_in_use == 0


def test_stop_ends_every_pending_and_active_request_with_a_final_error(tiny):
    sched, dec = make_scheduler(tiny)
    sinks = [Sink() for _ in range(5)]  # 3 slots: 3 active, 2 pending
    for s in sinks:
        sched.submit(Job(long_request(tiny, 400), True, s))
    while sum(bool(s.chunks) for s in sinks) < 3:
        time.sleep(0.005)
    sched.stop()
    for s in sinks:
        assert s.final.error_kind == "shutdown" and "shutting down" in s.final.error
    with pytest.raises(Unavailable):
        sched.submit(Job(long_request(tiny), True, Sink()))
    assert dec.rows_in_use == 0 and sched.stats.ended["error"] == 5


def test_a_full_queue_refuses_at_once(tiny):
    sched, dec = make_scheduler(tiny, max_queue=2)
    sinks = [Sink() for _ in range(5)]
    try:
        for s in sinks[:3]:  # every slot taken (one at a time: the queue holds 2)
            sched.submit(Job(long_request(tiny, 400), True, s))
            while not s.chunks:
                time.sleep(0.002)
        for s in sinks[3:]:
            sched.submit(Job(long_request(tiny, 400), True, s))
        with pytest.raises(Overloaded, match="max_queue_size 2"):
            sched.submit(Job(long_request(tiny), True, Sink()))
        assert sched.load == (3, 2) and sched.stats.errors["overload"] == 1
    finally:
        sched.stop()


def test_deadlines_end_pending_and_active_requests(tiny):
    sched, dec = make_scheduler(tiny)
    now = time.monotonic()
    active = [Sink() for _ in range(3)]
    late = Sink()
    try:
        for i, s in enumerate(active):
            sched.submit(Job(long_request(tiny, 900), True, s, deadline=now + (0.3 if i == 0 else 60), arrived=now))
        sched.submit(
            Job(long_request(tiny, 10), True, late, deadline=now + 0.2, arrived=now)
        )  # waits: every slot is taken
        wait_sinks([active[0], late], 30)
    finally:
        sched.stop()
    assert active[0].final.error_kind == "deadline" and len(active[0].ids()) > 0
    assert late.final.error_kind == "deadline" and "0 tokens" in late.final.error and late.ids() == []
    assert sched.stats.errors["deadline"] == 2 and dec.rows_in_use == 0


def test_a_front_model_s_cancel_frees_the_slot_at_the_next_step(tiny, reqs, want):
    sched, dec = make_scheduler(tiny)
    s = Sink()
    try:
        sched.submit(Job(long_request(tiny, 900), True, s, key="relay-1"))
        while len(s.chunks) < 3:
            time.sleep(0.001)
        steps = sched.stats.steps
        assert sched.cancel("relay-1") and not sched.cancel("no-such-relay")
        wait_sinks([s], 30)
        assert sched.stats.steps - steps <= 2  # at most the step already running, then the slot is free
        assert s.final.finish_reason == "cancelled" and dec.rows_in_use == 0
        assert not sched.cancel("relay-1")  # ended: the key is gone
        ok = Sink()
        sched.submit(Job(reqs[1], False, ok))
        wait_sinks([ok])
    finally:
        sched.stop()
    assert ok.final.ids == want[1]


def test_metric_values_match_what_the_requests_saw(tiny, reqs):
    from triton_repo.metrics import spec_decoder_observations, spec_decoder_values

    sched, dec = make_scheduler(tiny)
    sinks = [Sink() for _ in reqs]
    cancelled = Sink(cancel_after=2)
    try:
        for r, s in zip(reqs, sinks):
            sched.submit(Job(r, True, s))
        sched.submit(Job(long_request(tiny), True, cancelled))
        wait_sinks(sinks + [cancelled])
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
    assert FakePbUtils.calls == [
        ("obs", "trtspec_tau", 1.5),
        ("obs", "trtspec_tau", 2.0),
        ("inc", "trtspec_steps_total", "", 5.0),
        ("inc", "trtspec_requests_ended_total", "length", 3.0),
        ("set", "trtspec_requests_active", 2.0),
        ("set", "trtspec_requests_active", 0.0),
    ]
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
