"""postprocessing: a window of generated ids → the text its new ids add (`triton_repo.detok`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils  # type: ignore[import-not-found]

from triton_repo.detok import text_delta


class Model:
    def __init__(self, args: dict, params: dict[str, str]) -> None:
        from tokenizers import Tokenizer

        folder = Path(args["model_repository"]) / args["model_version"]
        self.tokenizer = Tokenizer.from_file(str(folder / params["tokenizer"]))

    def execute(self, requests):
        out = []
        for r in requests:
            ids = pb_utils.get_input_tensor_by_name(r, "output_ids").as_numpy().reshape(-1)
            prefix = int(pb_utils.get_input_tensor_by_name(r, "prefix_len").as_numpy().reshape(-1)[0])
            final = bool(pb_utils.get_input_tensor_by_name(r, "is_final").as_numpy().reshape(-1)[0])
            text = text_delta(self.tokenizer, ids.tolist(), prefix, final)
            out.append(
                pb_utils.InferenceResponse([pb_utils.Tensor("text_output", np.array([text.encode()], dtype=object))])
            )
        return out

    def finalize(self) -> None:
        pass
