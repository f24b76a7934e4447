"""spec_decoder: owns the engine and runs the decoding loop (Python backend, decoupled by default).

`execute` checks each request and its parameters (`triton_repo.request`: a bad one gets an error response at once) and
hands the rest to the in-flight-batching `Scheduler`, which answers through each request's response
sender from its own thread, so `execute` returns None immediately. Responses carry a window of
generated ids (`output_ids`, `prefix_len`, `is_final`) for postprocessing, the counters, and — for
clients that sent `text_input` directly — the text itself (`text_output`). Cancellation (a client's
cancel or disconnect) frees the request's slot at the next step boundary.

Not decoupled (`triton.decoupled: false`): exactly one response per request, so `stream` is refused;
HTTP/gRPC unary infer then work (Triton refuses them for decoupled models).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils  # type: ignore[import-not-found]

from triton_repo import tensors as T
from triton_repo.compat import built_versions, mismatch, runtime_versions
from triton_repo.detok import text_delta
from triton_repo.request import Limits, RequestError, parse
from triton_repo.scheduler import Chunk, Job, Scheduler

_INPUTS = [t.name for t in T.SPEC_DECODER_INPUTS]


def _i32(v: int) -> np.ndarray:
    return np.array([v], dtype=np.int32)


class _Sink:
    """A job's view of its Triton request: response sender + cancellation."""

    def __init__(self, request, tokenizer, text: bool) -> None:
        self.request, self.sender = request, request.get_response_sender()
        self.tokenizer, self.text = tokenizer, text

    def cancelled(self) -> bool:
        return bool(self.sender.is_cancelled())

    def send(self, chunk: Chunk) -> None:
        flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if chunk.final else 0
        if chunk.error is not None:
            self.sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(chunk.error)), flags=flags)
            return
        out = [pb_utils.Tensor("output_ids", np.array(chunk.ids, dtype=np.int32)),
               pb_utils.Tensor("prefix_len", _i32(chunk.prefix_len)),
               pb_utils.Tensor("is_final", np.array([chunk.final], dtype=bool)),
               pb_utils.Tensor("output_tokens", _i32(chunk.output_tokens)), pb_utils.Tensor("steps", _i32(chunk.steps)),
               pb_utils.Tensor("accepted_tokens", _i32(chunk.accepted)),
               pb_utils.Tensor("drafted_tokens", _i32(chunk.drafted)),
               pb_utils.Tensor("finish_reason", np.array([chunk.finish_reason.encode()], dtype=object))]  # fmt: skip
        if self.text:
            text = text_delta(self.tokenizer, chunk.ids, chunk.prefix_len, chunk.final)
            out.append(pb_utils.Tensor("text_output", np.array([text.encode()], dtype=object)))
        self.sender.send(pb_utils.InferenceResponse(output_tensors=out), flags=flags)


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

        from builder.engines.ort.load import open_engine, read_meta
        from builder.speculative.decoding import Decoder, DraftSchedule

        folder = Path(args["model_repository"]) / args["model_version"] / params["engine_dir"]
        meta = read_meta(folder)
        problem = mismatch(built_versions(meta), runtime_versions())
        if problem:
            raise RuntimeError(f"spec_decoder refuses to load: {problem}")
        self.decoupled = json.loads(params.get("decoupled", "true"))
        opened = open_engine(folder, max_batch_size=int(meta["max_batch_size"]), threads=int(params.get("ort_threads", 1)))
        self.tokenizer = Tokenizer.from_file(str(opened.tokenizer_path))
        d = opened.drafter
        self.limits = Limits(vocab=opened.engine.vocab_size, max_input_len=int(params["max_input_len"]),
                             max_seq_len=opened.engine.max_seq_len, stop_ids=tuple(opened.stop_ids),
                             sampling=bool(meta["target"].get("rejection")),
                             lookahead=(d["window"], d["ngram"], d["verification_set"]) if d["method"] == "lookahead" else None)  # fmt: skip
        schedule = DraftSchedule(json.loads(params.get("draft_schedule", "[]")))
        decoder = Decoder(opened.engine, opened.make_drafter(), schedule)
        self.scheduler = Scheduler(decoder, int(params.get("queue_delay_us", 0)) / 1e6, pb_utils.Logger.log_info).start()
        pb_utils.Logger.log_info(f"spec_decoder: {opened.label}, max_batch_size {opened.engine.max_batch_size}, "
                                 f"max_seq_len {opened.engine.max_seq_len}, draft schedule {schedule.entries or 'none'}")

    def _encode(self, text: str, special: bool) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=special).ids

    def execute(self, requests):
        for r in requests:
            fields = {}
            for name in _INPUTS:
                t = pb_utils.get_input_tensor_by_name(r, name)
                fields[name] = None if t is None else t.as_numpy()
            try:
                parsed = parse(fields, self.limits, self._encode, _parameters(r))
                if parsed.stream and not self.decoupled:
                    raise RequestError("stream: this repository is not decoupled (triton.decoupled: false); "
                                       "send stream=false or serve a decoupled build")  # fmt: skip
            except RequestError as exc:
                r.get_response_sender().send(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"spec_decoder: {exc}")),
                                             flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)  # fmt: skip
                continue
            self.scheduler.submit(Job(parsed.request, parsed.stream, _Sink(r, self.tokenizer, parsed.text)))
        return None

    def finalize(self) -> None:
        self.scheduler.stop()
