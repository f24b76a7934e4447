"""spec_decoder's failure paths under a real tritonserver 2.51 (the tiny EAGLE-2 recipe).

The repository is the built one with four spec_decoder parameters changed in a copy: fault_injection on
(`triton_repo.faults`: a request parameter `trtspec_fault` makes the next engine call fail), every step
slowed by STEP_DELAY_MS (so long requests outlive the test's actions), a queue of 3 and a 30 s default deadline. The server runs with --model-control-mode=explicit --load-model=* (TritonServer's default), which is
what lets a broken spec_decoder unload itself (readiness false) and the front model reload it. Checked:
overload refused at once; deadlines (pending and active; the request's timeout_s); cancellation through
the front model frees the slots (measured: cancel → slot freed, printed); a failing prefill or step fails
only its requests and the loop carries on; a dead loop or a broken engine turns the model unready within
2 s and it comes back; unloading ends every request with an error; kill -9 of spec_decoder's stub
mid-stream: the front's clients get an error within 5 s, the server stays up and spec_decoder comes back.
Outputs after each fault equal `trtspec generate`'s.

The kill -9 lands at a moment the stub holds none of the process-shared mutexes of its region with the server
(`tests.integration.robust_locks`): a stub killed holding one that a server thread then takes aborts tritonserver
2.51 itself (`boost::interprocess::lock_exception`, python_backend r24.10; nothing a model can catch). That
upstream abort is shown on demand by the last test, on a server of its own.
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from builder.bench.serve_metrics import scrape, total
from builder.serve.server import TritonServer, free_ports
from tests.integration.conftest import build_repo, grpc_inputs, oracle, read_response

RECIPE = "recipes/tiny-llama3-eagle2.yaml"
MODEL = "tiny_llama3"  # the front model
LONG = 1000  # max_tokens of a request that outlives the test's actions (max_seq_len 1024) ...
STEP_DELAY_MS = 15  # ... with every step slowed this much (a loaded machine's client once lagged the ~1 s it took)
CHECK = ("def add(a, b):", 12)  # the request that shows the server is exact again


def patched_repo(src: Path, dst: Path, **params: str) -> Path:
    """A copy of a repository (engine files hard-linked) with spec_decoder parameters replaced."""
    from triton_repo.config import parse, render

    shutil.copytree(src, dst, copy_function=os.link)
    path = dst / "spec_decoder" / "config.pbtxt"
    cfg = parse(path.read_text())
    for k, v in params.items():
        cfg.parameters[k].string_value = v
    path.unlink()  # a link to the built repository's file: write a new one
    path.write_text(render(cfg))
    return dst


class LiveStream:
    """One streamed request whose responses are collected in the background (arrival times kept)."""

    def __init__(
        self,
        server: TritonServer,
        model: str,
        prompt: str,
        max_tokens: int,
        *,
        request_id: str = "",
        params: dict[str, Any] | None = None,
        stream: bool = True,
    ) -> None:
        import tritonclient.grpc as grpcclient

        self.q: queue.Queue = queue.Queue()
        self.texts: list[str] = []
        self.last: dict[str, Any] = {}
        self.error: str | None = None
        self.final = False
        self.first_at = self.end_at = None
        self.sent_at = time.monotonic()
        self.client = grpcclient.InferenceServerClient(server.endpoints["grpc"])
        self.client.start_stream(callback=lambda result, error: self.q.put((time.monotonic(), result, error)))
        self.client.async_stream_infer(
            model,
            grpc_inputs(
                {"text_input": [prompt], "max_tokens": np.array([max_tokens], np.int32), "stream": np.array([stream])}
            ),
            request_id=request_id,
            parameters=params or {},
            enable_empty_final_response=True,
        )

    @property
    def text(self) -> str:
        return "".join(self.texts)

    def _take(self, timeout: float) -> bool:
        at, result, error = self.q.get(timeout=timeout)
        self.first_at = self.first_at or at
        if error is not None:
            self.error, self.end_at = str(error), at
            return True
        if read_response(result, self.texts, self.last):
            self.final, self.end_at = True, at
            return True
        return False

    def wait_first(self, timeout: float = 60.0) -> "LiveStream":
        if self.first_at is None and not self.final and self.error is None:
            self._take(timeout)
        return self

    def finish(self, timeout: float = 60.0) -> "LiveStream":
        """Until the final response or an error; then the stream is closed (Triton 2.51 does not finish
        unloading a model while a client stream that used it is open)."""
        deadline = time.monotonic() + timeout
        while not (self.final or self.error):
            self._take(max(deadline - time.monotonic(), 0.001))
        self.close()
        return self

    def drain(self) -> None:
        while not (self.final or self.error):
            try:
                self._take(0.0)
            except queue.Empty:
                return

    def cancel(self) -> float:
        """Cancel the stream (as a client going away would), without waiting; the time it was sent (time.time())."""
        t = time.time()
        threading.Thread(target=lambda: self.client.stop_stream(cancel_requests=True), daemon=True).start()
        return t

    def close(self) -> None:
        self._in_thread(lambda: (self.client.stop_stream(cancel_requests=True), self.client.close()))

    @staticmethod
    def _in_thread(fn) -> None:  # a stream whose server side never ends must not block the test
        t = threading.Thread(target=fn, daemon=True)
        t.start()
        t.join(3)


def ready(server: TritonServer, model: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{server.endpoints['http']}/v2/models/{model}/ready", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def wait_serving(server: TritonServer, expected: dict[str, Any], timeout: float = 90.0) -> float:
    """Until spec_decoder is ready and the front answers the check request exactly; the seconds it took."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if not server.alive():
            raise AssertionError(f"tritonserver exited (code {server.proc.returncode}):\n{server.log_tail(40)}")
        if ready(server, "spec_decoder") and ready(server, MODEL):
            got = LiveStream(server, MODEL, CHECK[0], CHECK[1]).finish()
            if got.error is None:
                assert got.text == expected["text"], (got.text, expected["text"])
                return time.monotonic() - t0
        time.sleep(0.2)
    raise AssertionError(f"spec_decoder not serving after {timeout} s:\n{server.log_tail(30)}")


def metrics(server: TritonServer):
    return scrape(server.endpoints["metrics"])


def wait_total(server: TritonServer, name: str, at_least: float, timeout: float = 5.0, **match: str) -> float:
    """A counter's total once it reaches `at_least` (the exporters publish every 0.25 s); fails after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        got = total(metrics(server), name, **match)
        if got >= at_least or time.monotonic() > deadline:
            assert got >= at_least, (name, match, got, at_least)
            return got
        time.sleep(0.1)


def settled(server: TritonServer, timeout: float = 10.0):
    """A scrape once no request is queued or active and the engine holds no sequence (the exporter publishes
    every 0.25 s: the first scrape comes after at least one publication of what happened before the call)."""
    time.sleep(0.4)
    deadline = time.monotonic() + timeout
    while True:
        m = metrics(server)
        busy = {
            n: total(m, n) for n in ("trtspec_requests_queued", "trtspec_requests_active", "trtspec_kv_rows_in_use")
        }
        if not any(busy.values()) or time.monotonic() > deadline:
            assert not any(busy.values()), busy
            return m
        time.sleep(0.1)


def log_times(server: TritonServer, pattern: str) -> list[tuple[float, re.Match]]:
    """(unix time, match) of every log line matching `pattern` (Triton's prefix: I1201 15:48:49.361394)."""
    out = []
    year = datetime.now().year
    for line in server.log_path.read_text(errors="replace").splitlines():
        m = re.search(pattern, line)
        stamp = re.match(r"^[IWE](\d{2})(\d{2}) (\d{2}:\d{2}:\d{2}\.\d{6})", line)
        if m and stamp:
            when = datetime.strptime(
                f"{year}-{stamp.group(1)}-{stamp.group(2)} {stamp.group(3)}", "%Y-%m-%d %H:%M:%S.%f"
            )
            out.append((when.timestamp(), m))
    return out


@pytest.fixture(scope="module")
def expected():
    return oracle(RECIPE, *CHECK)


@pytest.fixture(scope="module")
def server(tmp_path_factory, expected):
    work = tmp_path_factory.mktemp("faults")
    repo = patched_repo(
        build_repo(RECIPE),
        work / "repo",
        fault_injection="true",
        max_queue_size="3",
        request_timeout_s="30.0",
        fault_step_delay_ms=str(STEP_DELAY_MS),
    )
    s = TritonServer(repo, ports=free_ports(), workdir=work / "server")
    s.start()
    try:
        s.wait_ready(120)
        wait_serving(s, expected)
        yield s
    finally:
        s.stop()
        assert s.processes() == []


def _cancelled(s: LiveStream) -> bool:
    """The client's own library ends a stream it cancelled (gRPC CANCELLED), or the final response came first."""
    return (s.error is not None and "CANCELLED" in s.error) or s.last.get("finish_reason") == "cancelled"


def _long(server, n: int, model: str = MODEL, **kw) -> list[LiveStream]:
    """n streams that run LONG tokens (past end-of-sequence: ignore_eos) unless stopped."""
    return [LiveStream(server, model, f"def job_{i}(x):", LONG, params={"ignore_eos": True}, **kw) for i in range(n)]


def test_overload_is_refused_at_once_and_everything_is_released(server, expected):
    active = [s.wait_first() for s in _long(server, 4)]  # max_batch_size 4: every slot taken
    waiting = _long(server, 3, model="spec_decoder")  # the queue (max_queue_size 3) is full
    time.sleep(0.3)
    refused = [s.finish(10) for s in _long(server, 2)]
    for s in refused:
        assert s.error is not None and "overloaded" in s.error and "max_queue_size 3" in s.error, s.error
    assert all(w.first_at is None for w in waiting)  # refused while the queue still held them
    for s in active + waiting:
        s.cancel()
    for s in active + waiting:
        s.finish(30)
        assert _cancelled(s) and s.last.get("output_tokens", 0) < LONG
        s.close()
    m = settled(server)  # slots, queue and KV rows all released
    assert total(m, "trtspec_request_errors_total", kind="overload") >= 2
    wait_serving(server, expected)


def test_deadlines_pending_and_active_and_the_parameter_is_checked(server, expected):
    active = LiveStream(server, MODEL, "def slow(x):", LONG, params={"timeout_s": 0.5, "ignore_eos": True}).finish(
        30
    )  # float, front
    assert active.error is not None and "deadline exceeded" in active.error, active.error
    assert active.texts  # it streamed until the deadline
    blockers = [s.wait_first() for s in _long(server, 4)]
    pending = LiveStream(server, "spec_decoder", "x = 1", 8, params={"timeout_s": "0.3"}).finish(30)  # a string, direct
    assert pending.error is not None and "deadline exceeded" in pending.error and "0 tokens" in pending.error
    too_long = LiveStream(server, MODEL, "x", 4, params={"timeout_s": 1e6}).finish(30)
    assert too_long.error is not None and "timeout_s" in too_long.error and "(0, 30]" in too_long.error
    for s in blockers:
        s.cancel()
    for s in blockers:
        s.finish(30)
        s.close()
    m = settled(server)
    assert total(m, "trtspec_request_errors_total", kind="deadline") >= 2
    wait_serving(server, expected)


def test_cancel_through_the_front_model_frees_the_slots(server, expected):
    """The issue's case: cancelled streams kept decoding and a short request waited behind them."""
    streams = [s.wait_first() for s in _long(server, 4, request_id="cancel-me")]
    before = metrics(server)
    sent = [s.cancel() for s in streams]
    short = LiveStream(server, MODEL, CHECK[0], CHECK[1]).finish(60)
    assert short.error is None and short.text == expected["text"]
    for s in streams:
        s.finish(30)
        assert _cancelled(s) and s.last["output_tokens"] < LONG  # stopped, not run to max_tokens
        s.close()
    m = settled(server)
    freed = [t for t, _ in log_times(server, r"request \d+ \(id 'cancel-me'\) ended: cancelled")]
    assert len(freed) >= 4
    lag = [f - c for f, c in zip(sorted(freed)[-4:], sorted(sent))]
    steps = total(m, "trtspec_steps_total") - total(before, "trtspec_steps_total")
    step_ms = 1e3 * (total(m, "trtspec_step_seconds_sum") - total(before, "trtspec_step_seconds_sum")) / max(steps, 1)
    print(
        f"\ncancel (client) -> slot freed: {', '.join(f'{1e3 * x:.0f}' for x in lag)} ms; mean step {step_ms:.1f} ms; "
        f"short request after the cancels: {1e3 * (short.end_at - short.sent_at):.0f} ms"
    )
    wait_total(server, "trtspec_front_cancels_total", 4)


def test_failing_prefill_and_step_fail_only_their_requests(server, expected):
    bad = LiveStream(server, MODEL, "def f():", 8, params={"trtspec_fault": "prefill"}).finish(30)
    assert bad.error is not None and "prefill failed: RuntimeError: injected fault" in bad.error
    settled(server)  # the rows the failed prefill added were given back
    wait_serving(server, expected)
    victims = [s.wait_first() for s in _long(server, 2)]
    LiveStream(server, "spec_decoder", "y = 2", 4, params={"trtspec_fault": "step"}).finish(30)
    for s in victims:
        s.finish(30)
        assert s.error is not None and "decoding failed: RuntimeError: injected fault" in s.error, s.error
        s.close()
    m = settled(server)
    assert total(m, "trtspec_request_errors_total", kind="step") >= 1
    assert total(m, "trtspec_loop_up") == 1
    wait_serving(server, expected)  # the loop carried on


@pytest.mark.parametrize("fault", ["loop", "engine"])
def test_dead_loop_or_engine_turns_the_model_unready_and_it_comes_back(server, expected, fault):
    restarts = total(metrics(server), "trtspec_front_backend_restarts_total")
    inflight = _long(server, 2)
    for s in inflight:
        s.wait_first()
    trigger = LiveStream(server, "spec_decoder", "z = 3", 4, params={"trtspec_fault": fault}).finish(30)
    assert trigger.error is not None
    for s in inflight:  # every request of the dead loop got an error, none hangs
        s.finish(10)
        assert s.error is not None, s.last
        s.close()
    t0 = trigger.end_at
    while ready(server, "spec_decoder") and time.monotonic() - t0 < 10:
        time.sleep(0.02)
    flipped = time.monotonic() - t0
    print(f"\n{fault}: readiness false {1e3 * flipped:.0f} ms after the failure; ", end="")
    assert flipped < 2.0, f"spec_decoder still ready {flipped:.2f} s after its loop died"
    print(f"serving again after {wait_serving(server, expected):.1f} s")
    wait_total(server, "trtspec_front_backend_restarts_total", restarts + 1)


def test_unload_ends_every_request_with_an_error(server, expected):
    streams = [s.wait_first() for s in _long(server, 2)] + [
        s.wait_first() for s in _long(server, 2, model="spec_decoder")
    ]
    pending = _long(server, 2, model="spec_decoder")
    wait_total(server, "trtspec_requests_queued", 2)  # both wait for a slot
    req = urllib.request.Request(
        f"http://{server.endpoints['http']}/v2/repository/models/spec_decoder/unload", data=b"{}", method="POST"
    )
    urllib.request.urlopen(req, timeout=30).close()
    for s in streams + pending:
        s.finish(10)  # (the front may see spec_decoder's stub end before its own shutdown answer arrives)
        assert s.error is not None and ("shutting down" in s.error or "failed mid-request" in s.error), s.error
        s.close()
    wait_serving(server, expected)  # the front model saw spec_decoder's stub end and reloaded it


def _newest_stub(server: TritonServer) -> tuple[int, dict[int, str]]:
    """spec_decoder's newest stub (instances unloaded earlier may linger: see LiveStream.finish), and all of them."""
    from triton_repo.watch import stubs_of

    assert server.proc is not None
    stubs = stubs_of(Path(server.repo) / "spec_decoder", server.proc.pid)
    return max(stubs, key=lambda pid: int(stubs[pid])), stubs


def test_kill_9_of_the_stub_mid_stream(server, expected):
    from tests.integration.robust_locks import kill_between_locks
    from triton_repo.watch import stubs_of

    front = [s.wait_first() for s in _long(server, 2)]
    direct = LiveStream(server, "spec_decoder", "def direct(x):", LONG).wait_first()
    newest, stubs = _newest_stub(server)
    looks = kill_between_locks(newest)  # outside the upstream abort's window (module docstring)
    killed_at = time.monotonic()
    for s in front:
        s.finish(10)
        assert s.error is not None and "failed mid-request" in s.error, s.error
        assert s.end_at - killed_at < 5.0
        s.close()
    print(
        f"\nkill -9 (at look {looks}): the front's clients got errors after "
        f"{max(s.end_at for s in front) - killed_at:.2f} s; ",
        end="",
    )
    assert server.alive()
    print(f"serving again after {wait_serving(server, expected):.1f} s")
    direct.drain()  # Triton 2.51 never ends a stream whose stub died: only the front can answer its clients
    direct.close()
    assert set(stubs_of(Path(server.repo) / "spec_decoder", server.proc.pid)) - set(stubs)  # a new instance serves


def test_kill_9_inside_a_shared_lock_aborts_or_serves_on(tmp_path, expected):
    """The upstream abort the kill above avoids, on demand: spec_decoder's stub killed while it holds a mutex of
    its shared region that a server thread waits for. tritonserver 2.51 then does one of two things, and the test
    accepts exactly these: it aborts — the waiter's lock throws `boost::interprocess::lock_exception` inside a
    destructor (a direct stream's response handshake, python_backend r24.10 src/python_be.cc
    `ResponseSendDecoupled`), `std::terminate` — or, where the waiting lock's exception is caught, it restarts the
    stub and the front answers exactly again. Both were seen (the abort in the native suite runs, survival once in
    a suite under ATEN_CPU_CAPABILITY=default), which is why test_kill_9_of_the_stub_mid_stream kills between locks.
    A hang, another crash or a wrong answer fails. The outcome is printed."""
    from tests.integration.robust_locks import kill_in_contended_lock

    repo = patched_repo(build_repo(RECIPE), tmp_path / "repo", fault_step_delay_ms=str(STEP_DELAY_MS))
    s = TritonServer(repo, ports=free_ports(), workdir=tmp_path / "server")
    s.start()
    try:
        s.wait_ready(120)
        direct = LiveStream(s, "spec_decoder", "def direct(x):", LONG).wait_first()
        newest, _ = _newest_stub(s)
        looks = kill_in_contended_lock(newest, s.proc.pid)
        if looks is None:
            pytest.skip("the stub never held a mutex the server waited for in 30 s (nothing shown either way)")
        killed_at = time.monotonic()
        while s.alive() and time.monotonic() < killed_at + 10:
            time.sleep(0.1)
        outcome = "aborted"
        if s.alive():
            try:
                wait_serving(s, expected)
                outcome = f"served on: answered exactly {time.monotonic() - killed_at:.1f} s after the kill"
            except AssertionError:
                if s.alive():
                    raise
                outcome = "aborted (while the stub was restarted)"
        print(f"\nkilled at look {looks}: {outcome}; exit code {s.proc.returncode}")
        if not s.alive():
            assert "boost::interprocess::lock_exception" in s.log_path.read_text(errors="replace"), s.log_tail(40)
        direct.drain()  # (a stream whose stub died is never ended by Triton 2.51)
        direct.close()
    finally:
        s.stop()
    assert s.processes() == []
