"""front: the model clients call (`triton.model_name`; decoupled like spec_decoder). It relays each request
to spec_decoder over a local socket (`triton_repo.relay`) and answers with spec_decoder's text and counters.

Why a front model: Triton 2.51's ensemble does not forward a client's cancellation to its steps, so a client
that cancelled or went away kept its decoding slot until max_tokens. Why a socket and not BLS: see
`triton_repo.relay` (2.51's decoupled BLS corrupts the caller's heap). A streaming relay asks Triton after
each response it forwards (once per step) whether its client cancelled (`is_cancelled()`, one IPC round
trip); a thread asks for the other relays every `cancel_check_s`. On a cancel the front hangs up the
socket: spec_decoder sees it at once and ends the job at its next step boundary (slot and KV freed).

spec_decoder tokenizes and detokenizes itself (the same tokenizer and rules as preprocessing /
postprocessing, which stay in the repository for clients that tokenize themselves).

A watchdog thread (`watch_interval_s`) guards against a spec_decoder that can no longer answer: one of its
stub processes ended (kill -9, a crash; `triton_repo.watch`: its relays see the socket close at once), or
it is not ready (it unloads itself when its loop breaks, after answering every request UNAVAILABLE; Triton
2.51 finishes that unload only once every client stream that used it closed). Readiness is asked (one IPC)
only after such a sign. Then every relay in flight gets an UNAVAILABLE error, new requests are refused with
the reason until spec_decoder is back, and — with `restart_backend` — the front reloads it
(`pb_utils.unload_model` / `load_model`, which need `--model-control-mode=explicit`; otherwise it logs
why it cannot and stays refusing). Stubs of instances a reload replaced may linger while they unload.

One death no model can recover from: a stub killed while it holds a process-shared mutex of its shared-memory
region (an IPC handshake with the server: a response to a client that called spec_decoder directly, a log line,
a metrics update) aborts tritonserver 2.51 itself as soon as a server thread takes that mutex — python_backend
r24.10 on Boost 1.79's robust mutexes throws `boost::interprocess::lock_exception` inside a destructor
(src/python_be.cc `ResponseSendDecoupled`). Relays through this front use a socket, not that IPC, so its
clients' streams do not widen the window. `trtspec serve` then exits 1; restarting is the supervisor's job
(tests/integration/robust_locks.py shows the window and the abort on demand).

Metrics: `triton_repo.metrics.FRONT`.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils  # type: ignore[import-not-found]

from triton_repo import tensors as T
from triton_repo.jobs import ERROR_CODES
from triton_repo.metrics import FRONT, Exporter
from triton_repo.relay import RelayClosed, relay_request, socket_path
from triton_repo.watch import alive, stubs_of

_INPUTS = [t.name for t in T.CLIENT_INPUTS]
_FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
_COUNTERS = ("output_tokens", "steps", "accepted_tokens", "drafted_tokens")


def _error(message: str, code: str = "UNAVAILABLE"):
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, getattr(pb_utils.TritonError, code)))


def forwarded_parameters(raw: str) -> dict:
    """The client's request parameters for spec_decoder, Triton's own (triton_*) dropped."""
    try:
        params = json.loads(raw or "{}")
    except ValueError:
        return {}
    return {k: v for k, v in params.items() if not k.startswith("triton_")} if isinstance(params, dict) else {}


class _Relay:
    """One client request: what it asked (read inside `execute`: Triton may free a decoupled request's inputs
    once `execute` returned), its sender, its socket, and whether its final response went out."""

    def __init__(self, request, decoupled: bool) -> None:
        self.sender = request.get_response_sender()
        self.inputs = {
            n: t.as_numpy().copy() for n in _INPUTS if (t := pb_utils.get_input_tensor_by_name(request, n)) is not None
        }
        self.request_id, self.parameters = request.request_id(), forwarded_parameters(request.parameters())
        self.wanted = set(request.requested_output_names())  # only these go out: see spec_decoder's _Sink
        self.decoupled = decoupled
        self.socks: list[socket.socket] = []  # the connection to spec_decoder, once made
        self.done = self.cancelled = False
        self.checked = time.monotonic()  # when Triton was last asked whether the client cancelled
        self.lock = threading.Lock()

    def client_cancelled(self) -> bool:
        """Ask Triton (one IPC) whether the client cancelled; on the first yes, hang up on spec_decoder."""
        with self.lock:  # never ask about a request whose final response went out: Triton freed it
            self.checked = time.monotonic()
            if self.done or self.cancelled or not self.sender.is_cancelled():
                return False
            self.cancelled = True
        self.hang_up()
        return True

    def hang_up(self) -> None:
        for sock in self.socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def send(self, response, final: bool) -> None:
        with self.lock:
            if self.done:
                return
            try:
                self.sender.send(response, flags=_FINAL if final else 0)
            except Exception:  # the client is gone
                self.done = True
                return
            self.done = final

    def respond(self, message: dict) -> None:
        """One of spec_decoder's messages as this client's response (only the outputs it asked for)."""
        values = {
            "text_output": lambda: np.array([message["text"].encode()], dtype=object),
            "finish_reason": lambda: np.array([message["finish_reason"].encode()], dtype=object),
            **{n: (lambda n=n: np.array([message[n]], dtype=np.int32)) for n in _COUNTERS},
        }
        out = [pb_utils.Tensor(n, make()) for n, make in values.items() if n in self.wanted]
        self.send(pb_utils.InferenceResponse(output_tensors=out), bool(message.get("final")))

    def close(self) -> None:
        """A final response if none went out yet (an empty one when decoupled)."""
        if not self.done:
            if self.decoupled:
                with self.lock:
                    if not self.done:
                        self.done = True
                        try:
                            self.sender.send(flags=_FINAL)
                        except Exception:
                            pass
            else:
                self.send(_error("front: spec_decoder sent no response", "INTERNAL"), True)


class Model:
    def __init__(self, args: dict, params: dict[str, str]) -> None:
        self.name, self.backend = args["model_name"], params.get("backend_model", T.SPEC_DECODER)
        self.decoupled = json.loads(params.get("decoupled", "true"))
        self.cancel_check_s = float(params.get("cancel_check_s", "0.02"))
        self.watch_s = float(params.get("watch_interval_s", "0.25"))
        self.restart = json.loads(params.get("restart_backend", "true"))
        self.backend_dir = Path(args["model_repository"]).parent / self.backend
        self.server_pid = os.getppid()  # stubs are tritonserver's children
        self.down: str | None = None  # why spec_decoder cannot serve now
        self.counts = {"cancels": 0, "failures": 0, "restarts": 0}
        self._relays: dict[int, _Relay] = {}
        self._lock = threading.Lock()
        self._stubs: dict[int, str] = {}  # spec_decoder's stub processes: pid -> start time
        self._old: set[int] = set()  # stubs of instances replaced by a reload (they may still be unloading)
        self._loaded = False  # this front reloaded spec_decoder (so a stub must exist)
        self._trouble = threading.Event()  # spec_decoder failed a request: the watchdog checks on it
        self._turn = itertools.count()
        self._retry_at, self._backoff = 0.0, 1.0
        self._stop = threading.Event()
        labels = {"model": args["model_name"], "instance": args.get("model_instance_name", args["model_name"])}
        self.metrics = Exporter(
            pb_utils, FRONT, labels, self._values, log=pb_utils.Logger.log_warn, eager=False
        ).start()
        self._threads = [
            threading.Thread(
                target=self._every,
                args=(self.cancel_check_s, self._check_cancels),
                daemon=True,
                name="trtspec-front-cancels",
            ),
            threading.Thread(
                target=self._every, args=(self.watch_s, self._check_backend), daemon=True, name="trtspec-front-watchdog"
            ),
        ]
        for t in self._threads:
            t.start()

    def _values(self) -> dict:
        c = self.counts  # counters only: nothing changes (so nothing is sent) while the model unloads
        return {
            "trtspec_front_cancels_total": c["cancels"],
            "trtspec_front_backend_failures_total": c["failures"],
            "trtspec_front_backend_restarts_total": c["restarts"],
        }

    # -- requests -------------------------------------------------------------------------------------

    def execute(self, requests):
        for r in requests:
            if self.down is not None:
                r.get_response_sender().send(
                    _error(f"front: {self.backend} is unavailable: {self.down}; retry later"), flags=_FINAL
                )
                continue
            relay = _Relay(r, self.decoupled)
            with self._lock:
                self._relays[id(relay)] = relay
            threading.Thread(target=self._relay, args=(relay,), daemon=True, name="trtspec-relay").start()
        return None

    def _pick(self) -> Path | None:
        """The socket of a live spec_decoder instance (round robin over the instances' stubs)."""
        stubs = self._stubs or self._find_stubs()
        paths = [q for pid in sorted(stubs) if (q := socket_path(self.server_pid, pid)).exists()]
        return paths[next(self._turn) % len(paths)] if paths else None

    def _relay(self, relay: _Relay) -> None:
        try:
            path = self._pick()
            if path is None:
                raise RelayClosed("no spec_decoder instance is serving")
            for message in relay_request(path, relay.inputs, relay.parameters, relay.request_id, relay.socks):
                if "error" in message:
                    if message.get("kind") in ("unavailable", "shutdown"):
                        self._trouble.set()
                    relay.send(_error(message["error"], ERROR_CODES.get(message.get("kind", ""), "INTERNAL")), True)
                    return
                relay.respond(message)
                if not message.get("final") and relay.client_cancelled():  # a streamed step: seen within one step
                    self.counts["cancels"] += 1
        except (RelayClosed, OSError) as exc:
            if not relay.cancelled:  # (a cancelled relay hung up itself)
                self._trouble.set()
                relay.send(_error(f"front: {self.backend} failed mid-request ({exc}); retry the request"), True)
        except Exception as exc:
            relay.send(_error(f"front: relaying to {self.backend} failed: {exc!r}", "INTERNAL"), True)
        finally:
            relay.close()
            with self._lock:
                self._relays.pop(id(relay), None)

    # -- the two threads ------------------------------------------------------------------------------

    def _every(self, period: float, work) -> None:
        while not self._stop.wait(period):
            try:
                work()
            except Exception as exc:  # never let a watcher die; stderr, not Triton's logger: no IPC (see _serving)
                print(f"front: {work.__name__} failed: {exc!r}", file=sys.stderr, flush=True)

    def _check_cancels(self) -> None:
        """Relays not asked for `cancel_check_s` (non-streaming ones, or waiting for a slot): streaming relays
        ask after each response they forward, i.e. once per step."""
        stale = time.monotonic() - self.cancel_check_s
        with self._lock:
            relays = [r for r in self._relays.values() if not (r.cancelled or r.done) and r.checked <= stale]
        for relay in relays:
            if relay.client_cancelled():
                self.counts["cancels"] += 1

    def _check_backend(self) -> None:
        """spec_decoder's stubs alive (/proc, no IPC)? After a sign of trouble (an UNAVAILABLE answer), is it
        ready (one IPC)? If not: fail the relays, refuse new requests and reload it."""
        if self.down is None:
            if not self._stubs:
                self._stubs = self._find_stubs()
            dead = [str(pid) for pid, start in self._stubs.items() if not alive(pid, start)]
            if not self._stubs and self._loaded:  # reloaded, and its stub already gone
                dead = ["?"]
            unready = False
            if not dead and self._trouble.is_set():
                self._trouble.clear()
                try:
                    unready = not pb_utils.is_model_ready(self.backend)
                except Exception:  # "Server not ready": shutting down (`_serving` below says so)
                    unready = True
            if not (dead or unready) or not self._serving():
                return
            self._failed(f"its stub process (pid {dead[0]}) ended" if dead else "it is not ready")
        if self.restart and time.monotonic() >= self._retry_at and self._serving():
            self._reload()

    def _find_stubs(self) -> dict[int, str]:
        """spec_decoder's stub processes, but those of instances a reload replaced (they may still unload)."""
        return {p: t for p, t in stubs_of(self.backend_dir, self.server_pid).items() if p not in self._old}

    def _serving(self) -> bool:
        """False once this model is being unloaded (a server shutdown unloads spec_decoder too): then the
        watchers stop for good, since a stub must not talk to the server after its finalize began (Triton
        2.51 answers the finalize request before the stub runs `finalize`, python_backend r24.10
        src/pb_stub.cc `RunCommand`, and a late IPC message can abort the server)."""
        try:
            if not self._stop.is_set() and pb_utils.is_model_ready(self.name):
                return True
        except Exception:  # "Server not ready": the server is shutting down
            pass
        self._stop.set()
        return False

    def _failed(self, reason: str) -> None:
        self.down = reason
        self.counts["failures"] += 1
        with self._lock:
            relays, self._relays = list(self._relays.values()), {}
        pb_utils.Logger.log_error(
            f"front: {self.backend} failed: {reason}; {len(relays)} request(s) in flight get an error"
        )
        for relay in relays:
            relay.send(_error(f"front: {self.backend} failed mid-request ({reason}); retry the request"), True)
            relay.hang_up()

    def _reload(self) -> None:
        t0, old = time.monotonic(), set(stubs_of(self.backend_dir, self.server_pid))
        try:
            if pb_utils.is_model_ready(self.backend):  # a dead stub still counts as ready: unload it first
                pb_utils.unload_model(self.backend)
                while pb_utils.is_model_ready(self.backend) and time.monotonic() - t0 < 30:
                    time.sleep(0.05)
            pb_utils.load_model(self.backend)
        except Exception as exc:
            self._retry_at, self._backoff = time.monotonic() + self._backoff, min(2 * self._backoff, 60.0)
            pb_utils.Logger.log_error(
                f"front: cannot reload {self.backend} ({exc}); next try in {self._backoff / 2:.0f} s "
                "(reloading needs tritonserver --model-control-mode=explicit --load-model=*)"
            )
            return
        self._old = old
        self._stubs = self._find_stubs()  # now: a stub that dies at once must not go unseen
        self._loaded = True
        self.down, self._backoff = None, 1.0
        self.counts["restarts"] += 1
        pb_utils.Logger.log_info(f"front: {self.backend} reloaded in {time.monotonic() - t0:.2f} s; serving again")

    def finalize(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(1)
        with self._lock:
            relays, self._relays = list(self._relays.values()), {}
        for relay in relays:  # (none normally: Triton finalizes a model once its requests are answered)
            relay.send(_error("front: the server is shutting down"), True)
        self.metrics.close(flush=False)
