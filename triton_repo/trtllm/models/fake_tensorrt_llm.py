"""FAKE tensorrt_llm (no GPU, no TensorRT-LLM): a CPU stand-in used by tests only, never rendered.

The real `tensorrt_llm` model is TensorRT-LLM's C++ backend on a GPU, physically absent on the CPU
machines. Tests copy a rendered repository, switch `tensorrt_llm/config.pbtxt` to `backend: "python"`,
point `gpt_model_path` at a Hugging Face Llama checkpoint and drop this file in as its `1/model.py`, so
the real preprocessing, postprocessing, ensemble and BLS run end to end around it.

It serves a subset of upstream's tensorrt_llm interface (batch dimension B first):

    input_ids [B, L], input_lengths [B], request_output_len [B], end_id [B] (optional),
    streaming [B] (optional), exclude_input_in_output [B] (optional; else the parameter)
    -> output_ids [B, 1, T] INT32, sequence_length [B, 1] INT32

Greedy decoding only, with its own loop over the model's KV cache (transformers forward calls, not
`generate`): it stops after `request_output_len` tokens or before emitting `end_id`. Streaming (decoupled
model only): one response per token holding that token alone; the last one carries the final flag.
Non-streaming: one response with the prompt + new tokens, or the new tokens alone when
exclude_input_in_output. pad_id, decoder_input_ids / decoder_input_lengths are ignored (decoder-only,
unpadded); embedding_bias, bad_words_list, stop_words_list must be empty; any other input is refused.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils  # type: ignore[import-not-found]

USED = ("input_ids", "input_lengths", "request_output_len", "end_id", "streaming", "exclude_input_in_output")
IGNORED = ("pad_id", "decoder_input_ids", "decoder_input_lengths")
MUST_BE_EMPTY = ("embedding_bias", "bad_words_list", "stop_words_list")
FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def parameter(config: dict, key: str) -> str:
    return config.get("parameters", {}).get(key, {}).get("string_value", "")


class TritonPythonModel:
    def initialize(self, args):
        import torch
        from transformers import AutoModelForCausalLM

        config = json.loads(args["model_config"])
        torch.set_num_threads(1)
        self.torch = torch
        self.model = AutoModelForCausalLM.from_pretrained(
            parameter(config, "gpt_model_path"), dtype=torch.float32, local_files_only=True
        ).eval()
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        self.exclude_default = parameter(config, "exclude_input_in_output").strip().lower() == "true"

    def greedy(self, prompt: list[int], n: int, end_id: int | None):
        """Yields up to n token ids, argmax of each step's last logits; stops before end_id."""
        torch = self.torch
        with torch.inference_mode():
            ids = torch.tensor([prompt])  # (1, L)
            mask = torch.ones_like(ids)
            out = self.model(input_ids=ids, attention_mask=mask, use_cache=True)
            for _ in range(n):
                token = int(out.logits[0, -1].argmax())
                if token == end_id:
                    return
                yield token
                mask = torch.cat([mask, torch.ones((1, 1), dtype=mask.dtype)], dim=1)
                out = self.model(
                    input_ids=torch.tensor([[token]]),
                    attention_mask=mask,
                    past_key_values=out.past_key_values,
                    use_cache=True,
                )

    def parse(self, request) -> dict:
        given = {t.name(): np.asarray(t.as_numpy()) for t in request.inputs()}
        for name, value in given.items():
            if name in MUST_BE_EMPTY and value.size:
                raise ValueError(f"{name} is not implemented by the fake (CPU stand-in, no GPU)")
            if name not in USED + IGNORED + MUST_BE_EMPTY:
                raise ValueError(f"input {name} is not implemented by the fake (CPU stand-in, no GPU)")
        batch = given["input_ids"].shape[0]

        def one(name: str, default) -> np.ndarray:  # [B] (the config reshapes [B, 1] inputs to [B])
            return given[name].reshape(batch) if name in given else np.full(batch, default)

        return {
            "ids": given["input_ids"],
            "lengths": one("input_lengths", -1),
            "n": one("request_output_len", 0),
            "end": one("end_id", -1),
            "stream": one("streaming", False),
            "exclude": one("exclude_input_in_output", self.exclude_default),
        }

    @staticmethod
    def tensors(rows: list[list[int]]) -> list:
        width = max(1, max(len(r) for r in rows))
        ids = np.zeros((len(rows), 1, width), np.int32)  # (B, beams=1, T)
        for b, r in enumerate(rows):
            ids[b, 0, : len(r)] = r
        lengths = np.array([[len(r)] for r in rows], np.int32)  # (B, 1)
        return [pb_utils.Tensor("output_ids", ids), pb_utils.Tensor("sequence_length", lengths)]

    def run(self, request, send) -> None:
        """send(tensors, final) once per response."""
        r = self.parse(request)
        prompts = [r["ids"][b, : int(r["lengths"][b])].tolist() for b in range(len(r["ids"]))]
        if bool(r["stream"].any()):
            if not self.decoupled or len(prompts) != 1:
                raise ValueError("streaming needs a decoupled model and one sequence per request")
            tokens = list(self.greedy(prompts[0], int(r["n"][0]), int(r["end"][0])))
            for i, t in enumerate(tokens):
                send(self.tensors([[t]]), i == len(tokens) - 1)
            if not tokens:
                send(self.tensors([[]]), True)
            return
        rows = []
        for b, prompt in enumerate(prompts):
            new = list(self.greedy(prompt, int(r["n"][b]), int(r["end"][b])))
            rows.append(new if bool(r["exclude"][b]) else prompt + new)
        send(self.tensors(rows), True)

    def execute(self, requests):
        responses = []
        for request in requests:
            sender = request.get_response_sender() if self.decoupled else None

            def send(tensors, final, sender=sender):
                if sender is None:
                    responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
                else:
                    sender.send(pb_utils.InferenceResponse(output_tensors=tensors), flags=FINAL if final else 0)

            try:
                self.run(request, send)
            except Exception as exc:
                error = pb_utils.InferenceResponse(error=pb_utils.TritonError(f"fake_tensorrt_llm: {exc}"))
                if sender is None:
                    responses.append(error)
                else:
                    sender.send(error, flags=FINAL)
        return None if self.decoupled else responses

    def finalize(self):
        pass
