"""preprocessing: text_input → input_ids (the engine's tokenizer, as `trtspec generate --prompt` encodes),
stop words → stop_ids (each word's ids alone and after a space, sequences separated by -1)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils  # type: ignore[import-not-found]

from triton_repo.request import RequestError, request_text, stop_variants


class Model:
    def __init__(self, args: dict, params: dict[str, str]) -> None:
        from tokenizers import Tokenizer

        folder = Path(args["model_repository"]) / args["model_version"]
        self.tokenizer = Tokenizer.from_file(str(folder / params["tokenizer"]))

    def _one(self, request) -> list:
        text_t = pb_utils.get_input_tensor_by_name(request, "text_input")
        text = np.asarray(text_t.as_numpy())
        if text.size != 1:
            raise RequestError(f"text_input: expected one string, got shape {list(text.shape)}")
        prompt = request_text(text, "text_input")
        if not prompt:
            raise RequestError("text_input: empty prompt")
        ids = np.array(self.tokenizer.encode(prompt).ids, dtype=np.int32)
        stop: list[int] = []
        stop_t = pb_utils.get_input_tensor_by_name(request, "stop")
        if stop_t is not None:
            for word in np.asarray(stop_t.as_numpy()).reshape(-1):
                s = request_text(np.asarray([word], dtype=object), "stop")
                if not s:
                    raise RequestError("stop: empty stop word")
                for v in stop_variants(s):
                    stop += [*self.tokenizer.encode(v, add_special_tokens=False).ids, -1]
        return [pb_utils.Tensor("input_ids", ids), pb_utils.Tensor("stop_ids", np.array(stop, dtype=np.int32))]

    def execute(self, requests):
        out = []
        for r in requests:
            try:
                out.append(pb_utils.InferenceResponse(output_tensors=self._one(r)))
            except RequestError as exc:
                out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"preprocessing: {exc}")))
        return out

    def finalize(self) -> None:
        pass
