"""trtspec `preprocessing` for TensorRT-LLM's inflight_batcher_llm repository: text -> token ids.

A standalone Triton Python-backend model (NVIDIA's container has no trtspec): it imports only numpy,
triton_python_backend_utils and transformers (AutoTokenizer, no trust_remote_code). trtspec's own code;
its interface is upstream's (NVIDIA/TensorRT-LLM triton_backend/all_models/inflight_batcher_llm/
preprocessing/config.pbtxt and 1/model.py, commits in triton_repo/trtllm/upstream.py).

Every tensor carries the batch dimension B first (max_batch_size > 0):

    QUERY [B, 1] STRING                 -> INPUT_ID [B, L] INT32 (right-padded with the pad id),
                                           REQUEST_INPUT_LEN [B, 1]
    REQUEST_OUTPUT_LEN [B, 1] INT32     -> REQUEST_OUTPUT_LEN (unchanged)
    BAD_WORDS_DICT / STOP_WORDS_DICT [B, W] STRING (optional)
                                        -> BAD_WORDS_IDS / STOP_WORDS_IDS [B, 2, P] INT32: row 0 the words' ids
                                           concatenated (padded with 0), row 1 each word's end offset (padded
                                           with -1), P = max(1, longest row); [B, 2, 0] when absent
    END_ID / PAD_ID [B, 1] INT32 (optional) -> OUT_END_ID / OUT_PAD_ID [B, 1] (default: the tokenizer's eos /
                                           pad id, eos when it has no pad token)
    (always)                            -> DECODER_INPUT_ID [B, 1] = pad id, REQUEST_DECODER_INPUT_LEN [B, 1] = 1,
                                           EMBEDDING_BIAS [B, 0] FP32 (none)

Multimodal, encoder-decoder, p-tuning and embedding-bias inputs are refused with an error naming them.
Parameters: tokenizer_dir (relative paths are taken from the repository root, i.e. the parent of this
model's folder), add_special_tokens.
"""

import json
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils  # type: ignore[import-not-found]

REFUSED = (
    "DECODER_QUERY",
    "IMAGE_BYTES",
    "IMAGE_URL",
    "IMAGES",
    "VIDEO_BYTES",
    "EMBEDDING_BIAS_WORDS",
    "EMBEDDING_BIAS_WEIGHTS",
    "PROMPT_TABLE_EXTRA_ID",
)
TRUE, FALSE = ("true", "1", "yes", "t", "y"), ("false", "0", "no", "f", "n")


def parameter(config: dict, key: str) -> str:
    return config.get("parameters", {}).get(key, {}).get("string_value", "")


def flag(config: dict, key: str) -> bool:
    v = parameter(config, key).strip().lower()
    if v not in TRUE + FALSE:
        raise ValueError(f"parameter {key}: {v!r} is not a boolean ({', '.join(TRUE + FALSE)})")
    return v in TRUE


def tokenizer_path(args: dict, config: dict) -> Path:
    path = Path(parameter(config, "tokenizer_dir"))
    return path if path.is_absolute() else Path(args["model_repository"]).resolve().parent / path


def load_tokenizer(path: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def texts(array: np.ndarray) -> list[list[str]]:
    """[B, n] BYTES/str -> B lists of n strings."""
    rows = array.reshape(array.shape[0], -1)
    return [[v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in row] for row in rows]


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.tokenizer = load_tokenizer(tokenizer_path(args, config))
        self.add_special_tokens = flag(config, "add_special_tokens")
        self.end_id = self.tokenizer.eos_token_id
        if self.end_id is None:
            raise ValueError("preprocessing: the tokenizer has no eos token (needed as the default end id)")
        pad = self.tokenizer.pad_token_id
        self.pad_id = self.end_id if pad is None else pad

    def word_ids(self, words: np.ndarray | None, batch: int) -> np.ndarray:
        """[B, W] strings -> [B, 2, P] int32 (see the module docstring)."""
        if words is None:
            return np.zeros((batch, 2, 0), np.int32)
        flat, ends = [], []
        for row in texts(words):
            ids = [self.tokenizer.encode(w, add_special_tokens=False) for w in row]
            ids = [i for i in ids if i]
            flat.append([t for i in ids for t in i])
            ends.append(list(np.cumsum([len(i) for i in ids], dtype=np.int64)))
        width = max(1, max(len(f) for f in flat))
        out = np.zeros((len(flat), 2, width), np.int32)  # (B, 2, P)
        out[:, 1, :] = -1
        for b, (f, e) in enumerate(zip(flat, ends)):
            out[b, 0, : len(f)] = f
            out[b, 1, : len(e)] = e
        return out

    def ids_or_default(self, request, name: str, default: int, batch: int) -> np.ndarray:
        t = pb_utils.get_input_tensor_by_name(request, name)
        if t is None:
            return np.full((batch, 1), default, np.int32)
        return np.asarray(t.as_numpy(), np.int32).reshape(batch, 1)

    def one(self, request) -> list:
        for name in REFUSED:
            if pb_utils.get_input_tensor_by_name(request, name) is not None:
                raise ValueError(f"{name} is not supported by trtspec's preprocessing (text-only, decoder-only)")
        queries = [row[0] for row in texts(pb_utils.get_input_tensor_by_name(request, "QUERY").as_numpy())]
        batch = len(queries)
        ids = [self.tokenizer.encode(q, add_special_tokens=self.add_special_tokens) for q in queries]
        input_id = np.full((batch, max(len(i) for i in ids)), self.pad_id, np.int32)  # (B, L)
        for b, i in enumerate(ids):
            input_id[b, : len(i)] = i
        words = {n: pb_utils.get_input_tensor_by_name(request, n) for n in ("BAD_WORDS_DICT", "STOP_WORDS_DICT")}
        pad = self.ids_or_default(request, "PAD_ID", self.pad_id, batch)
        out = {
            "INPUT_ID": input_id,
            "REQUEST_INPUT_LEN": np.array([[len(i)] for i in ids], np.int32),
            "DECODER_INPUT_ID": pad.copy(),
            "REQUEST_DECODER_INPUT_LEN": np.ones((batch, 1), np.int32),
            "REQUEST_OUTPUT_LEN": np.asarray(
                pb_utils.get_input_tensor_by_name(request, "REQUEST_OUTPUT_LEN").as_numpy(), np.int32
            ),
            "BAD_WORDS_IDS": self.word_ids(
                None if words["BAD_WORDS_DICT"] is None else words["BAD_WORDS_DICT"].as_numpy(), batch
            ),
            "STOP_WORDS_IDS": self.word_ids(
                None if words["STOP_WORDS_DICT"] is None else words["STOP_WORDS_DICT"].as_numpy(), batch
            ),
            "EMBEDDING_BIAS": np.zeros((batch, 0), np.float32),
            "OUT_END_ID": self.ids_or_default(request, "END_ID", self.end_id, batch),
            "OUT_PAD_ID": pad,
        }
        return [pb_utils.Tensor(k, v) for k, v in out.items()]

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                responses.append(pb_utils.InferenceResponse(output_tensors=self.one(request)))
            except Exception as exc:  # one bad request answers with its error, the others proceed
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"preprocessing: {exc}")))
        return responses

    def finalize(self):
        pass
