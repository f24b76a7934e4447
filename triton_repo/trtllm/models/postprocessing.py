"""trtspec `postprocessing` for TensorRT-LLM's inflight_batcher_llm repository: token ids -> text.

A standalone Triton Python-backend model (imports numpy, triton_python_backend_utils, transformers only);
trtspec's own code with upstream's interface (NVIDIA/TensorRT-LLM triton_backend/all_models/
inflight_batcher_llm/postprocessing/config.pbtxt and 1/model.py, commits in triton_repo/trtllm/upstream.py):

    TOKENS_BATCH [B, beams, T] INT32, SEQUENCE_LENGTH [B, beams] INT32 -> OUTPUT [B, beams] STRING
    OUTPUT[b, k] = decode(TOKENS_BATCH[b, k, :SEQUENCE_LENGTH[b, k]], skip_special_tokens)

In streaming, tensorrt_llm sends each step's new tokens only, so OUTPUT is that step's text delta.
Parameters: tokenizer_dir (relative: from the repository root), skip_special_tokens.
"""

import json
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils  # type: ignore[import-not-found]

TRUE, FALSE = ("true", "1", "yes", "t", "y"), ("false", "0", "no", "f", "n")


def parameter(config: dict, key: str) -> str:
    return config.get("parameters", {}).get(key, {}).get("string_value", "")


def flag(config: dict, key: str) -> bool:
    v = parameter(config, key).strip().lower()
    if v not in TRUE + FALSE:
        raise ValueError(f"parameter {key}: {v!r} is not a boolean ({', '.join(TRUE + FALSE)})")
    return v in TRUE


class TritonPythonModel:
    def initialize(self, args):
        from transformers import AutoTokenizer

        config = json.loads(args["model_config"])
        path = Path(parameter(config, "tokenizer_dir"))
        if not path.is_absolute():
            path = Path(args["model_repository"]).resolve().parent / path
        self.tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        self.skip_special_tokens = flag(config, "skip_special_tokens")

    def one(self, request) -> np.ndarray:
        tokens = np.asarray(pb_utils.get_input_tensor_by_name(request, "TOKENS_BATCH").as_numpy())
        lengths = np.asarray(pb_utils.get_input_tensor_by_name(request, "SEQUENCE_LENGTH").as_numpy())
        if tokens.ndim != 3 or lengths.shape != tokens.shape[:2]:
            raise ValueError(
                f"TOKENS_BATCH {list(tokens.shape)} / SEQUENCE_LENGTH {list(lengths.shape)}: "
                "expected [B, beams, T] and [B, beams]"
            )
        if (lengths < 0).any() or (lengths > tokens.shape[2]).any():
            raise ValueError(f"SEQUENCE_LENGTH {lengths.tolist()} outside [0, {tokens.shape[2]}]")
        rows = [tokens[b, k, : lengths[b, k]].tolist() for b in range(tokens.shape[0]) for k in range(tokens.shape[1])]
        text = self.tokenizer.batch_decode(rows, skip_special_tokens=self.skip_special_tokens)
        return np.array([t.encode("utf-8") for t in text], dtype=object).reshape(tokens.shape[:2])  # (B, beams)

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                out = pb_utils.Tensor("OUTPUT", self.one(request))
                responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
            except Exception as exc:  # this request's error; the others proceed
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"postprocessing: {exc}")))
        return responses

    def finalize(self):
        pass
