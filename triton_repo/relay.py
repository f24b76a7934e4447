"""The front model ↔ spec_decoder link: JSON lines over a local Unix socket, not Triton's BLS.

Why not BLS: Triton 2.51's Python stub builds each decoupled BLS response's NumPy arrays on its queue-monitor
thread without holding the GIL (python_backend r24.10, commit 01d0ad8: src/pb_stub.cc
`Stub::ProcessBLSResponseDecoupled` → src/pb_tensor.cc `PbTensor::PbTensor(AllocatedSharedMemory…)`, which
calls `py::array` and `deserialize_bytes_tensor`), so any other Python thread in the caller corrupts the
heap sooner or later (seen here: a segfault in malloc within minutes of perf_analyzer load), and it loses
error responses that follow data responses (the `has_error` branch is overwritten just below). A socket also
carries cancellation for free: the front closes it, spec_decoder's reader sees EOF at once; and a
spec_decoder stub killed with -9 closes it too, so the front answers its clients at once.

    spec_decoder: RelayServer(socket_path(server_pid, pid), on_request).start()   # one socket per stub
    front:        for message in relay_request(path, inputs, parameters, request_id, stop): ...

Protocol: the front writes one line {"inputs": {name: nested list}, "parameters": {...}, "request_id": str};
spec_decoder answers lines {"text", "output_tokens", "steps", "accepted_tokens", "drafted_tokens",
"finish_reason", "final"} or, last, {"error", "kind", "final": true}. Inputs are rebuilt with each tensor's
declared dtype (`triton_repo.tensors`), so spec_decoder checks them exactly as a Triton request's. The
sockets live in a 0700 directory per server (`socket_dir`); a socket is removed when its stub stops serving.

spec_decoder's messages are written by its one scheduler thread, which steps every request: a front relay that stops
reading (its thread stuck in a Triton call) would fill the socket's buffer (a few hundred messages) and then block that
thread, and with it every other request. So spec_decoder's side writes with a bound (`Connection.send`, SEND_TIMEOUT_S
without the socket taking the message): past it the request is dropped as one that lost its client (the scheduler
frees its slot and KV), the socket is closed, and the front's relay ends with RelayClosed.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import numpy as np

from triton_repo import tensors as T
from triton_repo.detok import text_delta

if TYPE_CHECKING:
    from triton_repo.jobs import Chunk

MAX_LINE = 16 << 20  # a request line is at most this many bytes (prompts are bounded far below)
SEND_TIMEOUT_S = 10.0  # spec_decoder drops a request whose front relay took none of a message for this long
_DTYPES = {"INT32": np.int32, "INT64": np.int64, "FP32": np.float32, "BOOL": np.bool_, "STRING": np.object_}
_SPEC = {t.name: t for t in T.SPEC_DECODER_INPUTS}


class RelayClosed(ConnectionError):
    """The other side closed the socket before the final message (spec_decoder died or stopped)."""


def socket_dir(server_pid: int) -> Path:
    """This server's socket folder (created 0700: only the server's user may connect)."""
    d = Path(tempfile.gettempdir()) / f"trtspec-relay-{server_pid}"
    d.mkdir(mode=0o700, exist_ok=True)
    if (d.stat().st_mode & 0o077) or d.stat().st_uid != os.getuid():
        raise PermissionError(f"{d} is open to other users; remove it")
    return d


def socket_path(server_pid: int, stub_pid: int) -> Path:
    return socket_dir(server_pid) / f"spec_decoder.{stub_pid}.sock"


def encode_inputs(inputs: dict[str, np.ndarray]) -> dict[str, Any]:
    """Tensors as JSON: shape and flat values (bytes as text; undecodable bytes survive via surrogateescape)."""
    out = {}
    for name, a in inputs.items():
        a = np.asarray(a)
        values = [v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else v for v in a.reshape(-1).tolist()]
        out[name] = {"shape": list(a.shape), "values": values}
    return out


def decode_inputs(raw: dict[str, Any]) -> dict[str, np.ndarray]:
    """The inputs as spec_decoder's own tensors: only its names, each with its declared dtype."""
    fields: dict[str, np.ndarray] = {}
    for name, v in raw.items():
        spec = _SPEC.get(name)
        if spec is None or not isinstance(v, dict):
            raise ValueError(f"relay: unknown input {name!r}")
        values = v["values"]
        if spec.dtype == "STRING":
            values = [s.encode("utf-8", "surrogateescape") for s in values]
        fields[name] = np.array(values, dtype=_DTYPES[spec.dtype]).reshape(v["shape"])
    return fields


def _write(
    sock: socket.socket, message: dict[str, Any], lock: threading.Lock | None = None, timeout: float | None = None
) -> None:
    """One message as a line; `timeout`: TimeoutError when the socket takes none of it for that long (the socket
    itself stays blocking: its reader thread waits on it for the whole request)."""
    data = (json.dumps(message) + "\n").encode()
    with lock if lock is not None else contextlib.nullcontext():
        if timeout is None:
            sock.sendall(data)
        else:
            _send_within(sock, data, timeout)


def _send_within(sock: socket.socket, data: bytes, timeout: float) -> None:
    """sendall, but each wait for room in the socket's buffer lasts at most `timeout` s (TimeoutError then)."""
    view = memoryview(data)
    poller = None
    while view:
        try:
            view = view[sock.send(view, socket.MSG_DONTWAIT) :]
        except BlockingIOError:
            if poller is None:
                poller = select.poll()
                poller.register(sock, select.POLLOUT)
            if not poller.poll(timeout * 1000):
                raise TimeoutError(f"the reader took nothing for {timeout:g} s") from None


def _lines(sock: socket.socket) -> Iterator[dict[str, Any]]:
    buf = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return
        buf += chunk
        if len(buf) > MAX_LINE:
            raise ValueError("relay: message too long")
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield json.loads(line)


class Connection:
    """spec_decoder's side of one relayed request: send messages; `closed` once the front hung up."""

    def __init__(self, sock: socket.socket, send_timeout_s: float = SEND_TIMEOUT_S) -> None:
        self.sock, self.lock, self.send_timeout_s = sock, threading.Lock(), send_timeout_s
        self.closed = threading.Event()
        self.on_hang_up: Callable[[], None] | None = None  # called (reader thread) when the front hangs up

    def hung_up(self) -> None:
        self.closed.set()
        if self.on_hang_up is not None:
            self.on_hang_up()

    def send(self, message: dict[str, Any]) -> None:
        if self.closed.is_set():
            raise RelayClosed("the front model closed this request")
        try:
            _write(self.sock, message, self.lock, self.send_timeout_s)
        except TimeoutError as exc:  # (module docstring) the scheduler drops the request; the front sees EOF
            self.close()
            raise RelayClosed(f"the front model stopped reading this request: {exc}") from None
        if message.get("final"):
            self.close()

    def close(self) -> None:
        self.closed.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class RelaySink:
    """spec_decoder's sink (`triton_repo.jobs`) of a job relayed by the front model: text and counters as JSON lines
    over its `Connection`; the front hanging up (its client cancelled or went away) is the cancellation."""

    def __init__(self, conn: Connection, tokenizer: Any) -> None:
        self.conn, self.tokenizer = conn, tokenizer

    def cancelled(self) -> bool:
        return self.conn.closed.is_set()

    def send(self, chunk: Chunk) -> None:
        if chunk.error is not None:
            self.conn.send({"error": chunk.error, "kind": chunk.error_kind, "final": True})
            return
        self.conn.send(
            {
                "text": text_delta(self.tokenizer, chunk.ids, chunk.prefix_len, chunk.final),
                "output_tokens": chunk.output_tokens,
                "steps": chunk.steps,
                "accepted_tokens": chunk.accepted,
                "drafted_tokens": chunk.drafted,
                "finish_reason": chunk.finish_reason,
                "final": chunk.final,
            }
        )


class RelayServer:
    """Accepts the front model's requests on `path`; `on_request(conn, inputs, parameters, request_id)` per request."""

    def __init__(
        self,
        path: Path,
        on_request: Callable[[Connection, dict, dict, str], None],
        log: Callable[[str], None] = lambda _m: None,
        send_timeout_s: float = SEND_TIMEOUT_S,
    ) -> None:
        self.path, self.on_request, self.log, self.send_timeout_s = Path(path), on_request, log, send_timeout_s
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if self.path.exists():
            self.path.unlink()  # a stale socket of a dead stub with our pid
        self.sock.bind(str(self.path))
        os.chmod(self.path, 0o600)
        self.sock.listen(256)
        self._stop = threading.Event()

    def start(self) -> "RelayServer":
        threading.Thread(target=self._accept, name="trtspec-relay-accept", daemon=True).start()
        return self

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                sock, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), name="trtspec-relay", daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        conn = Connection(sock, self.send_timeout_s)
        lines = _lines(sock)
        try:
            first = next(lines)
            inputs = decode_inputs(first.get("inputs", {}))
            params = first.get("parameters") or {}
            self.on_request(conn, inputs, params if isinstance(params, dict) else {}, str(first.get("request_id", "")))
        except (StopIteration, ValueError, KeyError, TypeError) as exc:
            try:
                conn.send({"error": f"spec_decoder: bad relay message: {exc}", "kind": "bad_request", "final": True})
            except OSError:
                pass
            return
        try:
            for _ in lines:  # nothing more is expected: wait for the front to hang up
                pass
        except (OSError, ValueError):
            pass
        if not conn.closed.is_set():  # (not closed by our own final message)
            conn.hung_up()

    def close(self) -> None:
        """Stop accepting and remove the socket, and the server's socket folder once no other stub's socket is
        in it (requests in flight keep their connections)."""
        self._stop.set()
        try:
            self.sock.close()
        finally:
            self.path.unlink(missing_ok=True)
            try:
                self.path.parent.rmdir()
            except OSError:
                pass  # another stub's socket is still there (or the folder is gone)


def relay_request(
    path: Path,
    inputs: dict[str, np.ndarray],
    parameters: dict[str, Any],
    request_id: str,
    holder: list | None = None,
    timeout: float = 5.0,
) -> Iterator[dict[str, Any]]:
    """The front's side: send one request, yield spec_decoder's messages until the final one. `holder` gets the
    socket (closing it from another thread cancels the request). RelayClosed if it ends without a final one."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(str(path))
        sock.settimeout(None)
        if holder is not None:
            holder.append(sock)
        _write(sock, {"inputs": encode_inputs(inputs), "parameters": parameters, "request_id": request_id})
        for message in _lines(sock):
            yield message
            if message.get("final"):
                return
        raise RelayClosed("spec_decoder closed the request without a final response")
    except (ConnectionResetError, BrokenPipeError) as exc:
        raise RelayClosed(f"spec_decoder's connection broke: {exc}") from None
    finally:
        sock.close()
