"""The repository's tensors, defined once: name, Triton dtype, dims, optional, meaning.

Every model's config (`triton_repo.config`) and every model's code read these tables; nothing else
spells a tensor name. All models have max_batch_size 0 (the batch is formed inside spec_decoder, by
in-flight batching), so dims are the full shapes: clients send scalars as shape [1].

Clients call the front model (`triton.model_name`, a decoupled Python model that relays each request to
spec_decoder over a local socket, `triton_repo.relay`, and forwards its client's cancellation): text in, text out.

    text_input [1] STRING                 prompt (UTF-8)
    max_tokens [1] INT32                  tokens to generate, 1 .. max_seq_len - prompt tokens
    temperature [1] FP32 (optional)       0 = greedy (default); > 0 samples (rejection verification)
    top_p [1] FP32 (optional)             (0, 1], default 1
    seed [1] INT64 (optional)             sampling uniforms' seed, >= 0, default 0
    stream [1] BOOL (optional)            one response per decoding step (decoupled repositories)
    stop [-1] STRING (optional)           stop words, matched in token space (the word alone or after a space):
                                          generation ends after the first one (kept in the text)
    speculate [1] BOOL (optional)         false: plain decoding for this request (default true)
    lookahead_window / lookahead_ngram / lookahead_verification_set [1] INT32 (optional)
                                          this request's Lookahead W, N, G (Lookahead engines; each <= the engine's)
    (request parameter, not a tensor) ignore_eos: bool   generate max_tokens tokens past end-of-sequence ids
    (request parameter) timeout_s: number  this request's deadline in seconds, at most triton.request_timeout_s
                                          (`triton_repo.request`; the front model forwards parameters)

    text_output [1] STRING                the text of this response's new tokens (streamed: a delta)
    output_tokens [1] INT32               tokens generated so far
    steps [1] INT32                       target steps so far (after prefill)
    accepted_tokens [1] INT32             draft tokens the target accepted so far
    drafted_tokens [1] INT32              draft tokens proposed so far
    finish_reason [1] STRING              "" while streaming, then "length" | "stop" | "cancelled"
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str  # Triton DataType name without the TYPE_ prefix: STRING, INT32, INT64, FP32, BOOL
    dims: tuple[int, ...]
    optional: bool = False


def _t(name: str, dtype: str, dims: tuple[int, ...] = (1,), optional: bool = False) -> Tensor:
    return Tensor(name, dtype, dims, optional)


# -- what clients send and get (the front model) -------------------------------------------------------

REQUEST_CONTROLS = (  # passed from the front model to spec_decoder unchanged
    _t("max_tokens", "INT32"),
    _t("temperature", "FP32", optional=True),
    _t("top_p", "FP32", optional=True),
    _t("seed", "INT64", optional=True),
    _t("stream", "BOOL", optional=True),
    _t("speculate", "BOOL", optional=True),
    _t("lookahead_window", "INT32", optional=True),
    _t("lookahead_ngram", "INT32", optional=True),
    _t("lookahead_verification_set", "INT32", optional=True),
)
TEXT_INPUT = _t("text_input", "STRING")
STOP = _t("stop", "STRING", (-1,), optional=True)
CLIENT_INPUTS = (TEXT_INPUT, *REQUEST_CONTROLS, STOP)

STATS = (  # spec_decoder's counters, straight to the client
    _t("output_tokens", "INT32"),
    _t("steps", "INT32"),
    _t("accepted_tokens", "INT32"),
    _t("drafted_tokens", "INT32"),
    _t("finish_reason", "STRING"),
)
TEXT_OUTPUT = _t("text_output", "STRING")
CLIENT_OUTPUTS = (TEXT_OUTPUT, *STATS)

# -- between the models ---------------------------------------------------------------------------------

INPUT_IDS = _t("input_ids", "INT32", (-1,))
STOP_IDS = _t("stop_ids", "INT32", (-1,))  # stop words' token ids, words separated by -1
OUTPUT_IDS = _t("output_ids", "INT32", (-1,))  # a window of generated ids: prefix_len already shown, then new
PREFIX_LEN = _t("prefix_len", "INT32")
IS_FINAL = _t("is_final", "BOOL")

PREPROCESSING_INPUTS = (TEXT_INPUT, STOP)
PREPROCESSING_OUTPUTS = (INPUT_IDS, STOP_IDS)

# spec_decoder takes text (the front model, or clients calling it directly) or token ids (clients that
# tokenize themselves, e.g. with preprocessing).
SPEC_DECODER_INPUTS = (
    _t("input_ids", "INT32", (-1,), optional=True),
    _t("text_input", "STRING", optional=True),
    *REQUEST_CONTROLS,
    _t("stop_ids", "INT32", (-1,), optional=True),
    STOP,
)
SPEC_DECODER_OUTPUTS = (OUTPUT_IDS, PREFIX_LEN, IS_FINAL, *STATS, TEXT_OUTPUT)  # text_output: text requests only

POSTPROCESSING_INPUTS = (OUTPUT_IDS, PREFIX_LEN, IS_FINAL)
POSTPROCESSING_OUTPUTS = (TEXT_OUTPUT,)

PREPROCESSING, SPEC_DECODER, POSTPROCESSING = "preprocessing", "spec_decoder", "postprocessing"
RESERVED_NAMES = (PREPROCESSING, SPEC_DECODER, POSTPROCESSING)
