"""spec_decoder: owns the engine and runs the decoding loop (Python backend, decoupled by default).

The engine folder (`engine/`) is ONNX Runtime's or TensorRT's; it opens through the one backend-neutral
`builder.engines.folder.open_engine` after `triton_repo.compat.check` (versions; for TensorRT the version lock
against the GPU Triton gave this instance — KIND_GPU, `model_instance_device_id`).

Requests come two ways: Triton requests (`execute`: clients calling spec_decoder directly) and the front
model's, over a local socket (`triton_repo.relay`). Both are checked alike (`triton_repo.request`: a bad
one gets an error at once) and handed to the in-flight-batching `Scheduler`, which answers from its own
thread. Triton responses carry a window of generated ids (`output_ids`, `prefix_len`, `is_final`), the
counters, and — for requests that sent `text_input` — the text itself (`text_output`); relayed ones get
the text and the counters.

Faults: a full queue (`triton.max_queue_size`) answers UNAVAILABLE at once; each request has a deadline
(`triton.request_timeout_s`, or its `timeout_s` parameter if shorter); a client's cancel or disconnect (or
the front model hanging up a relayed request) frees the request's slot at the next step boundary. When
the loop can no longer serve (a broken engine, a bug in the loop) every request gets a final error,
`execute` answers UNAVAILABLE at once, and the model unloads itself so that `/v2/models/spec_decoder/ready`
turns false (Triton 2.51 has no other way for a Python model to report unready: model readiness is the
repository manager's state, core r24.10 src/server.cc `ModelIsReady`; unloading needs
`--model-control-mode=explicit`, else the failure is only logged). The front model reloads it.
Metrics: `triton_repo.metrics` (an exporter thread). Log: one line per request received and ended.

Fault injection for tests (`fault_injection: "true"` in the model's parameters only): a request parameter
`trtspec_fault` = step | prefill | engine | loop makes the next engine call fail that way, and the parameter
`fault_step_delay_ms` slows every step by that much (`triton_repo.faults`).

Not decoupled (`triton.decoupled: false`): exactly one response per request, so `stream` is refused;
HTTP/gRPC unary infer then work (Triton refuses them for decoupled models).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils  # type: ignore[import-not-found]

from triton_repo import tensors as T
from triton_repo.compat import check, instance_gpu
from triton_repo.detok import text_delta
from triton_repo.jobs import ERROR_CODES, Chunk, Job, Overloaded, Unavailable
from triton_repo.relay import RelaySink
from triton_repo.request import Limits, RequestError, parse
from triton_repo.scheduler import Scheduler

_INPUTS = [t.name for t in T.SPEC_DECODER_INPUTS]
RUNTIME_ROOT = Path(T.__file__).resolve().parents[1]  # where the runtime's packages were imported from (logged)
_FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
FAULT_PARAMETER = "trtspec_fault"
WATCH_S = 0.25  # how often spec_decoder asks Triton whether it is being unloaded


def _i32(v: int) -> np.ndarray:
    return np.array([v], dtype=np.int32)


def _error(message: str, kind: str):
    code = getattr(pb_utils.TritonError, ERROR_CODES.get(kind, "INTERNAL"))
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, code))


class _Sink:
    """A job's view of its Triton request: response sender + cancellation.

    Responses hold exactly the outputs the request asked for: Triton 2.51's stub drops the others inside
    `send` without holding the GIL, and the NumPy arrays freed there corrupt the heap (fixed upstream after
    r24.10: python_backend b771f4f, "Hold GIL when deleting numpy array")."""

    def __init__(self, request, tokenizer, text: bool) -> None:
        self.sender = request.get_response_sender()
        self.wanted = set(request.requested_output_names())
        self.tokenizer, self.text = tokenizer, text

    def cancelled(self) -> bool:
        return bool(self.sender.is_cancelled())

    def send(self, chunk: Chunk) -> None:
        flags = _FINAL if chunk.final else 0
        if chunk.error is not None:
            self.sender.send(_error(chunk.error, chunk.error_kind), flags=flags)
            return
        values = {
            "output_ids": lambda: np.array(chunk.ids, dtype=np.int32),
            "prefix_len": lambda: _i32(chunk.prefix_len),
            "is_final": lambda: np.array([chunk.final], dtype=bool),
            "output_tokens": lambda: _i32(chunk.output_tokens),
            "steps": lambda: _i32(chunk.steps),
            "accepted_tokens": lambda: _i32(chunk.accepted),
            "drafted_tokens": lambda: _i32(chunk.drafted),
            "finish_reason": lambda: np.array([chunk.finish_reason.encode()], dtype=object),
        }
        if self.text:
            values["text_output"] = lambda: np.array(
                [text_delta(self.tokenizer, chunk.ids, chunk.prefix_len, chunk.final).encode()], dtype=object
            )
        out = [pb_utils.Tensor(name, make()) for name, make in values.items() if name in self.wanted]
        self.sender.send(pb_utils.InferenceResponse(output_tensors=out), flags=flags)


def _refusal(exc: Exception) -> str:
    return (
        "bad_request" if isinstance(exc, RequestError) else "overload" if isinstance(exc, Overloaded) else "unavailable"
    )


def _parameters(request) -> dict:
    """The request's Triton parameters (a JSON object); a RequestError when they do not parse."""
    try:
        params = json.loads(request.parameters() or "{}")
    except (TypeError, ValueError) as exc:
        raise RequestError(f"request parameters: {exc}") from None
    return params if isinstance(params, dict) else {}


class Model:
    def __init__(self, args: dict, params: dict[str, str]) -> None:
        from tokenizers import Tokenizer

        from builder.engines.folder import open_engine, read_meta
        from builder.engines.opened import budget_rule
        from builder.speculative import registry
        from builder.speculative.decoding import Decoder, DraftSchedule
        from triton_repo.metrics import SPEC_DECODER, Exporter, spec_decoder_observations, spec_decoder_values

        self.name = args["model_name"]
        folder = Path(args["model_repository"]) / args["model_version"] / params["engine_dir"]
        meta = read_meta(folder)
        device = instance_gpu(args, meta)
        problem = check(meta, device or 0)
        if problem:
            raise RuntimeError(f"spec_decoder refuses to load: {problem}")
        self.decoupled = json.loads(params.get("decoupled", "true"))
        opened = open_engine(
            folder, max_batch_size=int(meta["max_batch_size"]), threads=int(params.get("ort_threads", 1)), device=device
        )
        self.tokenizer = Tokenizer.from_file(str(opened.tokenizer_path))
        facts = registry.facts(opened.drafter)
        self.limits = Limits(
            vocab=opened.engine.vocab_size,
            max_input_len=int(params["max_input_len"]),
            max_seq_len=opened.engine.max_seq_len,
            stop_ids=tuple(opened.stop_ids),
            sampling=bool(meta["target"].get("rejection")),
            lookahead=facts.per_request,  # the (W, N, G) a request may lower, where the drafter takes them
            request_timeout_s=float(params.get("request_timeout_s", 600)),
        )
        # the draft budget per step: the recipe's pinned schedule, else the engine folder's measured rule
        pinned = json.loads(params.get("draft_schedule", "[]"))
        rule = None if pinned else budget_rule(meta)
        schedule = rule if rule is not None else DraftSchedule(pinned)
        engine = opened.engine
        self.faults = None
        if params.get("fault_injection") == "true":
            from triton_repo.faults import FaultyEngine

            engine = self.faults = FaultyEngine(engine, float(params.get("fault_step_delay_ms", 0)) / 1e3)
        decoder = Decoder(engine, opened.make_drafter(), schedule)
        self.scheduler = Scheduler(
            decoder,
            int(params.get("queue_delay_us", 0)) / 1e6,
            pb_utils.Logger.log_info,
            max_queue=int(params.get("max_queue_size", 64)),
            on_broken=self._broken,
        )
        labels = {"model": self.name, "instance": args.get("model_instance_name", self.name)}
        self.metrics = Exporter(
            pb_utils,
            SPEC_DECODER,
            labels,
            lambda: spec_decoder_values(self.scheduler),
            lambda: spec_decoder_observations(self.scheduler),
            log=pb_utils.Logger.log_warn,
        )
        self._quiet = threading.Event()  # set once the model stops talking to the server (unload, broken loop)
        self.scheduler.start()
        self.metrics.start()
        from triton_repo.relay import RelayServer, socket_path

        self.relay = RelayServer(socket_path(os.getppid(), os.getpid()), self._relayed).start()
        threading.Thread(target=self._watch_unload, name="trtspec-unload-watch", daemon=True).start()
        where = f"{meta['backend']} on GPU {device}" if device is not None else meta["backend"]
        budgets = (
            f"the measured rule, nodes per batch size {rule.picks(range(1, opened.engine.max_batch_size + 1))}"
            if rule is not None
            else (pinned or "none (the whole draft at every batch size)")
        )
        pb_utils.Logger.log_info(
            f"spec_decoder: {opened.label} ({where}), max_batch_size {opened.engine.max_batch_size}, "
            f"max_seq_len {opened.engine.max_seq_len}, draft budget {budgets}, "
            f"max queue {self.scheduler.max_queue}, request timeout {self.limits.request_timeout_s:g} s, "
            f"code from {RUNTIME_ROOT}"
        )

    def _encode(self, text: str, special: bool) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=special).ids

    def _broken(self, reason: str) -> None:
        """The loop ended for good (called from its thread, after every request got its error): make the
        model unready by unloading it. Metrics stop first: nothing may be sent once the unload began."""
        pb_utils.Logger.log_error(
            f"spec_decoder: {reason}; answering UNAVAILABLE and unloading itself so that readiness turns false"
        )
        self._quiet.set()
        self.relay.close()  # the front model stops sending work here
        self.metrics.close()
        try:
            pb_utils.unload_model(self.name)
        except Exception as exc:  # e.g. --model-control-mode none: Triton refuses explicit unloads
            pb_utils.Logger.log_error(
                f"spec_decoder: cannot unload itself to report unready ({exc}); start tritonserver "
                "with --model-control-mode=explicit --load-model=* so that it can"
            )

    def _watch_unload(self) -> None:
        """When Triton starts unloading this model (server shutdown, an unload request) with requests still
        running, end them all with a final error at once: Triton 2.51 finalizes a decoupled model only
        after its requests are answered, and otherwise waits out its exit timeout."""
        seen_ready = False
        while not self._quiet.wait(WATCH_S):
            if self._quiet.is_set():
                return
            try:
                ready = bool(pb_utils.is_model_ready(self.name))
            except Exception:  # "Server not ready": the server is shutting down
                ready = False
            seen_ready = seen_ready or ready
            if seen_ready and not ready and not self._quiet.is_set():
                self._quiet.set()
                self.relay.close()
                self.metrics.close()
                self.scheduler.stop()  # every pending and active request: a final "shutting down" error
                return

    def _one(self, r, now: float) -> None:
        sender = r.get_response_sender()
        try:
            fields = {}
            for name in _INPUTS:
                t = pb_utils.get_input_tensor_by_name(r, name)
                fields[name] = None if t is None else t.as_numpy()
            job = self._job(
                fields, _parameters(r), r.request_id(), now, lambda parsed: _Sink(r, self.tokenizer, parsed.text)
            )
            self.scheduler.submit(job)
        except (RequestError, Overloaded, Unavailable) as exc:
            kind = _refusal(exc)
            sender.send(
                _error(f"spec_decoder: {exc}" if kind != "overload" else f"spec_decoder: overloaded: {exc}", kind),
                flags=_FINAL,
            )

    def _relayed(self, conn, inputs: dict, params: dict, request_id: str) -> None:
        """A request from the front model (`triton_repo.relay`), checked and queued like a Triton request."""
        try:
            fields = {name: inputs.get(name) for name in _INPUTS}
            job = self._job(fields, params, request_id, time.monotonic(), lambda _p: RelaySink(conn, self.tokenizer))
            job.key = f"relay-{id(conn)}"
            self.scheduler.submit(job)
            conn.on_hang_up = lambda: self.scheduler.cancel(job.key)  # seen at the next step boundary
            if conn.closed.is_set():  # (it hung up before the hook was in place)
                self.scheduler.cancel(job.key)
        except (RequestError, Overloaded, Unavailable) as exc:
            kind = _refusal(exc)
            conn.send(
                {
                    "error": f"spec_decoder: {'overloaded: ' if kind == 'overload' else ''}{exc}",
                    "kind": kind,
                    "final": True,
                }
            )

    def _job(self, fields: dict, params: dict, label: str, now: float, sink) -> Job:
        """A checked request as a Job; RequestError / Unavailable when it cannot be one."""
        if not self.scheduler.healthy:
            self.scheduler.refused("unavailable")
            raise Unavailable(self.scheduler.broken or "spec_decoder is shutting down")
        try:
            parsed = parse(fields, self.limits, self._encode, params)
            if parsed.stream and not self.decoupled:
                raise RequestError(
                    "stream: this repository is not decoupled (triton.decoupled: false); "
                    "send stream=false or serve a decoupled build"
                )
        except RequestError:
            self.scheduler.refused("bad_request")
            raise
        if self.faults is not None and params.get(FAULT_PARAMETER):
            self.faults.arm(str(params[FAULT_PARAMETER]))
        return Job(
            parsed.request, parsed.stream, sink(parsed), deadline=now + parsed.timeout_s, label=label, arrived=now
        )

    def execute(self, requests):
        now = time.monotonic()
        for r in requests:
            self._one(r, now)
        return None

    def finalize(self) -> None:
        self._quiet.set()  # first: no thread may talk to the server any more
        self.relay.close()
        self.metrics.close(flush=False)
        self.scheduler.stop()  # no requests are left by now (Triton waited for them)
