"""trtspec `tensorrt_llm_bls`: preprocessing -> tensorrt_llm -> postprocessing as one Python model (BLS calls).

A standalone Triton Python-backend model (imports numpy and triton_python_backend_utils only); trtspec's
own code with upstream's interface (NVIDIA/TensorRT-LLM triton_backend/all_models/inflight_batcher_llm/
tensorrt_llm_bls/config.pbtxt; commits in triton_repo/trtllm/upstream.py). Per request:

  1. preprocessing(QUERY=text_input, REQUEST_OUTPUT_LEN=max_tokens, BAD/STOP_WORDS_DICT, END_ID, PAD_ID)
  2. tensorrt_llm(input_ids, input_lengths, request_output_len, bad/stop_words_list, end_id, pad_id,
     embedding_bias, streaming=stream, + the sampling/return inputs under tensorrt_llm's names), awaited as a
     stream when the repository is decoupled (one response per step when `stream` is true)
  3. postprocessing(TOKENS_BATCH=output_ids, SEQUENCE_LENGTH=sequence_length) -> text_output; the other
     tensorrt_llm outputs pass through under their names.

Stop words end generation inside tensorrt_llm (token space), not by text matching here. Parameters:
tensorrt_llm_model_name (default "tensorrt_llm"), accumulate_tokens (streaming: each response carries the
whole text so far instead of the step's delta). Draft-model and multimodal inputs are refused by name.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils  # type: ignore[import-not-found]

TO_PREPROCESSING = {
    "text_input": "QUERY",
    "max_tokens": "REQUEST_OUTPUT_LEN",
    "bad_words": "BAD_WORDS_DICT",
    "stop_words": "STOP_WORDS_DICT",
    "end_id": "END_ID",
    "pad_id": "PAD_ID",
}
FROM_PREPROCESSING = {
    "INPUT_ID": "input_ids",
    "REQUEST_INPUT_LEN": "input_lengths",
    "REQUEST_OUTPUT_LEN": "request_output_len",
    "BAD_WORDS_IDS": "bad_words_list",
    "STOP_WORDS_IDS": "stop_words_list",
    "OUT_END_ID": "end_id",
    "OUT_PAD_ID": "pad_id",
    "EMBEDDING_BIAS": "embedding_bias",
}
TO_LLM = {
    "top_k": "runtime_top_k",
    "top_p": "runtime_top_p",
    "temperature": "temperature",
    "length_penalty": "len_penalty",
    "repetition_penalty": "repetition_penalty",
    "min_tokens": "min_tokens",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "seed": "seed",
    "return_log_probs": "return_log_probs",
    "return_context_logits": "return_context_logits",
    "return_generation_logits": "return_generation_logits",
    "return_perf_metrics": "return_perf_metrics",
    "return_num_input_tokens": "return_num_input_tokens",
    "return_num_output_tokens": "return_num_output_tokens",
    "num_return_sequences": "num_return_sequences",
    "beam_width": "beam_width",
    "exclude_input_in_output": "exclude_input_in_output",
    "prompt_embedding_table": "prompt_embedding_table",
    "prompt_vocab_size": "prompt_vocab_size",
    "lora_task_id": "lora_task_id",
    "lora_weights": "lora_weights",
    "lora_config": "lora_config",
    "guided_decoding_guide_type": "guided_decoding_guide_type",
    "guided_decoding_guide": "guided_decoding_guide",
}
REFUSED = (
    "decoder_text_input",
    "image_input",
    "image_bytes_input",
    "image_url_input",
    "video_bytes_input",
    "embedding_bias_words",
    "embedding_bias_weights",
    "prompt_table_extra_id",
    "num_draft_tokens",
    "use_draft_logits",
)
PASS_THROUGH = (
    "cum_log_probs",
    "output_log_probs",
    "context_logits",
    "generation_logits",
    "batch_index",
    "sequence_index",
    "kv_cache_alloc_new_blocks",
    "kv_cache_reused_blocks",
    "kv_cache_alloc_total_blocks",
    "arrival_time_ns",
    "first_scheduled_time_ns",
    "first_token_time_ns",
    "last_token_time_ns",
    "acceptance_rate",
    "total_accepted_draft_tokens",
    "total_draft_tokens",
    "num_input_tokens",
    "num_output_tokens",
)
FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def parameter(config: dict, key: str) -> str:
    return config.get("parameters", {}).get(key, {}).get("string_value", "")


def batched(a: np.ndarray) -> np.ndarray:
    """A tensor the BLS config reshaped to [B] goes back to [B, 1] (tensorrt_llm declares dims [1])."""
    return a.reshape(-1, 1) if a.ndim == 1 else a


def outputs(response, names) -> dict[str, np.ndarray]:
    if response.has_error():
        raise RuntimeError(response.error().message())
    out = {}
    for name in names:
        t = pb_utils.get_output_tensor_by_name(response, name)
        if t is not None:
            out[name] = t.as_numpy()
    return out


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        self.llm = parameter(config, "tensorrt_llm_model_name") or "tensorrt_llm"
        for key in ("tensorrt_llm_draft_model_name", "multimodal_encoders_name"):
            if parameter(config, key):
                raise ValueError(
                    f"tensorrt_llm_bls: parameter {key} is not supported by trtspec's BLS (leave it empty)"
                )
        self.accumulate = parameter(config, "accumulate_tokens").strip().lower() in ("true", "1", "yes")

    def call(self, model: str, inputs: dict[str, np.ndarray], wanted, stream: bool = False):
        request = pb_utils.InferenceRequest(
            model_name=model,
            requested_output_names=list(wanted),
            inputs=[pb_utils.Tensor(k, v) for k, v in inputs.items()],
        )
        if stream:
            for response in request.exec(decoupled=True):
                out = outputs(response, wanted)
                if out:  # a final flag alone carries no tensors
                    yield out
        else:
            yield outputs(request.exec(), wanted)

    def generate(self, request):
        """Yields one dict of BLS output tensors per tensorrt_llm response."""
        given = {t.name(): t.as_numpy() for t in request.inputs()}
        for name in REFUSED:
            if name in given:
                raise ValueError(f"{name} is not supported by trtspec's tensorrt_llm_bls (text-only, no draft model)")
        stream = bool(given["stream"].reshape(-1)[0]) if "stream" in given else False
        if stream and not self.decoupled:
            raise ValueError("stream=true needs a decoupled repository (decoupled: true)")
        pre_in = {TO_PREPROCESSING[k]: batched(v) for k, v in given.items() if k in TO_PREPROCESSING}
        pre = next(self.call("preprocessing", pre_in, FROM_PREPROCESSING))
        llm_in = {FROM_PREPROCESSING[k]: v for k, v in pre.items()}
        llm_in.update({TO_LLM[k]: batched(v) for k, v in given.items() if k in TO_LLM})
        llm_in["streaming"] = np.full((llm_in["input_ids"].shape[0], 1), stream, bool)
        acc: list[list[int]] | None = None  # per (batch row, beam): the tokens so far (accumulate_tokens)
        for out in self.call(self.llm, llm_in, ("output_ids", "sequence_length") + PASS_THROUGH, self.decoupled):
            tokens, lengths = out["output_ids"], out["sequence_length"]  # (B, beams, T), (B, beams)
            if stream and self.accumulate:
                batch, beams = tokens.shape[:2]
                new = [tokens[b, k, : lengths[b, k]].tolist() for b in range(batch) for k in range(beams)]
                acc = new if acc is None else [a + n for a, n in zip(acc, new)]
                tokens, lengths = self.pad(acc, tokens.shape[:2])
            post = next(self.call("postprocessing", {"TOKENS_BATCH": tokens, "SEQUENCE_LENGTH": lengths}, ("OUTPUT",)))
            result = {k: v for k, v in out.items() if k in PASS_THROUGH}
            result["text_output"] = post["OUTPUT"]
            yield result

    @staticmethod
    def pad(rows: list[list[int]], shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        width = max(1, max(len(r) for r in rows))
        tokens = np.zeros((len(rows), width), np.int32)
        for i, r in enumerate(rows):
            tokens[i, : len(r)] = r
        lengths = np.array([len(r) for r in rows], np.int32)
        return tokens.reshape(*shape, width), lengths.reshape(shape)

    def execute(self, requests):
        if not self.decoupled:
            responses = []
            for request in requests:
                try:
                    (result,) = list(self.generate(request))
                    responses.append(pb_utils.InferenceResponse([pb_utils.Tensor(k, v) for k, v in result.items()]))
                except Exception as exc:  # this request's error; the others proceed
                    responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"tensorrt_llm_bls: {exc}")))
            return responses
        for request in requests:
            sender = request.get_response_sender()
            try:
                for result in self.generate(request):
                    sender.send(pb_utils.InferenceResponse([pb_utils.Tensor(k, v) for k, v in result.items()]))
                sender.send(flags=FINAL)
            except Exception as exc:
                sender.send(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(f"tensorrt_llm_bls: {exc}")), flags=FINAL
                )
        return None

    def finalize(self):
        pass
