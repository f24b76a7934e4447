"""FP8 TensorRT-LLM checkpoints from the quantize stage's modelopt checkpoint of the tiny fixture.

The FP8 checkpoints are made by modelopt on the CPU (`tests.unit.test_quantize_ptq.fixture_fp8`: 8 × 64
calibration tokens, cached per session), with and without an FP8 KV cache, and converted at tp 1, 2 and 4
(tp 4 duplicates the fixture's 2 KV heads). Oracles:
* `builder.quantize.checkpoint.read_fp8_checkpoint(...).model` (fp8 · weight_scale, float32): the reassembled
  weights equal it exactly everywhere — the quantize stage gives q, k, v one scale, so the fused qkv is their
  bytes concatenated (`test_quantize_once.py`: those bytes are one rounding of the original weights);
* a checkpoint whose q, k, v keep their own scales (`tests.unit.fp8_oracle.published_fp8`, modelopt alone):
  the fused qkv, requantized to the max of the q, k, v weight scales (TensorRT-LLM's `FP8Linear.postprocess`,
  `tensorrt_llm/quantization/layers.py`), lies within the FP8 rounding bound of the new grid — half a step:
  |x|·2^-4 for normal values, s·2^-10 in the subnormal range, plus float32 rounding — and equals an
  independent re-rounding (`builder.quantize.reference.e4m3_round`, exact ties-to-even) bit for bit;
* the scales have upstream's names, shapes ([1]) and dtypes (float32), and values: qkv weight / input scale =
  max of q, k, v; every other linear its own scale; kv_cache_scaling_factor = max(k_scale, v_scale)
  and kv_cache_rcp_scaling_factor its float32 reciprocal (`layers/attention.py` `Attention.postprocess`);
* logits of the reassembled model against HF transformers running the same weights, judged in float64
  (`tests/unit/numerics.py`).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import torch

from builder.quantize.checkpoint import read_fp8_checkpoint
from builder.quantize.reference import e4m3_round
from builder.trtllm.checkpoint import CheckpointRequest, convert_checkpoint, read_checkpoint
from tests.unit.fp8_oracle import published_fp8
from tests.unit.numerics import assert_close_to_float64
from tests.unit.scratch import scratch_dir
from tests.unit.test_quantize_ptq import EXCLUDE, fixture_fp8

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures" / "tiny-llama3"
KV = {"fp8": True, "model_dtype": False}


@functools.lru_cache(maxsize=None)
def fp8_dir(kv: str) -> Path:
    return fixture_fp8(kv, tuple(EXCLUDE))[0]


@functools.lru_cache(maxsize=None)
def converted(kv: str, tp: int, method: str = "none") -> tuple[Path, dict]:
    out = scratch_dir("trtspec-trtllm-fp8-") / f"{kv}-tp{tp}-{method}"
    extra = {
        "medusa": dict(draft_dir=FIX / "medusa", max_draft_len=12),
        "eagle": dict(draft_dir=FIX / "eagle", max_draft_len=12, num_eagle_layers=3, max_non_leaves_per_layer=3),
    }
    req = CheckpointRequest(
        FIX / "base", tp, 1, "float32", method, fp8_dir=fp8_dir(kv), kv_cache_fp8=KV[kv], **extra.get(method, {})
    )
    return out, convert_checkpoint(req, out)


def fp8_bound(x: torch.Tensor, s: float) -> torch.Tensor:  # [..] float32 -> elementwise bound
    """Half an FP8 E4M3 step at x on the grid of scale s (2^-4 relative; 2^-10·s subnormal) + float32 rounding."""
    return torch.maximum(x.abs() * 2.0**-4, torch.full_like(x, s * 2.0**-10)) + x.abs() * 2.0**-21


@pytest.mark.parametrize("kv", list(KV))
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_dequantized_weights_equal_the_quantize_stage_model(kv, tp):
    """The quantize stage shares one weight scale per fused group, so nothing is requantized: every weight,
    the fused qkv included, is the quantize stage's bytes and scale (`tests/unit/test_quantize_once.py` checks
    those bytes against the original weights)."""
    ref = read_fp8_checkpoint(fp8_dir(kv))
    folder, facts = converted(kv, tp)
    got = read_checkpoint(folder)
    assert facts["quantization"]["quant_algo"] == "FP8" and facts["fp8_linears"] == len(ref.spec.linears)
    assert facts["quantization"]["kv_cache_quant_algo"] == ("FP8" if KV[kv] else None)
    mine, theirs = got.model.state_dict(), ref.model.state_dict()
    assert set(mine) == set(theirs)
    for key, want in theirs.items():
        assert torch.equal(mine[key], want), key


@functools.lru_cache(maxsize=None)
def converted_published(tp: int) -> tuple[Path, dict]:
    out = scratch_dir("trtspec-trtllm-fp8-published-") / f"tp{tp}"
    req = CheckpointRequest(FIX / "base", tp, 1, "float32", "none", fp8_dir=published_fp8("fp8"), kv_cache_fp8=True)
    return out, convert_checkpoint(req, out)


@pytest.mark.parametrize("tp", [1, 2])
def test_qkv_with_different_scales_is_requantized_as_upstream(tp):
    """An FP8 checkpoint whose q, k, v keep their own scales (modelopt alone): the fused qkv is requantized to
    the max of the q, k, v weight scales as TensorRT-LLM's `FP8Linear.postprocess` does
    (`tensorrt_llm/quantization/layers.py`), within the FP8 rounding bound of the new grid and equal to an
    independent re-rounding (`builder.quantize.reference.e4m3_round`, exact ties-to-even) bit for bit."""
    ref = read_fp8_checkpoint(published_fp8("fp8"))
    got = read_checkpoint(converted_published(tp)[0])
    mine, theirs = got.model.state_dict(), ref.model.state_dict()
    requantized = 0
    for key, want in theirs.items():
        have = mine[key]
        if ".self_attn." not in key or "o_proj" in key:
            assert torch.equal(have, want), key  # no requantization: modelopt's bytes and scale
            continue
        module = key.removesuffix(".weight")
        layer = module.rsplit(".", 1)[0]  # "layers.0.self_attn"
        scales = [float(ref.spec.linears[f"{layer}.{p}_proj"].weight_scale) for p in "qkv"]
        s_new, s_part = max(scales), float(ref.spec.linears[module].weight_scale)
        err = (have - want).abs()
        assert bool((err <= fp8_bound(want, s_new)).all()), f"{key}: {float(err.max()):.3g} over the FP8 bound"
        q = torch.from_numpy(ref.spec.linears[module].weight.astype("float32"))  # modelopt's fp8 values
        spec = (q * torch.tensor(s_part)) / torch.tensor(s_new)  # TensorRT-LLM's float32 order: w·s_part / s_new
        assert torch.equal(have, e4m3_round(spec) * torch.tensor(s_new)), f"{key}: not the nearest-even re-rounding"
        requantized += int(s_part < s_new and bool((have != want).any()))
    assert requantized > 0  # the bound above was exercised, not vacuous


@pytest.mark.parametrize("kv", list(KV))
def test_scales_have_upstreams_names_shapes_dtypes_and_values(kv):
    from safetensors.torch import load_file

    ref = read_fp8_checkpoint(fp8_dir(kv))
    folder, _ = converted(kv, 2)
    lin = ref.spec.linears
    for rank in range(2):
        t = load_file(str(folder / f"rank{rank}.safetensors"))
        for i in range(ref.cfg.num_hidden_layers):
            p = f"transformer.layers.{i}."
            assert t[p + "attention.qkv.weight"].dtype == torch.float8_e4m3fn
            want = {
                "attention.qkv": ([f"layers.{i}.self_attn.{x}_proj" for x in "qkv"]),
                "attention.dense": [f"layers.{i}.self_attn.o_proj"],
                "mlp.fc": [f"layers.{i}.mlp.gate_proj"],
                "mlp.gate": [f"layers.{i}.mlp.up_proj"],
                "mlp.proj": [f"layers.{i}.mlp.down_proj"],
            }
            for name, sources in want.items():
                for suffix, attr in (
                    ("weights_scaling_factor", "weight_scale"),
                    ("activation_scaling_factor", "input_scale"),
                ):
                    s = t[f"{p}{name}.{suffix}"]
                    assert s.dtype == torch.float32 and tuple(s.shape) == (1,), (name, suffix)
                    assert float(s) == max(float(getattr(lin[m], attr)) for m in sources), (name, suffix)
            if KV[kv]:
                k_s, v_s = ref.spec.kv_scales[i]
                sf, rcp = t[p + "attention.kv_cache_scaling_factor"], t[p + "attention.kv_cache_rcp_scaling_factor"]
                assert sf.dtype == rcp.dtype == torch.float32 and tuple(sf.shape) == tuple(rcp.shape) == (1,)
                assert float(sf) == max(k_s, v_s) and torch.equal(rcp, torch.reciprocal(sf))
            else:
                assert p + "attention.kv_cache_scaling_factor" not in t
        assert t["lm_head.weight"].dtype == torch.float32 and "lm_head.weights_scaling_factor" not in t
    config = json.loads((folder / "config.json").read_text())["quantization"]
    assert config["quant_algo"] == "FP8" and "*lm_head" in config["exclude_modules"]


@pytest.mark.parametrize("tp", [1, 2])
def test_fp8_logits_are_hf_logits_of_the_same_weights(tp):
    from transformers import LlamaForCausalLM

    from builder.model.llama import causal_mask
    from tests.unit.model_utils import hf_float64

    got = read_checkpoint(converted("fp8", tp)[0])
    hf = LlamaForCausalLM.from_pretrained(FIX / "base", dtype=torch.float32, attn_implementation="sdpa").eval()
    state = got.model.state_dict()
    hf.load_state_dict({("" if k.startswith("lm_head") else "model.") + k: v for k, v in state.items()})
    ids = torch.randint(0, got.cfg.vocab_size, (1, 40), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ours, _ = got.model(ids, torch.arange(40)[None], causal_mask(40))
        theirs, ref = hf(ids).logits, hf_float64(hf)(ids).logits
    assert_close_to_float64(ours[0], theirs[0], ref[0], what=f"FP8 checkpoint logits tp{tp}")


def test_draft_parts_stay_in_the_model_dtype():
    """Medusa heads and the EAGLE draft are not quantized (the quantize stage's rule): excluded by pattern;
    the drafter's attentions get KV scales of 1.0, as `Attention.postprocess` gives a checkpoint without them."""
    from safetensors.torch import load_file

    folder, facts = converted("fp8", 2, "medusa")
    assert "*medusa_heads*" in facts["quantization"]["exclude_modules"]
    t = load_file(str(folder / "rank1.safetensors"))
    assert t["medusa_heads.0.medusa_layers.0.linear.weight"].dtype == torch.float32
    folder, facts = converted("fp8", 2, "eagle")
    assert "*eagle_nets*" in facts["quantization"]["exclude_modules"]
    t = load_file(str(folder / "rank0.safetensors"))
    assert t["eagle_nets.1.drafter.layers.0.attention.qkv.weight"].dtype == torch.float32
    assert float(t["eagle_nets.1.drafter.layers.0.attention.kv_cache_scaling_factor"]) == 1.0
    got = read_checkpoint(folder)
    assert got.eagle is not None and torch.equal(got.eagle.lm_head_weight, got.model.lm_head.weight)


def test_fp8_lm_head_when_the_recipe_quantizes_it(tmp_path):
    """lm_head not excluded: an FP8 ColumnLinear (not in exclude_modules), modelopt's bytes and scales, split
    on rows; EAGLE, whose nets copy the target's LM head into unquantized drafters, refuses it."""
    from safetensors.torch import load_file

    from builder.errors import UserError

    folder = fixture_fp8("model_dtype", tuple(e for e in EXCLUDE if e != "lm_head"))[0]
    ref = read_fp8_checkpoint(folder)
    req = CheckpointRequest(FIX / "base", 2, 1, "float32", "none", fp8_dir=folder)
    facts = convert_checkpoint(req, tmp_path / "none")
    assert "*lm_head" not in facts["quantization"]["exclude_modules"]
    t = load_file(str(tmp_path / "none" / "rank1.safetensors"))
    assert t["lm_head.weight"].dtype == torch.float8_e4m3fn and tuple(t["lm_head.weight"].shape) == (2048, 256)
    assert float(t["lm_head.weights_scaling_factor"]) == float(ref.spec.linears["lm_head"].weight_scale)
    assert torch.equal(read_checkpoint(tmp_path / "none").model.lm_head.weight, ref.model.lm_head.weight)
    eagle = CheckpointRequest(
        FIX / "base",
        1,
        1,
        "float32",
        "eagle",
        draft_dir=FIX / "eagle",
        max_draft_len=8,
        num_eagle_layers=2,
        max_non_leaves_per_layer=2,
        fp8_dir=folder,
    )
    with pytest.raises(UserError, match="LM head"):
        convert_checkpoint(eagle, tmp_path / "eagle")
