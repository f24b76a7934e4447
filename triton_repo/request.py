"""A client's tensors → a checked decoding `Request`, or a `RequestError` that names the field and the allowed range.

Pure NumPy + `encode(text, add_special_tokens)`: spec_decoder's Triton glue passes `{name: array | None}`; tests pass the same.
Triton itself already refuses unknown inputs, missing required ones and wrong dtypes or ranks.

Request parameters (Triton's per-request `parameters`, not tensors: gRPC/HTTP clients set them, perf_analyzer
with `--request-parameter NAME:VALUE:TYPE`, and the ensemble forwards them to spec_decoder):

    ignore_eos (bool, default false)      generate max_tokens tokens, past end-of-sequence ids (benchmarks:
                                          every request then emits exactly max_tokens; stop words still apply)
    timeout_s (number, default the repository's triton.request_timeout_s)
                                          this request's deadline in seconds after arrival, in (0, the default]:
                                          past it the request ends with a deadline error and frees its slot
                                          (a number, or a string holding one: some clients send parameters as strings)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from builder.speculative.decoding import Request
from builder.speculative.protocols import Sampling
from plugins.tree_verify.contract import TEMPERATURE_EPS

MAX_TEMPERATURE = 100.0  # as `trtspec generate --temperature`
MAX_STOP_WORDS = 16
MAX_STOP_BYTES = 256  # per stop word
MAX_SEED = 2**63 - 1
TIMEOUT_PARAMETER = "timeout_s"


class RequestError(ValueError):
    """A bad request: sent back to the client as an error response; the server carries on."""


@dataclass(frozen=True)
class Limits:
    """What one engine accepts."""

    vocab: int
    max_input_len: int
    max_seq_len: int
    stop_ids: tuple[int, ...]  # end-of-sequence ids: always stop
    sampling: bool  # the engine has the rejection graph (temperature > 0)
    lookahead: tuple[int, int, int] | None  # the engine's Lookahead W, N, G (None: another method)
    request_timeout_s: float = 600.0  # the default deadline (triton.request_timeout_s); requests may shorten it


@dataclass(frozen=True)
class Parsed:
    request: Request
    stream: bool
    text: bool  # the prompt came as text_input (answer with text_output too)
    timeout_s: float = 600.0  # deadline after arrival


Fields = Mapping[str, "np.ndarray | None"]


def _scalar(fields: Fields, name: str, kind: type, default: Any = None) -> Any:
    a = fields.get(name)
    if a is None:
        if default is None:
            raise RequestError(f"{name}: required input missing")
        return default
    a = np.asarray(a)
    if a.size != 1:
        raise RequestError(f"{name}: expected one value, got shape {list(a.shape)}")
    v = a.reshape(-1)[0]
    if kind is bool:
        if a.dtype != np.bool_:
            raise RequestError(f"{name}: expected BOOL, got {a.dtype}")
        return bool(v)
    if kind is int:
        if not np.issubdtype(a.dtype, np.integer):
            raise RequestError(f"{name}: expected an integer, got {a.dtype}")
        return int(v)
    if not np.issubdtype(a.dtype, np.floating):
        raise RequestError(f"{name}: expected a float, got {a.dtype}")
    return float(v)


def request_text(a: np.ndarray, name: str) -> str:
    raw = a.reshape(-1)[0]
    if isinstance(raw, str):
        return raw
    try:
        return bytes(raw).decode("utf-8")
    except (UnicodeDecodeError, TypeError):
        raise RequestError(f"{name}: not UTF-8 text") from None


def _prompt(fields: Fields, limits: Limits, encode: Callable[[str, bool], list[int]]) -> tuple[list[int], bool]:
    ids, text = fields.get("input_ids"), fields.get("text_input")
    if (ids is None) == (text is None):
        raise RequestError("give exactly one of input_ids or text_input")
    if text is not None:
        if np.asarray(text).size != 1:
            raise RequestError(f"text_input: expected one string, got shape {list(np.asarray(text).shape)}")
        s = request_text(np.asarray(text), "text_input")
        if not s:
            raise RequestError("text_input: empty prompt")
        prompt = encode(s, True)
    else:
        arr = np.asarray(ids).reshape(-1)
        if not np.issubdtype(arr.dtype, np.integer):
            raise RequestError(f"input_ids: expected integers, got {arr.dtype}")
        prompt = [int(i) for i in arr]
        bad = [i for i in prompt if not 0 <= i < limits.vocab]
        if bad:
            raise RequestError(f"input_ids: {bad[:5]} outside the vocabulary 0..{limits.vocab - 1}")
    if not prompt:
        raise RequestError("empty prompt")
    if len(prompt) > limits.max_input_len:
        raise RequestError(
            f"prompt has {len(prompt)} tokens; this engine takes at most {limits.max_input_len} (build.max_input_len)"
        )
    return prompt, text is not None


def stop_variants(word: str) -> list[str]:
    """The texts a stop word is matched as, in token space: the word alone, and after a space (byte-level BPE
    folds a leading space into the token: " None" is not "None" + anything)."""
    return [word] if word[:1].isspace() else [word, " " + word]


def _stops(fields: Fields, limits: Limits, encode: Callable[[str, bool], list[int]]) -> tuple[tuple[int, ...], ...]:
    words: list[list[int]] = []
    if fields.get("stop") is not None:
        raw = np.asarray(fields["stop"]).reshape(-1)
        if len(raw) > MAX_STOP_WORDS:  # (each word becomes up to two token sequences)
            raise RequestError(f"stop: {len(raw)} words; at most {MAX_STOP_WORDS}")
        for w in raw:
            s = request_text(np.asarray([w], dtype=object), "stop")
            if not s or len(s.encode()) > MAX_STOP_BYTES:
                raise RequestError(f"stop: every word must be 1..{MAX_STOP_BYTES} bytes")
            words += [encode(v, False) for v in stop_variants(s)]
    if fields.get("stop_ids") is not None:
        arr = np.asarray(fields["stop_ids"]).reshape(-1)
        cur: list[int] = []
        for i in [*arr.tolist(), -1]:
            if i == -1:
                if cur:
                    words.append(cur)
                cur = []
            elif not 0 <= i < limits.vocab:
                raise RequestError(f"stop_ids: {i} outside the vocabulary")
            else:
                cur.append(int(i))
        if len(words) > 2 * MAX_STOP_WORDS:
            raise RequestError(f"stop: {len(words)} words; at most {MAX_STOP_WORDS}")
    return tuple(tuple(w) for w in words if w)


def _lookahead(fields: Fields, limits: Limits) -> tuple[int, int, int] | None:
    names = ("lookahead_window", "lookahead_ngram", "lookahead_verification_set")
    given = {n: _scalar(fields, n, int) for n in names if fields.get(n) is not None}
    if not given:
        return None
    if limits.lookahead is None:
        raise RequestError(f"{', '.join(given)}: this engine does not draft with Lookahead")
    engine = dict(zip(names, limits.lookahead))
    lows = {"lookahead_window": 1, "lookahead_ngram": 2, "lookahead_verification_set": 0}
    for n, v in given.items():
        if not lows[n] <= v <= engine[n]:
            raise RequestError(f"{n}: {v} outside {lows[n]}..{engine[n]} (the engine's)")
    w, n, g = (given.get(k, engine[k]) for k in names)
    return int(w), int(n), int(g)


def _param_flag(params: Mapping[str, Any], name: str) -> bool:
    v = params.get(name, False)
    if not isinstance(v, bool):
        raise RequestError(f"{name}: expected a bool request parameter, got {type(v).__name__} {v!r}")
    return v


def _timeout(params: Mapping[str, Any], limit: float) -> float:
    v = params.get(TIMEOUT_PARAMETER)
    if v is None:
        return limit
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise RequestError(f"{TIMEOUT_PARAMETER}: expected a number of seconds, got {type(v).__name__} {v!r}")
    try:
        f = float(v)
    except ValueError:
        raise RequestError(f"{TIMEOUT_PARAMETER}: {v!r} is not a number") from None
    if not (math.isfinite(f) and 0.0 < f <= limit):
        raise RequestError(
            f"{TIMEOUT_PARAMETER}: {v} outside (0, {limit:g}] seconds (the repository's triton.request_timeout_s)"
        )
    return f


def parse(
    fields: Fields, limits: Limits, encode: Callable[[str, bool], list[int]], params: Mapping[str, Any] | None = None
) -> Parsed:
    """Check every field (and request parameter) of one request; RequestError on the first problem."""
    prompt, text = _prompt(fields, limits, encode)
    room = limits.max_seq_len - len(prompt)
    max_tokens = _scalar(fields, "max_tokens", int)
    if not 1 <= max_tokens <= room:
        raise RequestError(
            f"max_tokens: {max_tokens} outside 1..{room} (max_seq_len {limits.max_seq_len} minus "
            f"{len(prompt)} prompt tokens)"
        )
    temperature = _scalar(fields, "temperature", float, 0.0)
    if not (math.isfinite(temperature) and 0.0 <= temperature <= MAX_TEMPERATURE):
        raise RequestError(f"temperature: {temperature} outside 0..{MAX_TEMPERATURE}")
    if temperature > TEMPERATURE_EPS and not limits.sampling:
        raise RequestError("temperature > 0: this engine was built without the rejection-sampling graph")
    top_p = _scalar(fields, "top_p", float, 1.0)
    if not (math.isfinite(top_p) and 0.0 < top_p <= 1.0):
        raise RequestError(f"top_p: {top_p} outside (0, 1]")
    seed = _scalar(fields, "seed", int, 0)
    if not 0 <= seed <= MAX_SEED:
        raise RequestError(f"seed: {seed} outside 0..{MAX_SEED}")
    stream = _scalar(fields, "stream", bool, False)
    speculate = _scalar(fields, "speculate", bool, True)
    lookahead = _lookahead(fields, limits)
    params = params or {}
    stop_ids = () if _param_flag(params, "ignore_eos") else limits.stop_ids
    timeout_s = _timeout(params, limits.request_timeout_s)
    req = Request(
        tuple(prompt),
        max_tokens,
        Sampling(temperature, top_p, seed),
        stop_ids,
        speculate,
        _stops(fields, limits, encode),
        lookahead if speculate else None,
    )
    return Parsed(req, stream, text, timeout_s)
