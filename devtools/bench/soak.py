"""Soak: many concurrent streams against a served repository for a while, with faults mixed in, and checks.

    result = soak(repo, SoakSettings(streams=32, duration_s=300), oracle, log=print)

Each of `streams` client threads keeps one gRPC stream and sends requests one after another until the
time is up. A request is, at random: well formed (its text and token count must equal `trtspec generate`'s
greedy output for that prompt, computed once per prompt in-process: `oracle`), cancelled by its client after
a few responses (a gRPC stream cancel; off by default, see `p_cancel`), dropped by its client after a few
responses (an HTTP `generate_stream` whose connection the client closes: Triton cancels the request when it sees
the EOF), malformed (refused with an error naming the field), or given a short deadline (ends with a deadline
error). Most go to the front model, some straight to spec_decoder (gRPC kinds only: HTTP generate needs the
front's text interface). Anything else — another error, a wrong text, no answer within `answer_timeout_s` — is an
unexpected error.

Measured on the server (`triton_repo.metrics`, /proc): RSS of tritonserver and its stubs, sampled through the
run (growth after warm-up = last sample / first sample after `warmup_s` − 1), and at the end, once idle,
that no request is queued or active and the engine holds no sequence (no slot or KV leak).
Pass: no unexpected error, RSS growth < `max_rss_growth`, nothing left in the server. At the first request that got
no answer in time, every stub's Python threads' stacks are asked for (`TritonServer.dump_stacks`) and the server
log's tail then is the result's `stall_log`: where the server was stuck.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

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
    "def is_prime(n):\n",
    "while True:\n    line =",
    "from typing import List\n",
    "def merge(a, b):",
    "print(",
    "@dataclass\nclass Point:",
]
MALFORMED = {  # inputs / parameters -> the field the error must name
    "max_tokens zero": ({"max_tokens": 0}, {}, "max_tokens"),
    "max_tokens over the limit": ({"max_tokens": 100_000}, {}, "max_tokens"),
    "temperature negative": ({"temperature": -1.0}, {}, "temperature"),
    "top_p over one": ({"top_p": 2.0}, {}, "top_p"),
    "empty prompt": ({"text_input": ""}, {}, "text_input"),
    "timeout_s over the limit": ({}, {"timeout_s": 1e9}, "timeout_s"),
    "ignore_eos not a bool": ({}, {"ignore_eos": "yes"}, "ignore_eos"),
}


@dataclass(frozen=True)
class SoakSettings:
    streams: int = 32
    duration_s: float = 300.0
    warmup_s: float = 30.0
    max_tokens: int = 48  # well-formed requests ask 1..max_tokens (the oracle holds that many per prompt)
    # gRPC stream cancels: off by default. Under them tritonserver 2.51 (the wheel's) segfaults in a gRPC thread
    # within seconds (3 of 8 six-second soaks here): upstream's gRPC cancellation races (server issues 7368 and
    # 8034, fixed by server PRs 7840 and 8078, after 2.51). HTTP disconnects cancel the same way inside the server.
    p_cancel: float = 0.0
    p_disconnect: float = 0.08  # HTTP generate_stream dropped by the client after a few events
    p_malformed: float = 0.06
    p_deadline: float = 0.06
    p_direct: float = 0.15  # share sent straight to spec_decoder
    answer_timeout_s: float = 120.0
    rss_every_s: float = 2.0
    max_rss_growth: float = 0.05
    seed: int = 0


@dataclass
class Tally:
    sent: Counter = field(default_factory=Counter)
    ok: Counter = field(default_factory=Counter)
    unexpected: list[str] = field(default_factory=list)
    tokens: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    on_stall: Callable[[], str] | None = None  # called once, at the first request that got no answer
    stall_log: str | None = None

    def bad(self, what: str) -> None:
        with self.lock:
            self.unexpected.append(what)

    def stalled(self) -> None:
        """A request got no answer in time: the server's threads' stacks, once (`soak`'s on_stall)."""
        with self.lock:
            first, self.on_stall = self.on_stall, None
        if first is not None:
            self.stall_log = first()


class _Stream:
    """One client's gRPC stream, reused for its requests (restarted after it cancels one)."""

    def __init__(self, url: str) -> None:
        import tritonclient.grpc as grpcclient

        self.url, self.q = url, queue.Queue()
        self.client = grpcclient.InferenceServerClient(url)
        self.client.start_stream(callback=lambda result, error: self.q.put((result, error)))

    def restart(self) -> None:
        self.close()
        self.__init__(self.url)  # type: ignore[misc]

    def close(self) -> None:
        t = threading.Thread(
            target=lambda: (self.client.stop_stream(cancel_requests=True), self.client.close()), daemon=True
        )
        t.start()
        t.join(5)

    def send(self, model: str, values: dict[str, Any], params: dict[str, Any], request_id: str) -> None:
        import tritonclient.grpc as grpcclient

        inputs = []
        for name, v in values.items():
            a = np.asarray(v)
            kind = {"O": "BYTES", "U": "BYTES", "i": "INT32", "f": "FP32", "b": "BOOL"}[a.dtype.kind]
            if kind == "BYTES":
                a = np.array([s.encode() if isinstance(s, str) else s for s in a.reshape(-1)], dtype=object)
            t = grpcclient.InferInput(name, list(a.shape), kind)
            t.set_data_from_numpy(
                a.astype(np.int32) if kind == "INT32" else a.astype(np.float32) if kind == "FP32" else a
            )
            inputs.append(t)
        self.client.async_stream_infer(
            model, inputs, request_id=request_id, parameters=params, enable_empty_final_response=True
        )

    def answer(self, timeout: float, stop_after: int | None = None) -> dict[str, Any]:
        """Collect one request's responses: text, last counters, error; `stop_after` n responses: cancel it."""
        out: dict[str, Any] = {"text": "", "responses": 0, "error": None, "final": False}
        deadline = time.monotonic() + timeout
        while not out["final"] and out["error"] is None:
            result, error = self.q.get(timeout=max(deadline - time.monotonic(), 0.001))
            if error is not None:
                out["error"] = str(error)
                break
            resp = result.get_response()
            names = {o.name for o in resp.outputs}
            if "text_output" in names:
                out["text"] += result.as_numpy("text_output").reshape(-1)[0].decode()
            for n in ("output_tokens", "finish_reason"):
                if n in names:
                    v = result.as_numpy(n).reshape(-1)[0]
                    out[n] = v.decode() if isinstance(v, bytes) else int(v)
            out["responses"] += 1
            out["final"] = resp.parameters["triton_final_response"].bool_param
            if stop_after is not None and out["responses"] >= stop_after and not out["final"]:
                self.restart()  # stop_stream(cancel_requests=True): the client cancels and goes away
                out["cancelled"] = True
                break
        return out


def _kind(s: SoakSettings, r: float) -> str:
    """The kind of a request from one uniform draw (shares from `s`, the rest well formed)."""
    for kind, p in (
        ("cancel", s.p_cancel),
        ("disconnect", s.p_disconnect),
        ("malformed", s.p_malformed),
        ("deadline", s.p_deadline),
    ):
        if r < p:
            return kind
        r -= p
    return "good"


def _worker(
    i: int,
    urls: dict[str, str],
    s: SoakSettings,
    oracle: dict[str, list[str]],
    model: str,
    stop_at: float,
    tally: Tally,
    rng: random.Random,
) -> None:
    stream = _Stream(urls["grpc"])
    n = 0
    try:
        while time.monotonic() < stop_at:
            n += 1
            rid, kind = f"soak-{i}-{n}", _kind(s, rng.random())
            target = "spec_decoder" if kind != "disconnect" and rng.random() < s.p_direct else model
            with tally.lock:
                tally.sent[kind] += 1
            try:
                if kind == "disconnect":
                    _disconnect(urls["http"], model, rid, s, tally, rng)
                    continue
                _one(stream, kind, target, rid, s, oracle, tally, rng)
            except queue.Empty:
                tally.bad(f"{rid} ({kind}, {target}): no answer within {s.answer_timeout_s:.0f} s")
                tally.stalled()
                stream.restart()
    finally:
        stream.close()


def _one(
    stream: _Stream,
    kind: str,
    target: str,
    rid: str,
    s: SoakSettings,
    oracle: dict[str, list[str]],
    tally: Tally,
    rng: random.Random,
) -> None:
    prompt = rng.choice(PROMPTS)
    values: dict[str, Any] = {
        "text_input": [prompt],
        "max_tokens": [rng.randint(1, s.max_tokens)],
        "stream": [rng.random() < 0.7],
    }
    params: dict[str, Any] = {}
    expect = ""
    if kind in ("cancel", "deadline"):
        values.update(max_tokens=[600], stream=[True])
        params = {"ignore_eos": True} if kind == "cancel" else {"ignore_eos": True, "timeout_s": rng.uniform(0.1, 0.4)}
    elif kind == "malformed":
        case = rng.choice(list(MALFORMED))
        changes, params, expect = MALFORMED[case]
        values.update({k: [v] for k, v in changes.items()})
    stream.send(target, values, params, rid)
    got = stream.answer(s.answer_timeout_s, stop_after=rng.randint(1, 4) if kind == "cancel" else None)
    if kind == "cancel":
        ok = got.get("cancelled") or got["final"]
    elif kind == "malformed":
        ok = got["error"] is not None and expect in got["error"]
    elif kind == "deadline":
        ok = got["error"] is not None and "deadline exceeded" in got["error"]
    else:
        n = values["max_tokens"][0]
        want = oracle[prompt][min(n, len(oracle[prompt])) - 1]
        ok = got["error"] is None and got["text"] == want and got.get("output_tokens") == min(n, len(oracle[prompt]))
        with tally.lock:
            tally.tokens += got.get("output_tokens", 0)
    if ok:
        with tally.lock:
            tally.ok[kind] += 1
    else:
        tally.bad(f"{rid} ({kind}, {target}): {str(got)[:300]}")


def _disconnect(http_url: str, model: str, rid: str, s: SoakSettings, tally: Tally, rng: random.Random) -> None:
    """A long HTTP `generate_stream` request whose client reads 1..4 server-sent events, then closes the
    connection (no cancel message: the server must notice the EOF and free the request's slot)."""
    import http.client
    import json

    host, port = http_url.rsplit(":", 1)
    body = {"text_input": rng.choice(PROMPTS), "max_tokens": 600, "stream": True, "ignore_eos": True, "id": rid}
    conn = http.client.HTTPConnection(host, int(port), timeout=s.answer_timeout_s)
    events, want = 0, rng.randint(1, 4)
    try:
        conn.request(
            "POST", f"/v2/models/{model}/generate_stream", json.dumps(body), {"Content-Type": "application/json"}
        )
        resp = conn.getresponse()
        while events < want:
            line = resp.readline()
            if not line:
                break  # the stream ended before `want` events: the request finished (or failed) first
            if line.startswith(b"data:"):
                if b'"error"' in line:
                    tally.bad(f"{rid} (disconnect): {line[:300]!r}")
                    return
                events += 1
        ok = resp.status == 200 and events >= 1
    finally:
        conn.close()  # the disconnect
    if ok:
        with tally.lock:
            tally.ok["disconnect"] += 1
    else:
        tally.bad(f"{rid} (disconnect): HTTP {resp.status}, {events} events")


def make_oracle(recipe: str | Path, max_tokens: int) -> dict[str, list[str]]:
    """prompt -> [text of the first k tokens of `trtspec generate`'s greedy output, k = 1..] (ONNX Runtime engine,
    the recipe's drafter; generation stops early at an end-of-sequence token, as the server does)."""
    from builder.recipe.loader import load_recipe
    from builder.speculative.decoding import generate
    from builder.stages.decoders import build_decoder

    dec = build_decoder(load_recipe(str(recipe)), engine="onnxruntime")
    out = {}
    for p in PROMPTS:
        ids = dec.tokenizer.encode(p).ids
        g = generate(dec.engine, ids, max_tokens, dec.make_drafter(), stop_ids=dec.stop_ids)
        out[p] = [dec.tokenizer.decode(g.token_ids[:k]) for k in range(1, len(g.token_ids) + 1)]
    return out


def server_rss(pids: list[int]) -> int:
    """Σ VmRSS (bytes) of the given processes."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def soak(
    server: Any, model: str, s: SoakSettings, oracle: dict[str, list[str]], log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Run the soak against a started, ready `TritonServer`; the figures and the verdict (JSON-ready)."""
    from builder.bench.serve_metrics import scrape, server_delta, total

    tally, rng = Tally(on_stall=lambda: _stacks(server)), random.Random(s.seed)
    before = scrape(server.endpoints["metrics"])
    t0 = time.monotonic()
    stop_at = t0 + s.duration_s
    workers = [
        threading.Thread(
            target=_worker,
            args=(i, server.endpoints, s, oracle, model, stop_at, tally, random.Random(rng.random())),
            daemon=True,
        )
        for i in range(s.streams)
    ]
    for w in workers:
        w.start()
    rss: list[tuple[float, int]] = []
    while time.monotonic() < stop_at and server.alive():
        rss.append((round(time.monotonic() - t0, 1), server_rss(server.processes())))
        log(
            f"soak {rss[-1][0]:6.1f} s: {sum(tally.sent.values())} requests, {len(tally.unexpected)} unexpected, "
            f"server RSS {rss[-1][1] / 2**20:.1f} MiB"
        )
        time.sleep(s.rss_every_s)
    for w in workers:
        w.join(s.answer_timeout_s + 10)
    wall = time.monotonic() - t0
    if not server.alive():
        raise RuntimeError(f"tritonserver died during the soak:\n{server.log_tail(60)}")
    after = _idle(server, scrape, total)
    warm = [b for t, b in rss if t >= s.warmup_s] or [b for _, b in rss]
    growth = warm[-1] / warm[0] - 1 if warm and warm[0] else None
    left = {
        n: total(after, n) for n in ("trtspec_requests_queued", "trtspec_requests_active", "trtspec_kv_rows_in_use")
    }
    result = {
        "settings": asdict(s),
        "wall_s": round(wall, 1),
        "sent": dict(tally.sent),
        "ok": dict(tally.ok),
        "unexpected": len(tally.unexpected),
        "unexpected_samples": tally.unexpected[:20],
        "requests_per_s": sum(tally.sent.values()) / wall,
        "good_tokens_per_s": tally.tokens / wall,
        "rss_mib": [(t, round(b / 2**20, 1)) for t, b in rss],
        "rss_growth_after_warmup": growth,
        "left_in_server": left,
        "server": server_delta(before, after),
        "stall_log": tally.stall_log,
    }
    result["passed"] = (
        not tally.unexpected and growth is not None and growth < s.max_rss_growth and not any(left.values())
    )
    return result


def _stacks(server: Any) -> str:
    """Every Python thread's stack of the server's stubs (`TritonServer.dump_stacks`), as the log then reads."""
    stubs = server.dump_stacks()
    time.sleep(1.0)
    return f"stacks asked of {len(stubs)} stub(s) at the first unanswered request:\n{server.log_tail(400)}"


def _idle(server: Any, scrape: Callable, total: Callable, timeout: float = 30.0) -> Any:
    """The server's metrics once nothing is queued or active (or after `timeout`)."""
    deadline = time.monotonic() + timeout
    time.sleep(0.5)
    while True:
        m = scrape(server.endpoints["metrics"])
        busy = sum(
            total(m, n) for n in ("trtspec_requests_queued", "trtspec_requests_active", "trtspec_kv_rows_in_use")
        )
        if not busy or time.monotonic() > deadline:
            return m
        time.sleep(0.2)
