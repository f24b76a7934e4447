"""FP8 weights are quantized once, from the original, with the scale every backend uses (issue 36 item 4).

Oracle: `tests.unit.fp8_oracle.one_rounding` — ml_dtypes' round-to-nearest-even E4M3 cast of float32(w / s), w
the ORIGINAL fp32 weight of the HF fixture (read from its safetensors file, not from anything the code under test
wrote) and s the scale the file holds. Every FP8 byte must equal it, which puts each dequantized weight within
half an E4M3 step of the original — one rounding — and the scale must be the shared one TensorRT-LLM fuses with:
q/k/v one (its fused `attention.qkv`), gate/up one (`trtllm-build`'s `fuse_gate_mlp`), each
float32(max over the group of max|w| / 448) (modelopt's "max" calibration of a per-tensor weight quantizer).

Checked on the quantize stage's checkpoint (what the ONNX / ORT graphs read, `builder.quantize.checkpoint`), on
the TensorRT-LLM checkpoint written from it at tp 1, 2 and 4 (4 duplicates the fixture's 2 KV heads), with the
ranks' slices cut here from upstream's split rules, and on the exported Q/DQ graph's packed initializers (the
same bytes). The last test shows the oracle can fail: a checkpoint whose q/k/v keep their own scales (modelopt
alone, `published_fp8`) fused by the TensorRT-LLM writer rounds a second time, and many bytes differ.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
import torch

from builder.trtllm.checkpoint import CheckpointRequest, convert_checkpoint
from tests.unit.fp8_oracle import BASE, codes_to_float, half_ulp, one_rounding, published_fp8
from tests.unit.scratch import scratch_dir
from tests.unit.test_quantize_ptq import fixture_fp8

GROUPS = {
    "q_proj": "qkv",
    "k_proj": "qkv",
    "v_proj": "qkv",
    "gate_proj": "gate_up",
    "up_proj": "gate_up",
    "o_proj": "o_proj",
    "down_proj": "down_proj",
}
H, KV, D = 8, 2, 32  # the fixture's heads, KV heads, head size


@functools.lru_cache(maxsize=None)
def original() -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return {k: v.astype(np.float32) for k, v in load_file(str(BASE / "model.safetensors")).items()}


def fp8_file(folder: Path) -> dict[str, np.ndarray]:
    """Every tensor of a folder's safetensors files as NumPy (FP8 as uint8 codes), read with plain safetensors."""
    from safetensors import safe_open

    out = {}
    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as h:
            for k in h.keys():
                t = h.get_tensor(k)
                out[k] = t.view(torch.uint8).numpy() if t.dtype == torch.float8_e4m3fn else t.float().numpy()
    return out


def group_scale(layer: int, group: str) -> np.float32:
    """float32(max over the group's original weights of max|w| / 448)."""
    members = [m for m, g in GROUPS.items() if g == group]
    path = {
        m: f"model.layers.{layer}.{'self_attn' if m.endswith(('q_proj', 'k_proj', 'v_proj', 'o_proj')) else 'mlp'}"
        f".{m}.weight"
        for m in members
    }
    amax = max(float(np.abs(original()[p]).max()) for p in path.values())
    return np.float32(amax / 448)


def assert_one_rounding(codes: np.ndarray, w: np.ndarray, s: float, what: str) -> None:
    want = one_rounding(w, s)
    off = int((codes != want).sum())
    assert off == 0, f"{what}: {off} of {codes.size} codes are not the one rounding of the original"
    err = np.abs(codes_to_float(codes) * float(s) - w.astype(np.float64))
    bound = (half_ulp(w.astype(np.float64) / float(s)) + 2.0**-20) * float(s)  # + the float32 quotient's rounding
    assert bool((err <= bound).all()), f"{what}: beyond half an E4M3 step of the original"


def test_quantize_stage_weights_are_one_rounding_of_the_original():
    t = fp8_file(fixture_fp8()[0])
    n = 0
    for key, w in original().items():
        module = key.removesuffix(".weight")
        if f"{module}.weight_scale" not in t:
            assert t[key].dtype == np.float32 and np.array_equal(t[key], w), key  # unquantized: as stored
            continue
        layer, leaf = int(key.split(".")[2]), module.rsplit(".", 1)[1]
        s = t[f"{module}.weight_scale"]
        assert s.shape == () and s == group_scale(layer, GROUPS[leaf]), f"{module}: not the group's shared scale"
        assert_one_rounding(t[key], w, float(s), key)
        n += 1
    assert n == 7 * 4  # every linear of the 4 layers (lm_head excluded)


def rank_rows(w: np.ndarray, kind: str, tp: int, r: int) -> np.ndarray:
    """Rank r's part of an HF weight under upstream's split (column-parallel rows; row-parallel columns; q, k, v
    by whole heads, a KV head repeated tp / KV times when KV < tp: `convert_utils.dup_kv_weight`)."""
    if kind == "q":
        n = H // tp * D
        return w[r * n : (r + 1) * n]
    if kind == "kv":
        if KV < tp:
            g = r // (tp // KV)
            return w[g * D : (g + 1) * D]
        n = KV // tp * D
        return w[r * n : (r + 1) * n]
    if kind == "rows":
        n = w.shape[0] // tp
        return w[r * n : (r + 1) * n]
    n = w.shape[1] // tp  # "cols"
    return w[:, r * n : (r + 1) * n]


@functools.lru_cache(maxsize=None)
def trtllm(tp: int, fp8_dir: Path) -> Path:
    out = scratch_dir("trtspec-once-") / f"tp{tp}"
    convert_checkpoint(CheckpointRequest(BASE, tp, 1, "float32", "none", fp8_dir=fp8_dir, kv_cache_fp8=True), out)
    return out


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_trtllm_checkpoint_weights_are_one_rounding_of_the_original(tp):
    o = original()
    for r in range(tp):
        t = fp8_file_rank(trtllm(tp, fixture_fp8()[0]), r)
        for i in range(4):
            p, hf = f"transformer.layers.{i}.", f"model.layers.{i}."
            qkv = np.concatenate(
                [
                    rank_rows(o[hf + "self_attn.q_proj.weight"], "q", tp, r),
                    rank_rows(o[hf + "self_attn.k_proj.weight"], "kv", tp, r),
                    rank_rows(o[hf + "self_attn.v_proj.weight"], "kv", tp, r),
                ]
            )
            want = {
                "attention.qkv": (qkv, "qkv"),
                "attention.dense": (rank_rows(o[hf + "self_attn.o_proj.weight"], "cols", tp, r), "o_proj"),
                "mlp.fc": (rank_rows(o[hf + "mlp.gate_proj.weight"], "rows", tp, r), "gate_up"),
                "mlp.gate": (rank_rows(o[hf + "mlp.up_proj.weight"], "rows", tp, r), "gate_up"),
                "mlp.proj": (rank_rows(o[hf + "mlp.down_proj.weight"], "cols", tp, r), "down_proj"),
            }
            for name, (w, group) in want.items():
                s = t[f"{p}{name}.weights_scaling_factor"]
                assert s.shape == (1,) and s[0] == group_scale(i, group), f"rank {r} {name}: not the shared scale"
                assert_one_rounding(t[f"{p}{name}.weight"], w, float(s[0]), f"tp{tp} rank {r} {p}{name}")


def fp8_file_rank(folder: Path, rank: int) -> dict[str, np.ndarray]:
    """rank{N}.safetensors as NumPy (FP8 as uint8 codes)."""
    from safetensors.torch import load_file

    return {
        k: t.view(torch.uint8).numpy() if t.dtype == torch.float8_e4m3fn else t.float().numpy()
        for k, t in load_file(str(folder / f"rank{rank}.safetensors")).items()
    }


def test_onnx_graph_holds_the_same_bytes_and_one_scale_per_fused_group():
    """The exported target graph's packed q/k/v and gate/up initializers are the checkpoint's bytes, with one
    per-tensor scale each (the DequantizeLinear reads the shared scale, no per-column vector)."""
    from onnx import numpy_helper

    from builder.export.target import build_target
    from builder.quantize.checkpoint import read_fp8_checkpoint

    ckpt = read_fp8_checkpoint(fixture_fp8()[0])
    proto = build_target(ckpt.model, variant="standard", mode="greedy", max_seq_len=32, fp8=ckpt.spec)
    inits = {t.name: t for t in proto.graph.initializer}
    t = fp8_file(fixture_fp8()[0])
    for i in range(4):
        for name, parts in (
            ("qkv", ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")),
            ("gate_up", ("mlp.gate_proj", "mlp.up_proj")),
        ):
            data = numpy_helper.to_array(inits[f"layer{i}/{name}_fp8"]).view(np.uint8)  # [C, Σout]
            want = np.concatenate([t[f"model.layers.{i}.{m}.weight"] for m in parts]).T
            assert np.array_equal(data, want), f"layer {i} {name}: not the checkpoint's bytes"
            scale = numpy_helper.to_array(inits[f"layer{i}/{name}_scale"])
            assert scale.size == 1 and float(scale.reshape(())) == float(t[f"model.layers.{i}.{parts[0]}.weight_scale"])
    dq = [n for n in proto.graph.node if n.op_type == "DequantizeLinear" and n.input[0].endswith("_fp8")]
    assert dq and not any(a.name == "axis" for n in dq for a in n.attribute)  # every weight scale per tensor


def test_the_oracle_catches_a_second_rounding():
    """q/k/v with their own scales (modelopt alone) requantized to one by the TensorRT-LLM writer: not one
    rounding of the original — what the quantize stage's shared scales prevent."""
    folder = trtllm(1, published_fp8("fp8"))
    t = fp8_file_rank(folder, 0)
    o = original()
    off = 0
    for i in range(4):
        hf = f"model.layers.{i}.self_attn."
        w = np.concatenate([o[hf + f"{m}_proj.weight"] for m in "qkv"])
        s = float(t[f"transformer.layers.{i}.attention.qkv.weights_scaling_factor"][0])
        off += int((t[f"transformer.layers.{i}.attention.qkv.weight"] != one_rounding(w, s)).sum())
    assert off > 0.01 * 4 * w.size, off


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_trtllm_builds_gate_fc_fusion_keeps_the_bytes(dtype):
    """`trtllm-build`'s `fuse_gate_mlp` (`tensorrt_llm/models/modeling_utils.py` @ b35ac1b, FP8 branch), written out
    here in its operation order for an engine of `dtype`: gate and fc to `dtype` times their weight scales
    ([1] float32: the product promotes to float32), concatenated, divided by max(gate, fc) scale, cast to FP8.
    With the one scale the quantize stage gives both, the fused weight is the two parts' bytes unchanged."""
    t = fp8_file_rank(trtllm(2, fixture_fp8()[0]), 1)
    for i in range(4):
        p = f"transformer.layers.{i}.mlp."
        gate, fc = (torch.from_numpy(t[p + n + ".weight"]).view(torch.float8_e4m3fn) for n in ("gate", "fc"))
        sg, sf = (torch.from_numpy(t[p + n + ".weights_scaling_factor"]) for n in ("gate", "fc"))
        fused = torch.cat([gate.to(dtype) * sg, fc.to(dtype) * sf], dim=0)
        fused = (fused / torch.maximum(sg, sf)).to(torch.float8_e4m3fn)
        assert torch.equal(fused.view(torch.uint8), torch.cat([gate.view(torch.uint8), fc.view(torch.uint8)]))
