"""The front model's link to spec_decoder (`triton_repo.relay`): real sockets, no Triton — inputs keep their dtypes,
streams and cancels by hanging up, a dead server, and spec_decoder's bounded writes (a front that stops reading is
dropped and cannot stall the scheduler's other requests; a slow one loses nothing). Split from
`test_scheduler_faults.py`, whose fixtures and fakes (`scheduler_fakes.py`) the scheduler case uses."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from tests.unit.scheduler_fakes import Sink, long_request, make_scheduler, reqs, tiny, wait_sinks, want  # noqa: F401 (module-scoped fixtures)
from triton_repo.jobs import Job


def test_relay_inputs_keep_their_dtypes_and_bytes():
    from triton_repo.relay import decode_inputs, encode_inputs

    sent = {
        "text_input": np.array([b"caf\xc3\xa9 \xff"], dtype=object),
        "max_tokens": np.array([7], np.int32),
        "temperature": np.array([0.25], np.float32),
        "stream": np.array([True]),
        "seed": np.array([2**40], np.int64),
        "stop": np.array([b"a", b"bc"], dtype=object),
    }
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
        assert (
            [m["text"] for m in msgs] == ["t0", "t1", "t2", ""] and msgs[0]["id"] == "r1" and msgs[0]["p"] == {"x": 1.5}
        )
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


def test_a_front_that_stops_reading_is_dropped_and_a_slow_one_loses_nothing(tmp_path):
    """spec_decoder's writes are bounded (`triton_repo.relay.SEND_TIMEOUT_S`): a front relay that stops reading gets
    its request dropped once the socket's buffer is full and stays full for the bound (its sender sees RelayClosed and
    the front reads what was buffered, then RelayClosed); a front that reads slowly, pausing less than the bound,
    gets every message and the final one."""
    from triton_repo.relay import RelayClosed, RelayServer, relay_request

    bound = 0.5
    outcome: dict[str, tuple[str, int, float]] = {}

    def on_request(conn, inputs, params, request_id):  # (on the connection's own thread: it may block)
        n, last = int(inputs["max_tokens"][0]), time.monotonic()
        try:
            for i in range(n):
                conn.send({"text": "x" * 2000, "i": i, "final": False})
                last = time.monotonic()
            conn.send({"text": "", "i": n, "final": True})
            outcome[request_id] = ("done", n, 0.0)
        except RelayClosed:
            outcome[request_id] = ("dropped", i, time.monotonic() - last)

    server = RelayServer(tmp_path / "s.sock", on_request, send_timeout_s=bound).start()
    try:
        stuck = relay_request(tmp_path / "s.sock", {"max_tokens": np.array([100_000], np.int32)}, {}, "stuck")
        assert next(stuck)["i"] == 0  # then it reads nothing: ~200 MB would be needed, the socket holds far less
        deadline = time.monotonic() + 20
        while "stuck" not in outcome and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "stuck" in outcome, "spec_decoder's send blocked on a front that stopped reading"
        kind, sent, stalled = outcome["stuck"]
        assert kind == "dropped" and 0 < sent < 100_000 and bound * 0.9 <= stalled < bound + 5, outcome["stuck"]
        got = []
        with pytest.raises(RelayClosed):
            for m in stuck:
                got.append(m["i"])
        assert got == list(range(1, len(got) + 1)) and len(got) >= sent - 2  # buffered ones, in order, then EOF

        n, seen = 3000, []  # ~6 MB, many socket buffers' worth, read with pauses of 0.6 × the bound
        for m in relay_request(tmp_path / "s.sock", {"max_tokens": np.array([n], np.int32)}, {}, "slow"):
            seen.append(m["i"])
            if len(seen) % 500 == 0:
                time.sleep(bound * 0.6)
        assert seen == list(range(n + 1)) and outcome["slow"][0] == "done"
    finally:
        server.close()


def test_a_stuck_front_relay_does_not_stall_the_other_requests(tiny, reqs, want):
    """The scheduler's one thread writes every request's messages: a relayed request whose front stopped reading is
    dropped after the bound (slot and KV freed) while another request, submitted meanwhile, ends exact."""
    import socket

    from triton_repo.relay import Connection, RelaySink

    ours, front = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # full after a few messages
    front.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck = RelaySink(Connection(ours, send_timeout_s=1.0), tiny.tokenizer)  # spec_decoder's sink of a relayed job
    sched, decoder = make_scheduler(tiny)
    ok = Sink()
    try:
        sched.submit(Job(long_request(tiny, 400), True, stuck))  # the front (`front`) never reads
        time.sleep(0.3)
        sched.submit(Job(reqs[0], True, ok))
        wait_sinks([ok], timeout=60)
        _wait_for(lambda: stuck.conn.closed.is_set() and decoder.rows_in_use == 0)
    finally:
        front.close()  # (first: without the bound, the scheduler's thread is stuck writing to it)
        sched.stop()
    assert ok.ids() == want[0] and ok.final.error is None
    assert stuck.conn.closed.is_set() and sched.stats.ended.get("cancelled", 0) >= 1


def _wait_for(check, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
