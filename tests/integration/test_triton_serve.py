"""The tiny EAGLE-2 recipe served by a real tritonserver: loads, answers exactly like `trtspec generate`
over HTTP and gRPC streaming, batches concurrent streams, refuses bad requests and stays healthy,
survives a client that disconnects mid-stream, and passes a short perf_analyzer run with 0 errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.integration.conftest import build_repo, http_generate, oracle, stream_request

RECIPE = "recipes/tiny-llama3-eagle2.yaml"  # the EAGLE path served (Lookahead: test_triton_modes)
MODEL = "tiny_llama3"  # the recipe's triton.model_name
PROMPTS = [
    "def fibonacci(n):",
    "import os\n",
    "class Stack:\n    def push(self, x):",
    "for i in range(10):",
    "# parse the arguments\n",
    "def add(a, b):\n    return",
    "with open(path) as fh:",
    "x = [1, 2, 3]\n",
    "try:\n    import numpy",
    "raise ValueError(",
]
LENGTHS = [24, 9, 31, 16, 40, 5, 27, 12, 20, 33]


@pytest.fixture(scope="module")
def server(serve):
    return serve(build_repo(RECIPE))


@pytest.fixture(scope="module")
def expected():
    """trtspec generate's text per (prompt, max_tokens), computed once."""
    return {(p, n): oracle(RECIPE, p, n) for p, n in zip(PROMPTS, LENGTHS)}


def _good(server) -> None:
    status, body = http_generate(server, MODEL, {"text_input": "def f(x):", "max_tokens": 4})
    assert status == 200 and body["output_tokens"] == 4, body


def test_repository_loads(server):
    for name in (MODEL, "preprocessing", "spec_decoder", "postprocessing"):
        with urllib.request.urlopen(f"http://{server.endpoints['http']}/v2/models/{name}/ready") as r:
            assert r.status == 200
    with urllib.request.urlopen(f"http://{server.endpoints['http']}/v2/models/{MODEL}/config") as r:
        cfg = json.loads(r.read())
    assert cfg["backend"] == "python" and cfg["model_transaction_policy"]["decoupled"]  # the front model
    assert {i["name"] for i in cfg["input"]} >= {"text_input", "max_tokens", "stream", "stop", "speculate"}


def test_http_generate_matches_trtspec_generate(server, expected):
    for (prompt, n), want in list(expected.items())[:4]:
        status, body = http_generate(server, MODEL, {"text_input": prompt, "max_tokens": n})
        assert status == 200, body
        assert body["text_output"] == want["text"]
        assert body["output_tokens"] == len(want["token_ids"])
        assert body["steps"] == want["steps"]
        assert body["accepted_tokens"] == sum(want["accepted_per_step"])
        assert body["finish_reason"] == want["finish_reason"]


def test_grpc_stream_matches_trtspec_generate(server, expected):
    prompt, n = PROMPTS[0], LENGTHS[0]
    want = expected[(prompt, n)]
    got = stream_request(
        server, MODEL, {"text_input": [prompt], "max_tokens": np.array([n], np.int32), "stream": np.array([True])}
    )
    assert got.error is None
    assert got.text == want["text"]
    assert len(got.texts) > 1  # one response per step that emitted text
    assert got.last["output_tokens"] == len(want["token_ids"]) and got.last["finish_reason"] == want["finish_reason"]
    # spec_decoder called directly with text answers the same, text included
    direct = stream_request(
        server,
        "spec_decoder",
        {"text_input": [prompt], "max_tokens": np.array([n], np.int32), "stream": np.array([True])},
    )
    assert direct.error is None and direct.text == want["text"]


def test_concurrent_streams_are_batched_and_exact(server, expected):
    results: dict[int, object] = {}

    def one(i: int) -> None:
        results[i] = stream_request(
            server,
            MODEL,
            {"text_input": [PROMPTS[i]], "max_tokens": np.array([LENGTHS[i]], np.int32), "stream": np.array([True])},
            timeout=120,
        )

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    for i, (p, n) in enumerate(zip(PROMPTS, LENGTHS)):
        got = results[i]
        assert got.error is None, got.error
        assert got.text == expected[(p, n)]["text"], (p, n)
    import re

    log = server.log_path.read_text(errors="replace")
    batches = [int(b) for b in re.findall(r"batch of (\d+) sequences", log)]
    assert max(batches, default=1) >= 2, "requests never shared a step"  # 4 (max_batch_size) on an idle machine


BAD = {
    "missing text_input": {"max_tokens": np.array([4], np.int32)},
    "missing max_tokens": {"text_input": ["x = 1"]},
    "max_tokens dtype": {"text_input": ["x = 1"], "max_tokens": np.array([4.0], np.float32)},
    "max_tokens shape": {"text_input": ["x = 1"], "max_tokens": np.array([4, 5], np.int32)},
    "max_tokens zero": {"text_input": ["x = 1"], "max_tokens": np.array([0], np.int32)},
    "max_tokens negative": {"text_input": ["x = 1"], "max_tokens": np.array([-7], np.int32)},
    "max_tokens over limit": {"text_input": ["x = 1"], "max_tokens": np.array([5000], np.int32)},
    "empty prompt": {"text_input": [""], "max_tokens": np.array([4], np.int32)},
    "prompt too long": {"text_input": ["x = 1\n" * 400], "max_tokens": np.array([4], np.int32)},
    "temperature negative": {
        "text_input": ["x"],
        "max_tokens": np.array([4], np.int32),
        "temperature": np.array([-1.0], np.float32),
    },
    "temperature nan": {
        "text_input": ["x"],
        "max_tokens": np.array([4], np.int32),
        "temperature": np.array([np.nan], np.float32),
    },
    "top_p zero": {"text_input": ["x"], "max_tokens": np.array([4], np.int32), "top_p": np.array([0.0], np.float32)},
    "top_p over one": {
        "text_input": ["x"],
        "max_tokens": np.array([4], np.int32),
        "top_p": np.array([1.5], np.float32),
    },
    "seed negative": {"text_input": ["x"], "max_tokens": np.array([4], np.int32), "seed": np.array([-1], np.int64)},
    "lookahead on eagle": {
        "text_input": ["x"],
        "max_tokens": np.array([4], np.int32),
        "lookahead_window": np.array([2], np.int32),
    },
    "speculate dtype": {
        "text_input": ["x"],
        "max_tokens": np.array([4], np.int32),
        "speculate": np.array([1], np.int32),
    },
    "unknown input": {"text_input": ["x"], "max_tokens": np.array([4], np.int32), "bogus": np.array([1], np.int32)},
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_request_gets_an_error_and_the_server_stays_healthy(server, case):
    got = stream_request(server, MODEL, BAD[case])
    assert got.error is not None, got
    _good(server)


def test_client_disconnect_mid_stream_frees_the_slot(server):
    script = textwrap.dedent(f"""
        import os, sys, queue
        import numpy as np
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from tests.integration.conftest import grpc_inputs
        import tritonclient.grpc as g
        q = queue.Queue()
        c = g.InferenceServerClient({server.endpoints["grpc"]!r})
        c.start_stream(callback=lambda result, error: q.put((result, error)))
        c.async_stream_infer("spec_decoder", grpc_inputs({{"text_input": ["def long_function():"],
            "max_tokens": np.array([900], np.int32), "stream": np.array([True])}}))
        q.get(timeout=60)
        print("got one", flush=True)
        os._exit(0)  # the client vanishes mid-stream
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "got one" in out.stdout, out.stderr
    deadline = time.monotonic() + 30
    while "ended: cancelled" not in server.log_path.read_text(errors="replace") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "ended: cancelled" in server.log_path.read_text(errors="replace")
    _good(server)


def test_cancel_through_the_ensemble_is_clean(server):
    """The client cancels its stream; the ensemble drops it (its steps run to max_tokens: Triton 2.51)."""
    import queue

    import tritonclient.grpc as grpcclient

    from tests.integration.conftest import grpc_inputs

    q: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.endpoints["grpc"])
    client.start_stream(callback=lambda result, error: q.put((result, error)))
    client.async_stream_infer(
        MODEL,
        grpc_inputs(
            {"text_input": ["import sys\n"], "max_tokens": np.array([60], np.int32), "stream": np.array([True])}
        ),
    )
    q.get(timeout=60)
    client.stop_stream(cancel_requests=True)
    client.close()
    _good(server)


def test_perf_analyzer_streams_through_the_ensemble_with_no_errors(server, tmp_path):
    from builder.serve.perf import find_perf_analyzer, perf_command, perf_env, write_input_data

    if find_perf_analyzer() is None:
        pytest.fail("perf_analyzer missing: the serve extra installs it (tritonclient wheel)")
    data = write_input_data(tmp_path / "data.json", PROMPTS[:4], 12)
    cmd = perf_command(
        MODEL,
        server.endpoints["grpc"],
        data,
        concurrency=2,
        requests=8,
        stability_percentage=1000,
        max_trials=4,
        csv=tmp_path / "pa.csv",
    )
    before = _server_stats(server, MODEL)  # earlier tests' bad requests count as failures: compare the run alone
    run = subprocess.run(cmd, env=perf_env(), capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "Throughput" in run.stdout and (tmp_path / "pa.csv").is_file()
    after = _server_stats(server, MODEL)
    assert after["fail"] == before["fail"], (before, after)
    assert after["success"] > before["success"]


def _server_stats(server, model: str) -> dict:
    with urllib.request.urlopen(f"http://{server.endpoints['http']}/v2/models/{model}/stats") as r:
        s = json.loads(r.read())["model_stats"][0]["inference_stats"]
    return {"success": int(s["success"]["count"]), "fail": int(s["fail"]["count"])}


def test_shutdown_leaves_no_process(serve):
    """A second server on the same repository: stop() leaves neither tritonserver nor any stub alive."""
    from builder.serve.server import TritonServer, free_ports

    s = TritonServer(build_repo(RECIPE), ports=free_ports())
    s.start()
    s.wait_ready(120)
    pids = s.processes()
    assert len(pids) >= 4  # the server and one stub per Python model
    s.stop()
    assert s.processes() == []
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or _zombie_or_other(pid, s.proc.pid)


def _zombie_or_other(pid: int, pgid: int) -> bool:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0] == "Z" or int(fields[2]) != pgid
