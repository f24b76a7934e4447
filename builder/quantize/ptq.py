"""modelopt FP8 PTQ of an HF LlamaForCausalLM (CPU in float32, or CUDA in the model's dtype), and modelopt's
unified checkpoint export — each weight quantized once, with the scale every backend uses.

Supported nvidia-modelopt: `MODELOPT_RANGE` (>=0.37,<0.48): 0.37 is the line TensorRT-LLM 1.2.x's
requirements pin (~0.37; the containers users deploy in), 0.47 this machine's. The two spell their preset
configs differently:
* dict form (<= 0.39; `modelopt/torch/quantization/config.py` @ 0.37.0): `quant_cfg` maps a wildcard to the
  quantizer attributes, `"default"` applies to every quantizer first, the other keys in order;
* list form (0.47; `configs/ptq/presets/model/fp8.yaml`, loaded into `config.py` `FP8_DEFAULT_CFG`): `quant_cfg`
  is a list of `{"quantizer_name": wildcard, "cfg": {...} | "enable": bool}` applied in order, the first entry
  `{"quantizer_name": "*", "enable": False}`.
`quant_config` reads the installed release's `FP8_DEFAULT_CFG` to know which form it speaks (or takes the
defaults as data, which is how the tests check the dict form of 0.37 here) and writes the recipe's config in
that form: `FP8_DEFAULT_CFG` (per-tensor E4M3 weights and activations on every Linear, "max" calibration) for
`mode: fp8`, `FP8_KV_CFG`'s entries appended (`*[kv]_bmm_quantizer`: the post-RoPE keys and the values as
attention reads them) for `kv_cache: fp8`, and one `*pattern*` → disabled entry per recipe `exclude_modules`
pattern, last, so they win. modelopt's own default keeps `*lm_head*` unquantized; that entry is dropped when the
recipe does not list `lm_head`, so the recipe decides. Embeddings are never quantized (Linear layers only).

Quantized once: TensorRT-LLM runs q/k/v as one fused GEMM (`attention.qkv`, one `weights_scaling_factor`) and,
after `trtllm-build`'s `fuse_gate_mlp` (`tensorrt_llm/models/modeling_utils.py` @ b35ac1b, 1.2.0rc2), gate and
fc as one (`fused_fc`: weight requantized to max(gate, fc) scale). modelopt's unified export (0.37 and 0.47
`unified_export_hf.py` `_fuse_shared_input_modules`) skips FP8 groups when it unifies fused linears, so each
of q, k, v, gate, up would keep its own weight amax and every fused backend would round a second time.
`unify_fused_amax` therefore sets one weight amax (the max) on q/k/v and one on gate/up, and the input amax
likewise (as modelopt's `preprocess_linear_fusion` does for the formats it fuses), after calibration and before
the export; `export_hf_checkpoint` then quantizes each original weight exactly once: `(w / s).to(float8)`
with s = float32(amax / 448), computed in float32 (`dtype=torch.float32`: a bfloat16 model's weights are
widened exactly, so the quotient is not rounded to bfloat16 before the E4M3 rounding).

`load_hf` loads the checkpoint with `use_safetensors=True` unless `model.allow_pickle` (then transformers'
own `torch.load(weights_only=True)` path may read `pytorch_model.bin`); never `trust_remote_code`. On CUDA
hosts it spreads the model with `device_map="auto"` and the per-GPU `max_memory` of `placement.place`.
"""

from __future__ import annotations

import contextlib
import copy
import io
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:
    import torch

    from builder.quantize.placement import HostFacts, Placement

MODELOPT_RANGE = ">=0.37,<0.48"  # tested: 0.47.0 (this machine), 0.37.0 config form (TensorRT-LLM 1.2.x containers)
FUSED_GROUPS = (("self_attn", ("q_proj", "k_proj", "v_proj")), ("mlp", ("gate_proj", "up_proj")))


def modelopt_version() -> str:
    """The installed nvidia-modelopt version ("absent" without it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nvidia-modelopt")
    except PackageNotFoundError:
        return "absent"


def in_supported_range(v: str) -> bool:
    """Whether modelopt version `v` is inside `MODELOPT_RANGE`."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        return Version(v) in SpecifierSet(MODELOPT_RANGE)
    except InvalidVersion:
        return False


def config_form(default_cfg: dict[str, Any]) -> str:
    """How a preset's `quant_cfg` is spelled: "dict" (modelopt <= 0.39) or "list" (0.47)."""
    inner = default_cfg.get("quant_cfg")
    if isinstance(inner, dict):
        return "dict"
    if isinstance(inner, list):
        return "list"
    raise TypeError(f"unknown modelopt quant_cfg form: {type(inner).__name__}")


def installed_defaults() -> tuple[dict[str, Any], dict[str, Any]]:
    """(FP8_DEFAULT_CFG, FP8_KV_CFG) of the installed modelopt."""
    import modelopt.torch.quantization as mtq

    return mtq.FP8_DEFAULT_CFG, mtq.FP8_KV_CFG


def quant_config(
    mode: str, kv_cache: str, exclude: Sequence[str], defaults: tuple[dict[str, Any], dict[str, Any]] | None = None
) -> dict[str, Any]:
    """modelopt's quantization config for the recipe, in the form `defaults` (FP8_DEFAULT_CFG, FP8_KV_CFG) speak
    (the installed modelopt's when None); see the module docstring."""
    fp8, kv = installed_defaults() if defaults is None else defaults
    if config_form(fp8) == "dict":
        return _dict_form(mode, kv_cache, exclude, fp8, kv)
    if mode == "fp8":
        cfg = copy.deepcopy(fp8)
        if "lm_head" not in exclude:
            cfg["quant_cfg"] = [e for e in cfg["quant_cfg"] if e.get("quantizer_name") != "*lm_head*"]
    else:  # KV cache only
        cfg = {"quant_cfg": [{"quantizer_name": "*", "enable": False}], "algorithm": "max"}
    if kv_cache == "fp8":  # as 0.47's update_quant_cfg_with_kv_cache_quant: the KV entries appended
        cfg["quant_cfg"] = list(cfg["quant_cfg"]) + copy.deepcopy(list(kv["quant_cfg"]))
    cfg["quant_cfg"] = list(cfg["quant_cfg"]) + [{"quantizer_name": f"*{p}*", "enable": False} for p in exclude]
    return cfg


def _dict_form(
    mode: str, kv_cache: str, exclude: Sequence[str], fp8: dict[str, Any], kv: dict[str, Any]
) -> dict[str, Any]:
    if mode == "fp8":
        cfg = copy.deepcopy(fp8)
        if "lm_head" not in exclude:
            cfg["quant_cfg"].pop("*lm_head*", None)
    else:
        cfg = {"quant_cfg": {"default": {"enable": False}}, "algorithm": "max"}
    q = cfg["quant_cfg"]
    if kv_cache == "fp8":  # as 0.37's examples/llm_ptq: the KV entries merged in (its "default" is the same)
        q.update({k: copy.deepcopy(v) for k, v in kv["quant_cfg"].items() if k != "default"})
    for p in exclude:
        q.pop(f"*{p}*", None)  # re-inserted last: dict order is application order
        q[f"*{p}*"] = {"enable": False}
    return cfg


def host_facts() -> HostFacts:
    """This host's CUDA devices (as torch sees them) and RAM."""
    import os

    import torch

    from builder.quantize.placement import HostFacts

    ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if not torch.cuda.is_available():
        return HostFacts((), ram)
    n = torch.cuda.device_count()
    props = [torch.cuda.get_device_properties(i) for i in range(n)]
    return HostFacts(tuple(int(p.total_memory) for p in props), ram, props[0].name if props else "GPU")


def load_hf(base_dir: Path, allow_pickle: bool = False, placement: Placement | None = None) -> torch.nn.Module:
    """The checkpoint as an HF LlamaForCausalLM in eval mode: on the CPU in float32 (no `placement`, or a cpu
    one), else spread over `placement.gpus` CUDA devices in its dtype."""
    import torch
    from transformers import LlamaForCausalLM

    kwargs: dict[str, Any] = {"use_safetensors": None if allow_pickle else True}
    if placement is None or placement.device == "cpu":
        kwargs["dtype"] = torch.float32
    else:
        kwargs.update(dtype=getattr(torch, placement.dtype), device_map="auto", max_memory=dict(placement.max_memory))
    return LlamaForCausalLM.from_pretrained(str(base_dir), **kwargs).eval()


def calibrate(
    model: torch.nn.Module,
    cfg: dict[str, Any],
    samples: list[list[int]],  # [num_samples][seq_len] token ids
    batch_size: int = 4,
    progress: Callable[[int, int], None] = lambda _done, _total: None,
) -> torch.nn.Module:
    """modelopt PTQ in place: insert the quantizers, run the calibration batches, compute the amaxes; then one
    weight / input amax per fused group (`unify_fused_amax`)."""
    import modelopt.torch.quantization as mtq
    import torch
    from tqdm import tqdm

    embed: Any = model.get_input_embeddings()  # type: ignore[operator]  # (an HF PreTrainedModel)
    device = embed.weight.device  # the first device of a device_map'd model
    ids = torch.tensor(samples, dtype=torch.int64)  # (N, S)
    batches = list(torch.split(ids, batch_size))

    def loop(m: torch.nn.Module) -> None:
        with torch.no_grad():
            for i, batch in enumerate(tqdm(batches, desc="calibration", leave=False, disable=None)):
                m(input_ids=batch.to(device), use_cache=False)
                progress(i + 1, len(batches))

    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mtq.quantize(model, cfg, forward_loop=loop)
    unify_fused_amax(model)
    return model


def unify_fused_amax(model: torch.nn.Module) -> int:
    """One weight amax (and one input amax) per fused group — q/k/v of each attention, gate/up of each MLP —
    the max over the group's enabled quantizers (module docstring). Returns the number of groups unified."""
    import torch

    done = 0
    for name, mod in model.named_modules():
        for parent, members in FUSED_GROUPS:
            if not name.endswith(parent) or not all(hasattr(mod, m) for m in members):
                continue
            linears = [getattr(mod, m) for m in members]
            for attr in ("weight_quantizer", "input_quantizer"):
                found: list[Any] = [getattr(lin, attr, None) for lin in linears]
                qs = [q for q in found if q is not None and q.is_enabled and getattr(q, "amax", None) is not None]
                if len(qs) < 2:
                    continue
                shared = torch.stack([q.amax.float().reshape(()).to(qs[0].amax.device) for q in qs]).max()
                for q in qs:
                    q.amax = shared.reshape(q.amax.shape).to(q.amax.dtype)
                done += attr == "weight_quantizer"
    return done


def export(model: torch.nn.Module, out_dir: Path) -> None:
    """modelopt's unified HF checkpoint (safetensors, config.json, hf_quant_config.json) into `out_dir`; FP8
    weights computed in float32 (module docstring), unquantized tensors in the model's dtype."""
    import torch
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
