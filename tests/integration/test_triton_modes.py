"""Other repositories under a real tritonserver: the Lookahead recipe with a draft schedule and
per-request speculation controls; a non-decoupled build (HTTP /infer); a repository whose engine was
built by another onnxruntime (spec_decoder refuses to load, naming both sides); `trtspec serve`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from builder.serve.server import ServerError, TritonServer, free_ports
from tests.integration.conftest import REPO_ROOT, build_repo, http_generate, oracle, stream_request

LOOKAHEAD = "recipes/tiny-llama3-lookahead.yaml"
SCHEDULE = "triton.draft_schedule=[[1, 64], [2, 5], [3, 1]]"  # whole tree alone, a smaller one in pairs, off beyond
MODEL = "tiny_llama3"
PROMPTS = ["def fibonacci(n):", "import os\n", "class Stack:", "for i in range(10):"]
LENGTHS = [30, 14, 22, 18]


@pytest.fixture(scope="module")
def la_server(serve):
    return serve(build_repo(LOOKAHEAD, SCHEDULE))


@pytest.fixture(scope="module")
def la_expected():
    return {p: oracle(LOOKAHEAD, p, n) for p, n in zip(PROMPTS, LENGTHS)}


def _req(prompt: str, n: int, **extra) -> dict:
    return {"text_input": [prompt], "max_tokens": np.array([n], np.int32), "stream": np.array([True]), **extra}


def _engine_wng() -> tuple[int, int, int]:
    from builder.recipe.loader import load_recipe

    s = load_recipe(str(REPO_ROOT / LOOKAHEAD)).recipe.speculative
    return s.window, s.ngram, s.verification_set


def test_lookahead_per_request_controls(la_server, la_expected):
    p, n = PROMPTS[0], LENGTHS[0]
    w, ng, g = _engine_wng()
    full = stream_request(la_server, MODEL, _req(p, n))
    assert full.text == la_expected[p]["text"] and full.last["drafted_tokens"] > 0
    small = stream_request(
        la_server,
        MODEL,
        _req(
            p,
            n,
            lookahead_window=np.array([1], np.int32),
            lookahead_ngram=np.array([2], np.int32),
            lookahead_verification_set=np.array([0], np.int32),
        ),
    )
    assert small.error is None and small.text == la_expected[p]["text"]  # lossless whatever the W, N, G
    assert small.last["drafted_tokens"] != full.last["drafted_tokens"]
    off = stream_request(la_server, MODEL, _req(p, n, speculate=np.array([False])))
    assert off.text == la_expected[p]["text"] and off.last["drafted_tokens"] == 0 and off.last["accepted_tokens"] == 0
    for name, v in (("lookahead_window", w + 1), ("lookahead_ngram", ng + 1), ("lookahead_verification_set", g + 1)):
        too_big = stream_request(la_server, MODEL, _req(p, n, **{name: np.array([v], np.int32)}))
        assert too_big.error is not None and name in too_big.error


def test_lookahead_concurrent_under_the_schedule(la_server, la_expected):
    results = {}

    def one(i: int) -> None:
        results[i] = stream_request(la_server, MODEL, _req(PROMPTS[i], LENGTHS[i]), timeout=120)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    for i, p in enumerate(PROMPTS):
        assert results[i].error is None and results[i].text == la_expected[p]["text"], p
    log = la_server.log_path.read_text(errors="replace")
    assert "draft budget 1" in log or "draft budget 5" in log  # the schedule cut the trees as the batch grew


def test_stop_words(la_server, la_expected):
    p = PROMPTS[0]
    text = la_expected[p]["text"]
    word = text.strip().split()[1]  # a word the greedy output contains
    got = stream_request(la_server, MODEL, _req(p, LENGTHS[0], stop=np.array([word.encode()], dtype=object)))
    assert got.error is None and got.last["finish_reason"] == "stop"
    assert text.startswith(got.text) and word in got.text and len(got.text) < len(text)


def test_non_decoupled_repository_serves_http_infer(serve):
    server = serve(
        build_repo("recipes/tiny-llama3-eagle2.yaml", "triton.decoupled=false", "triton.model_name=tiny_sync")
    )
    want = oracle("recipes/tiny-llama3-eagle2.yaml", "def add(a, b):", 12)
    body = {
        "inputs": [
            {"name": "text_input", "shape": [1], "datatype": "BYTES", "data": ["def add(a, b):"]},
            {"name": "max_tokens", "shape": [1], "datatype": "INT32", "data": [12]},
        ]
    }
    url = f"http://{server.endpoints['http']}/v2/models/tiny_sync/infer"
    with urllib.request.urlopen(urllib.request.Request(url, json.dumps(body).encode()), timeout=60) as r:
        out = {o["name"]: o["data"][0] for o in json.loads(r.read())["outputs"]}
    assert out["text_output"] == want["text"] and out["output_tokens"] == 12
    status, err = http_generate(server, "tiny_sync", {"text_input": "x", "max_tokens": 4, "stream": True})
    assert status != 200 and "decoupled" in err["error"]


def test_engine_of_another_onnxruntime_is_refused(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(build_repo("recipes/tiny-llama3-eagle2.yaml"), repo)  # copies: the cached files stay untouched
    engine_json = repo / "spec_decoder" / "1" / "engine" / "engine.json"
    meta = json.loads(engine_json.read_text())
    meta["versions"]["onnxruntime"] = "0.0.1"
    engine_json.unlink()
    engine_json.write_text(json.dumps(meta))
    server = TritonServer(repo, ports=free_ports())
    server.start()
    try:
        with pytest.raises(ServerError) as err:
            server.wait_ready(60)
        # the refusal is in the server's log; the error's 40-line tail may instead end in tritonserver 2.51's own abort
        # while it unloads the other models after a failed load (boost::interprocess::lock_exception, seen under load)
        msg = str(err.value) + server.log_path.read_text(encoding="utf-8", errors="replace")
        import onnxruntime

        assert "spec_decoder refuses to load" in msg
        assert "onnxruntime 0.0.1" in msg and f"onnxruntime {onnxruntime.__version__}" in msg
    finally:
        server.stop()
    assert server.processes() == []


def test_trtspec_serve_command_starts_answers_and_stops_on_sigterm(tmp_path):
    ports = free_ports()
    env = {**os.environ, "TRTSPEC_CACHE_DIR": os.environ["TRTSPEC_CACHE_DIR"]}
    cmd = [
        sys.executable,
        "-m",
        "builder.cli",
        "serve",
        str(REPO_ROOT / "recipes/tiny-llama3-eagle2.yaml"),
        "--cache-dir",
        env["TRTSPEC_CACHE_DIR"],
        "--http-port",
        str(ports.http),
        "--grpc-port",
        str(ports.grpc),
        "--metrics-port",
        str(ports.metrics),
        "--workdir",
        str(tmp_path / "work"),
        "--quiet",
    ]
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # "ready: …" once every model is loaded
        assert line.startswith("ready:"), line + proc.stderr.read()
        assert f"127.0.0.1:{ports.http}" in line
        url = f"http://127.0.0.1:{ports.http}/v2/models/{MODEL}/generate"
        with urllib.request.urlopen(
            url, json.dumps({"text_input": "import os", "max_tokens": 3}).encode(), timeout=60
        ) as r:
            assert json.loads(r.read())["output_tokens"] == 3
        server_pids = _children(proc.pid)
        assert server_pids
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(0.2)
    assert [p for p in server_pids if _alive(p)] == []


def _children(pid: int) -> list[int]:
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                raw = Path(f"/proc/{p}/stat").read_text()
            except OSError:
                continue
            f = raw[raw.rindex(")") + 2 :].split()
            if int(f[1]) == pid:
                out.append(int(p))
                out += _children(int(p))
    return out


def _alive(pid: int) -> bool:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return raw[raw.rindex(")") + 2 :].split()[0] != "Z"
