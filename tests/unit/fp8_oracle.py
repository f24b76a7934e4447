"""Independent FP8 facts for the quantize / checkpoint tests: E4M3 rounding by ml_dtypes (not the code under test),
and a modelopt FP8 checkpoint of the tiny fixture as a user gets one published (plain modelopt, no trtspec step).

`one_rounding(w, s)`: the E4M3FN codes of float32(w / s), rounded to nearest even by ml_dtypes'
`float8_e4m3fn` cast — the one rounding of an original weight w with the scale s (what `(w / s).to(float8)`
computes in modelopt's export and TensorRT-LLM's converters: a float32 quotient, then the E4M3 rounding).
`half_ulp(x)`: half the E4M3 spacing at |x| (2^(e-3) for normal x in [2^e, 2^(e+1)), 2^-10 below 2^-6), the
bound of one rounding in the scaled domain.

`published_fp8(kv)`: modelopt PTQ (`mtq.quantize` with the recipe's config, 8 × 64 calibration tokens) of the
fixture and `export_hf_checkpoint` — nothing of trtspec's own after calibration, so q/k/v and gate/up keep their
own weight scales, as in NVIDIA's published FP8 checkpoints — plus the tokenizer files; once per session.
"""

from __future__ import annotations

import contextlib
import functools
import io
import shutil
from pathlib import Path

import numpy as np

from tests.unit.scratch import scratch_dir

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "tests" / "fixtures" / "tiny-llama3" / "base"
EXCLUDE = ["lm_head", "embed_tokens", "medusa_heads", "eagle_draft"]


def one_rounding(w: np.ndarray, s: float) -> np.ndarray:  # [..] float32 -> [..] uint8 E4M3FN codes
    import ml_dtypes

    q = (np.asarray(w, np.float32) / np.float32(s)).astype(np.float32)
    return q.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def codes_to_float(codes: np.ndarray) -> np.ndarray:  # uint8 E4M3FN codes -> float64 values
    import ml_dtypes

    return np.asarray(codes, np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)


def half_ulp(x: np.ndarray) -> np.ndarray:  # [..] float64 (scaled domain) -> half the E4M3 spacing at |x|
    e = np.floor(np.log2(np.maximum(np.abs(x), 2.0**-6)))
    return 2.0 ** (e - 4)


@functools.lru_cache(maxsize=None)
def published_fp8(kv: str = "fp8") -> Path:
    """The fixture as a modelopt FP8 unified HF checkpoint, made by modelopt alone (module docstring)."""
    import modelopt.torch.quantization as mtq
    import torch

    from builder.quantize import ptq
    from builder.quantize.calibration import calibration_ids
    from builder.stages.decoders import load_tokenizer

    samples = calibration_ids(load_tokenizer(BASE), "builtin:stdlib", REPO, num_samples=8, seq_len=64)
    model = ptq.load_hf(BASE)
    ids = torch.tensor(samples)

    def loop(m):
        with torch.no_grad():
            for batch in torch.split(ids, 4):
                m(input_ids=batch, use_cache=False)

    with contextlib.redirect_stdout(io.StringIO()):
        mtq.quantize(model, ptq.quant_config("fp8", kv, EXCLUDE), forward_loop=loop)
    out = scratch_dir(f"trtspec-published-fp8-{kv}-")
    ptq.export(model, out)  # modelopt's export_hf_checkpoint
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(BASE / name, out / name)
    return out
