"""Fixtures for tests against a real Triton Inference Server (tritonserver from the serve extra).

Each module serves one repository (built from a tiny recipe into the run's temporary cache) on free
loopback ports; the oracle is `trtspec generate --json` (greedy) for the same recipe. The tests skip,
saying why, only when no tritonserver binary is installed.
"""

from __future__ import annotations

import json
import queue
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from builder.serve.server import TritonServer, find_tritonserver, free_ports

REPO_ROOT = Path(__file__).resolve().parents[2]

if find_tritonserver() is None:
    pytest.skip("no tritonserver binary (install the serve extra: bash scripts/setup.sh)", allow_module_level=True)


def build_repo(recipe: str, *overrides: str) -> Path:
    from builder.recipe.loader import load_recipe
    from builder.stages.decoders import cache_dir
    from builder.stages.runner import build

    loaded = load_recipe(str(REPO_ROOT / recipe), overrides)
    return build(loaded, cache_dir(), until="repo").folder("repo")


def oracle(recipe: str, prompt: str, max_tokens: int, *extra: str) -> dict[str, Any]:
    """What `trtspec generate --json` prints for this prompt (greedy)."""
    from click.testing import CliRunner

    from builder.cli import cli

    res = CliRunner().invoke(
        cli,
        [
            "generate",
            str(REPO_ROOT / recipe),
            "--prompt",
            prompt,
            "--max-new-tokens",
            str(max_tokens),
            "--json",
            *extra,
        ],
    )
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def serve():
    """serve(repo) -> a started, ready TritonServer (stopped at module end, checked to leave nothing)."""
    servers: list[TritonServer] = []

    def start(repo: Path) -> TritonServer:
        s = TritonServer(repo, ports=free_ports())
        s.start()
        s.wait_ready(120)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()
        assert s.processes() == []


# -- clients ------------------------------------------------------------------------------------------


def grpc_inputs(values: dict[str, Any]):
    import tritonclient.grpc as grpcclient

    out = []
    for name, v in values.items():
        a = np.asarray(v)
        if a.dtype.kind in "US":
            a = np.array([s.encode() if isinstance(s, str) else s for s in a.reshape(-1)], dtype=object).reshape(
                a.shape
            )
        dtype = {"O": "BYTES", "i": {4: "INT32", 8: "INT64"}, "f": "FP32", "b": "BOOL"}[a.dtype.kind]
        if isinstance(dtype, dict):
            dtype = dtype[a.dtype.itemsize]
        t = grpcclient.InferInput(name, list(a.shape), dtype)
        t.set_data_from_numpy(a)
        out.append(t)
    return out


def read_response(result: Any, texts: list[str], last: dict[str, Any]) -> bool:
    """One streamed response of the text models: its text delta appended to `texts`, its counters and
    finish_reason into `last`; whether it is the final one."""
    resp = result.get_response()
    names = {o.name for o in resp.outputs}
    if "text_output" in names:
        texts.append(result.as_numpy("text_output").reshape(-1)[0].decode())
    for n in ("output_tokens", "steps", "accepted_tokens", "drafted_tokens"):
        if n in names:
            last[n] = int(result.as_numpy(n).reshape(-1)[0])
    if "finish_reason" in names:
        last["finish_reason"] = result.as_numpy("finish_reason").reshape(-1)[0].decode()
    return bool(resp.parameters["triton_final_response"].bool_param)


@dataclass
class Stream:
    """One gRPC stream's responses: text deltas, the last counters, or an error."""

    texts: list[str] = field(default_factory=list)
    last: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    finals: int = 0

    @property
    def text(self) -> str:
        return "".join(self.texts)


def stream_request(server: TritonServer, model: str, values: dict[str, Any], timeout: float = 60.0) -> Stream:
    """Send one request on a gRPC stream and collect every response until the final one."""
    import tritonclient.grpc as grpcclient

    q: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.endpoints["grpc"])
    client.start_stream(callback=lambda result, error: q.put((result, error)))
    out = Stream()
    try:
        client.async_stream_infer(model, grpc_inputs(values), enable_empty_final_response=True)
        while True:
            result, error = q.get(timeout=timeout)
            if error is not None:
                out.error = str(error)
                break
            if read_response(result, out.texts, out.last):
                out.finals += 1
                break
    finally:
        client.stop_stream()
        client.close()
    return out


def http_generate(server: TritonServer, model: str, body: dict[str, Any], timeout: float = 60.0) -> tuple[int, dict]:
    import urllib.error
    import urllib.request

    url = f"http://{server.endpoints['http']}/v2/models/{model}/generate"
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")
