"""modelopt FP8 PTQ of an HF LlamaForCausalLM on the CPU, and modelopt's unified checkpoint export.

`quant_config` builds modelopt's config from the recipe: `mtq.FP8_DEFAULT_CFG` (per-tensor E4M3
weights and activations on every Linear, "max" calibration) for `mode: fp8`, `mtq.FP8_KV_CFG` appended
(`k_bmm_quantizer` / `v_bmm_quantizer`: the post-RoPE keys and the values as attention reads them) for
`kv_cache: fp8`, and one `*pattern*` → disabled entry per recipe `exclude_modules` pattern. modelopt's own
default keeps `*lm_head*` unquantized; that entry is dropped when the recipe does not list `lm_head`, so
the recipe decides. Embeddings are never quantized (modelopt quantizes Linear layers only).

`calibrate` runs the forward loop (batches of calibration sequences, fp32, no grad) under
`mtq.quantize`; `export` writes modelopt's unified HF checkpoint with `export_hf_checkpoint` — it needs
no GPU, so the files are modelopt's own, not a re-creation.
"""

from __future__ import annotations

import contextlib
import copy
import io
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

import torch



def quant_config(mode: str, kv_cache: str, exclude: Sequence[str]) -> dict[str, Any]:
    """modelopt's quantization config for the recipe (see the module docstring)."""
    import modelopt.torch.quantization as mtq

    if mode == "fp8":
        cfg = copy.deepcopy(mtq.FP8_DEFAULT_CFG)
        if "lm_head" not in exclude:
            cfg["quant_cfg"] = [e for e in cfg["quant_cfg"] if e.get("quantizer_name") != "*lm_head*"]
    else:  # KV cache only
        cfg = {"quant_cfg": [{"quantizer_name": "*", "enable": False}], "algorithm": "max"}
    if kv_cache == "fp8":
        with contextlib.redirect_stdout(io.StringIO()):  # it prints the merged config
            cfg = mtq.update_quant_cfg_with_kv_cache_quant(cfg, mtq.FP8_KV_CFG["quant_cfg"])
    cfg["quant_cfg"] = list(cfg["quant_cfg"]) + [{"quantizer_name": f"*{p}*", "enable": False} for p in exclude]
    return cfg


def load_hf(base_dir: Path) -> torch.nn.Module:
    """The checkpoint as an HF LlamaForCausalLM in fp32, eval mode, on the CPU."""
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32).eval()


def calibrate(
    model: torch.nn.Module,
    cfg: dict[str, Any],
    samples: list[list[int]],  # [num_samples][seq_len] token ids
    batch_size: int = 4,
    progress: Callable[[int, int], None] = lambda _done, _total: None,
) -> torch.nn.Module:
    """modelopt PTQ in place: insert the quantizers, run the calibration batches, compute the amaxes."""
    import modelopt.torch.quantization as mtq
    from tqdm import tqdm

    ids = torch.tensor(samples, dtype=torch.int64)  # (N, S)
    batches = list(torch.split(ids, batch_size))

    def loop(m: torch.nn.Module) -> None:
        with torch.no_grad():
            for i, batch in enumerate(tqdm(batches, desc="calibration", leave=False, disable=None)):
                m(input_ids=batch, use_cache=False)
                progress(i + 1, len(batches))

    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mtq.quantize(model, cfg, forward_loop=loop)
    return model


def export(model: torch.nn.Module, out_dir: Path) -> None:
    """modelopt's unified HF checkpoint (safetensors, config.json, hf_quant_config.json) into `out_dir`."""
    from modelopt.torch.export import export_hf_checkpoint

    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        export_hf_checkpoint(model, dtype=torch.float32, export_dir=out_dir)


def summary(model: torch.nn.Module) -> dict[str, Any]:
    """Counts of enabled quantizers by kind (weight, input, k/v cache) — manifest facts."""
    from modelopt.torch.quantization.nn import TensorQuantizer

    counts = {"weight": 0, "input": 0, "kv": 0}
    for name, mod in model.named_modules():
        if isinstance(mod, TensorQuantizer) and mod.is_enabled:
            kind = name.rsplit(".", 1)[-1]
            key = "weight" if kind == "weight_quantizer" else "input" if kind == "input_quantizer" else "kv"
            counts[key] += 1
    return counts
