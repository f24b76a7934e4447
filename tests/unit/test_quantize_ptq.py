"""modelopt FP8 PTQ on the CPU (builder.quantize): calibration text, the modelopt config the recipe
makes, and the unified checkpoint modelopt writes, read back by our strict reader.

The checkpoint is made once per test session (`fixture_fp8`, cached) from the tiny fixture: 8 × 64
calibration tokens from `builtin:stdlib`, FP8 weights, activations and KV cache.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from builder.errors import UserError
from builder.quantize import ptq
from builder.quantize.calibration import HELDOUT, calibration_ids, documents
from builder.quantize.checkpoint import read_fp8_checkpoint
from builder.quantize.reference import e4m3_round
from builder.stages.decoders import load_tokenizer
from tests.unit.scratch import scratch_dir

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "tests" / "fixtures" / "tiny-llama3" / "base"
EXCLUDE = ["lm_head", "embed_tokens", "medusa_heads", "eagle_draft"]


@functools.lru_cache(maxsize=None)
def fixture_fp8(kv: str = "fp8", exclude: tuple[str, ...] = tuple(EXCLUDE)):
    """(checkpoint folder, {module: modelopt's fake-quantized weight}, {module: weight amax}) — cached."""
    tok = load_tokenizer(BASE)
    samples = calibration_ids(tok, "builtin:stdlib", REPO, num_samples=8, seq_len=64)
    model = ptq.load_hf(BASE)
    ptq.calibrate(model, ptq.quant_config("fp8", kv, list(exclude)), samples)
    fake, amax = {}, {}
    with torch.no_grad():
        for name, mod in model.named_modules():
            q = getattr(mod, "weight_quantizer", None)
            if q is not None and q.is_enabled:
                fake[name.removeprefix("model.")] = q(mod.weight).detach().clone()
                amax[name.removeprefix("model.")] = float(q.amax)
    out = scratch_dir("trtspec-fp8-")
    ptq.export(model, out)
    return out, fake, amax


def test_calibration_shapes_and_sources(tmp_path: Path) -> None:
    tok = load_tokenizer(BASE)
    ids = calibration_ids(tok, "builtin:stdlib", REPO, num_samples=3, seq_len=32)
    assert [len(s) for s in ids] == [32, 32, 32]
    (tmp_path / "cal.jsonl").write_text("\n".join(json.dumps({"text": f"def f{i}(x):\n    return x * {i}\n"})
                                                  for i in range(40)) + "\n")  # fmt: skip
    ids = calibration_ids(tok, "cal.jsonl", tmp_path, num_samples=2, seq_len=16)
    assert [len(s) for s in ids] == [16, 16]
    with pytest.raises(UserError, match="needs num_samples"):
        calibration_ids(tok, "cal.jsonl", tmp_path, num_samples=500, seq_len=64)
    with pytest.raises(UserError, match="missing"):
        calibration_ids(tok, "nope.jsonl", tmp_path, num_samples=1, seq_len=4)
    (tmp_path / "bad.jsonl").write_text('{"txt": 1}\n')
    with pytest.raises(UserError, match="'text'"):
        calibration_ids(tok, "bad.jsonl", tmp_path, num_samples=1, seq_len=4)


def test_humaneval_calibration_never_reads_the_heldout_prompts() -> None:
    from builder.data.humaneval import heldout_prompts

    held = heldout_prompts(HELDOUT)
    cal = list(documents("builtin:humaneval", REPO, 8))
    assert cal and not any(p in doc for p in held for doc in cal)


def test_quant_config_follows_exclude_modules() -> None:
    def disabled(cfg):
        return {e["quantizer_name"] for e in cfg["quant_cfg"] if e.get("enable") is False}

    cfg = ptq.quant_config("fp8", "fp8", EXCLUDE)
    assert {"*lm_head*", "*eagle_draft*"} <= disabled(cfg)
    assert any(e["quantizer_name"] == "*[kv]_bmm_quantizer" and e.get("enable") is not False for e in cfg["quant_cfg"])
    no_head = ptq.quant_config("fp8", "model_dtype", ["embed_tokens"])
    assert "*lm_head*" not in disabled(no_head)  # the recipe decides, not modelopt's default
    assert not any("bmm" in e["quantizer_name"] and e.get("enable") is not False for e in no_head["quant_cfg"])
    kv_only = ptq.quant_config("none", "fp8", EXCLUDE)
    assert kv_only["quant_cfg"][0] == {"quantizer_name": "*", "enable": False}


def test_unified_checkpoint_holds_modelopts_quantized_weights() -> None:
    folder, fake, amax = fixture_fp8()
    ckpt = read_fp8_checkpoint(folder)
    layers = ckpt.cfg.num_hidden_layers
    assert set(ckpt.spec.linears) == set(fake)  # every quantized linear, nothing else (lm_head excluded)
    assert len(ckpt.spec.linears) == 7 * layers and "lm_head" not in ckpt.spec.linears
    assert sorted(ckpt.spec.kv_scales) == list(range(layers))
    for name, lin in ckpt.spec.linears.items():
        assert lin.weight.dtype.name == "float8_e4m3fn"
        assert float(lin.weight_scale) == pytest.approx(amax[name] / 448, rel=1e-6)
        # modelopt's fake-quantized weight (what its quantized model computes with) holds exactly the
        # exported FP8 codes: dividing by the scale and rounding to E4M3 gives the stored bits back ...
        codes = e4m3_round(fake[name].double() / float(lin.weight_scale))
        np.testing.assert_array_equal(lin.weight.astype(np.float64), codes.numpy())
        # ... and it is code · scale within two fp32 ulps: modelopt's eager FP8 path multiplies by the
        # rounded 448 / amax and back by its rounded reciprocal (tensor_quant._fp8_eager), the checkpoint
        # (and the graph's DequantizeLinear) by amax / 448 once
        deq = lin.dequantized()
        err = np.abs(deq.astype(np.float64) - fake[name].double().numpy())
        assert (err <= 2 * np.spacing(np.maximum(np.abs(deq), np.abs(fake[name].numpy())))).all()
    q = json.loads((folder / "hf_quant_config.json").read_text())["quantization"]
    assert q["quant_algo"] == "FP8" and q["kv_cache_quant_algo"] == "FP8"
    assert "lm_head" in q["exclude_modules"]


def test_scales_positive_finite_and_qkv_share_an_input_scale() -> None:
    ckpt = read_fp8_checkpoint(fixture_fp8()[0])
    scales = [float(s) for lin in ckpt.spec.linears.values() for s in (lin.weight_scale, lin.input_scale)]
    scales += [s for pair in ckpt.spec.kv_scales.values() for s in pair]
    assert all(np.isfinite(s) and s > 0 for s in scales)
    for i in range(ckpt.cfg.num_hidden_layers):
        qkv = {float(ckpt.spec.linears[f"layers.{i}.self_attn.{p}_proj"].input_scale) for p in "qkv"}
        assert len(qkv) == 1  # modelopt unifies the input amax of linears reading one tensor


def test_exclude_modules_keep_layers_unquantized() -> None:
    folder, fake, _ = fixture_fp8("model_dtype", (*EXCLUDE, "layers.1.mlp"))
    ckpt = read_fp8_checkpoint(folder)
    assert not any(n.startswith("layers.1.mlp") for n in ckpt.spec.linears)
    assert "layers.1.self_attn.q_proj" in ckpt.spec.linears and not ckpt.spec.kv_scales


def test_reader_refuses_a_damaged_checkpoint(tmp_path: Path) -> None:
    import shutil

    from safetensors.torch import load_file, save_file

    src = fixture_fp8()[0]
    for f in src.iterdir():
        shutil.copy(f, tmp_path / f.name)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    tensors["model.layers.0.mlp.up_proj.input_scale"] = torch.tensor(float("nan"))
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(UserError, match="positive and finite"):
        read_fp8_checkpoint(tmp_path)
    del tensors["model.layers.0.mlp.up_proj.input_scale"]
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(UserError, match="without"):
        read_fp8_checkpoint(tmp_path)
