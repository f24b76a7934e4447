"""spec_decoder's and the front model's Triton custom metrics, scraped from a real tritonserver's metrics port
(the tiny EAGLE-2 recipe), against what the clients themselves were told: every counter's increase over a
set of requests equals the sum of the requests' own counters (output, drafted and accepted tokens, steps),
τ's histogram holds each request's τ, the step histogram one value per step, errors are counted by kind,
gauges return to zero (no slot or KV row left), and the log has one start and one end line per request id.
`builder.bench.serve_metrics.server_delta` (what `trtspec bench` reports) is checked on the same scrapes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from builder.bench.serve_metrics import parse_prometheus, scrape, server_delta, total
from tests.integration.conftest import build_repo, oracle
from tests.integration.test_triton_faults import LiveStream

RECIPE = "recipes/tiny-llama3-eagle2.yaml"
MODEL = "tiny_llama3"
GOOD = [
    ("tiny_llama3", "def fibonacci(n):", 24, True),
    ("tiny_llama3", "import os\n", 9, False),
    ("tiny_llama3", "class Stack:", 31, True),
    ("spec_decoder", "for i in range(10):", 16, True),
    ("spec_decoder", "x = [1, 2, 3]\n", 12, False),
    ("tiny_llama3", "with open(path) as fh:", 20, True),
]


@pytest.fixture(scope="module")
def server(serve):
    return serve(build_repo(RECIPE))


def _settled(server, check, timeout: float = 10.0):
    """The first scrape (after at least one publication, every 0.25 s) on which `check` holds."""
    time.sleep(0.4)
    deadline = time.monotonic() + timeout
    while True:
        m = scrape(server.endpoints["metrics"])
        if check(m) or time.monotonic() > deadline:
            return m
        time.sleep(0.1)


def _idle(m) -> bool:
    return not any(
        total(m, n) for n in ("trtspec_requests_queued", "trtspec_requests_active", "trtspec_kv_rows_in_use")
    )


def test_counters_equal_what_the_requests_saw(server):
    before = _settled(server, _idle)
    got = [
        LiveStream(server, model, prompt, n, request_id=f"m-{i}", stream=stream).finish(60)
        for i, (model, prompt, n, stream) in enumerate(GOOD)
    ]
    bad = [
        LiveStream(server, MODEL, "x", 0, request_id="bad-0").finish(30),
        LiveStream(server, "spec_decoder", "x", 5000, request_id="bad-1").finish(30),
    ]
    for g, (_, prompt, n, _) in zip(got, GOOD):
        assert g.error is None and g.text == oracle(RECIPE, prompt, n)["text"]
    assert all(b.error is not None and "max_tokens" in b.error for b in bad)
    want = {
        "trtspec_output_tokens_total": sum(g.last["output_tokens"] for g in got),
        "trtspec_accepted_tokens_total": sum(g.last["accepted_tokens"] for g in got),
        "trtspec_draft_tokens_total": sum(g.last["drafted_tokens"] for g in got),
        "trtspec_sequence_steps_total": sum(g.last["steps"] for g in got),
        "trtspec_requests_received_total": len(GOOD),
    }
    after = _settled(server, lambda m: _idle(m) and all(total(m, k) - total(before, k) >= v for k, v in want.items()))
    d = {k: total(after, k) - total(before, k) for k in want}
    assert d == want

    def grew(name: str, **match: str) -> float:
        return total(after, name, **match) - total(before, name, **match)

    ended = lambda k: grew("trtspec_requests_ended_total", outcome=k)  # noqa: E731
    assert ended("length") + ended("stop") == len(GOOD) and ended("error") == ended("cancelled") == 0
    assert grew("trtspec_request_errors_total", kind="bad_request") == len(bad)
    taus = [(g.last["accepted_tokens"] + g.last["steps"]) / g.last["steps"] for g in got if g.last["steps"]]
    assert total(after, "trtspec_tau_count") - total(before, "trtspec_tau_count") == len(taus)
    assert total(after, "trtspec_tau_sum") - total(before, "trtspec_tau_sum") == pytest.approx(sum(taus), rel=1e-9)
    steps = total(after, "trtspec_steps_total") - total(before, "trtspec_steps_total")
    assert 0 < steps <= want["trtspec_sequence_steps_total"]  # batched steps: several sequences each
    assert total(after, "trtspec_step_seconds_count") - total(before, "trtspec_step_seconds_count") == steps
    assert total(after, "trtspec_loop_up") == 1
    s = server_delta(before, after)
    assert s["requests"] == len(GOOD) and s["output_tokens"] == want["trtspec_output_tokens_total"]
    assert s["tau"] == pytest.approx(
        (want["trtspec_accepted_tokens_total"] + want["trtspec_sequence_steps_total"])
        / want["trtspec_sequence_steps_total"],
        rel=1e-12,
    )
    assert s["errors"]["bad_request"] == len(bad) and s["ended"]["length"] + s["ended"]["stop"] == len(GOOD)
    log = server.log_path.read_text(errors="replace").splitlines()
    for i in range(len(GOOD)):
        lines = [line for line in log if f"(id 'm-{i}')" in line]
        assert [("received" in x, "ended" in x) for x in lines] == [(True, False), (False, True)], lines


def test_a_cancel_is_counted_and_everything_returns_to_zero(server):
    before = _settled(server, _idle)
    s = LiveStream(server, MODEL, "def long_one(x):", 900, params={"ignore_eos": True}).wait_first()
    s.cancel()
    s.close()
    cancels = total(before, "trtspec_front_cancels_total")
    after = _settled(server, lambda m: _idle(m) and total(m, "trtspec_front_cancels_total") > cancels)
    assert _idle(after)
    assert total(after, "trtspec_front_cancels_total") - total(before, "trtspec_front_cancels_total") == 1
    assert (
        total(after, "trtspec_requests_ended_total", outcome="cancelled")
        - total(before, "trtspec_requests_ended_total", outcome="cancelled")
    ) == 1


def test_the_scrape_parser_reads_labels_and_escapes():
    text = (
        '# HELP x_total a counter\n# TYPE x_total counter\nx_total{kind="a",model="m \\"q\\""} 3\n'
        'x_total{kind="b",model="m"} 4.5\nup 1\nh_bucket{le="+Inf"} 7\n'
    )
    m = parse_prometheus(text)
    assert total(m, "x_total") == 7.5 and total(m, "x_total", kind="b") == 4.5 and total(m, "up") == 1
    assert total(m, "x_total", model='m "q"') == 3 and total(m, "h_bucket", le="+Inf") == 7


def _soak(server, streams: int, duration_s: float, warmup_s: float, **kw):
    from devtools.bench.soak import SoakSettings, make_oracle, soak
    from tests.integration.conftest import REPO_ROOT

    s = SoakSettings(streams=streams, duration_s=duration_s, warmup_s=warmup_s, **kw)
    return soak(server, MODEL, s, make_oracle(REPO_ROOT / RECIPE, s.max_tokens), log=lambda _m: None)


def test_short_soak_is_exact_and_leaves_nothing_behind(server):
    """A few seconds of the soak (scripts/soak.py): every well-formed answer equals trtspec generate's, every
    client disconnect, malformed request and deadline ends as it should — each disconnect is one request the server
    ended `cancelled` — and the server is empty afterwards. Clients cancel by disconnecting, not by gRPC stream
    cancels: under those tritonserver 2.51 segfaults in a gRPC thread within seconds (SoakSettings.p_cancel);
    test_a_cancel_is_counted_and_everything_returns_to_zero and the fault tests send single gRPC cancels."""
    r = _soak(server, streams=8, duration_s=6.0, warmup_s=2.0, p_cancel=0.0, p_disconnect=0.08)
    # (a stall's evidence: the stubs' thread stacks at the first unanswered request, and whether its requests reached
    # spec_decoder — the log's "received"/"ended" lines per id)
    assert r["unexpected"] == 0, (r["unexpected_samples"], r["left_in_server"], r["stall_log"] or server.log_tail(60))
    assert r["ok"] == r["sent"] and r["sent"].get("good", 0) > 20 and r["sent"].get("disconnect", 0) > 0
    assert r["server"]["ended"].get("cancelled", 0) == r["ok"]["disconnect"], (r["server"], r["ok"])
    assert not any(r["left_in_server"].values())


def test_stub_stacks_on_request_and_the_server_serves_on(server):
    """`TritonServer.dump_stacks` (what the soak does at a stall): every trtspec stub writes every thread's Python stack
    into the server log — spec_decoder's scheduler loop and the front's watchers among them — and keeps serving."""
    before = len(server.log_path.read_text(errors="replace"))
    stubs = server.dump_stacks()
    assert {Path(m).parts[-3] for m in stubs} >= {MODEL, "spec_decoder"}, stubs
    deadline = time.monotonic() + 10
    while True:
        new = server.log_path.read_text(errors="replace")[before:]
        if ("scheduler.py" in new and "_loop" in new and "front.py" in new) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert "scheduler.py" in new and "_loop" in new and "front.py" in new and "Thread 0x" in new, new[-3000:]
    prompt, n = "def fibonacci(n):", 24
    got = LiveStream(server, MODEL, prompt, n, stream=True).finish(60)
    assert got.error is None and got.text == oracle(RECIPE, prompt, n)["text"]
    assert server.alive() and len(server.dump_stacks()) == len(stubs)


@pytest.mark.slow
def test_soak_32_streams_for_5_minutes(server):
    """Clients cancel by dropping HTTP generate_stream connections (8 % of requests), not by gRPC stream cancels:
    tritonserver 2.51 itself segfaults under random gRPC stream cancels (SoakSettings.p_cancel); single gRPC
    cancels are covered by the default suite's cancel and fault tests."""
    r = _soak(server, streams=32, duration_s=300.0, warmup_s=30.0, p_cancel=0.0, p_disconnect=0.08)
    print(
        {k: r[k] for k in ("sent", "ok", "unexpected", "requests_per_s", "rss_growth_after_warmup", "left_in_server")}
    )
    assert r["passed"], r["unexpected_samples"]
