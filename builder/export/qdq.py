"""FP8 in the exported graphs: standard ONNX QuantizeLinear / DequantizeLinear to FLOAT8E4M3FN (opset ≥ 19).

What modelopt's unified FP8 checkpoint holds (`Fp8Spec`, read by `builder.quantize.checkpoint`) becomes:

* weights: FLOAT8E4M3FN initializers (laid out [in, out] for MatMul, or as stored for a transB Gemm)
  and one `DequantizeLinear` each, with the weight scale per tensor or per output column. A packed QKV or
  gate/up weight gets one per-tensor scale: the quantize stage gives q/k/v one weight scale and gate/up one
  (as TensorRT-LLM fuses them, `builder.quantize.ptq`), so every backend reads the same bytes; parts with
  different scales (a checkpoint from elsewhere) keep theirs as a per-axis scale over the output columns;
* activations: `QuantizeLinear` → `DequantizeLinear` with the linear's input scale right before every
  quantized MatMul (the explicit-quantization pattern TensorRT fuses into FP8 GEMMs);
* KV cache (`kv_cache: fp8`), two forms: in the CPU form, Q → DQ of the post-RoPE keys and of the values
  before they are written to the cache (the cache tensors stay float32 and hold the dequantized FP8
  values, which is what attention reads); in the GPU form (`Precision.kv` = float8e4m3fn) the cache
  tensors are FLOAT8E4M3FN: the new keys / values are quantized (Q) and written as FP8 codes, and the
  attention reads DequantizeLinear of the cache (`builder.export.attention`).

Scales are stored in the graph's activation dtype, so no Cast sits between a Q/DQ and its MatMul
(nvidia-modelopt 0.47, `modelopt/torch/quantization/export_onnx.py`, `_fp8_quantize`: "Emit the scale in
the native input dtype so no Cast is inserted between the graph and Q/DQ (Cast nodes block TRT from
fusing DQ into the MatMul kernel)"). In a bfloat16 / float16 graph a scale is therefore the checkpoint's
float32 scale rounded to that dtype (`scales_in` gives the spec with the scales the graph holds).

Every Q has saturate=1 (values beyond ±448 clamp, as modelopt's fake quantizer does) and a zero point of
type FLOAT8E4M3FN. Q/DQ sites are recorded on the graph (`Graph.tags["fp8/<scope><site>"]` = the
dequantized value) so tests can read what the graph rounded to.

No `trt::TRT_FP8*` ops: ONNX Runtime cannot run them. ONNX Runtime's CPU provider keeps a weight
DequantizeLinear as a per-step op (it skips DQ in constant folding, see `ort_foldable`), so the ORT-ready
twin spells the weight dequantization as Cast + Mul, which ORT folds to float32 at session creation.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

import numpy as np
import onnx
from onnx import TensorProto, helper

from builder.export.graph import Graph

FP8 = TensorProto.FLOAT8E4M3FN
FP8_MAX = 448.0


@dataclass(frozen=True)
class LinearFp8:
    """One quantized linear as modelopt exports it."""

    weight: np.ndarray  # [out, in] ml_dtypes.float8_e4m3fn
    weight_scale: np.ndarray  # [] or [out] float32
    input_scale: np.ndarray  # [] float32

    def dequantized(self) -> np.ndarray:  # -> [out, in] float32: fp8 · scale, one fp32 rounding (as DQ)
        s = self.weight_scale.reshape(-1, 1) if self.weight_scale.ndim else self.weight_scale
        return (self.weight.astype(np.float32) * s).astype(np.float32)


@dataclass(frozen=True)
class Fp8Spec:
    """The quantized parts of one model, by module name as in `builder.model.llama` (no `model.` prefix)."""

    linears: Mapping[str, LinearFp8] = field(default_factory=dict)  # e.g. "layers.0.self_attn.q_proj"
    kv_scales: Mapping[int, tuple[float, float]] = field(default_factory=dict)  # layer -> (k_scale, v_scale)


@dataclass(frozen=True)
class Fp8Weight:
    """A (possibly packed) quantized MatMul weight, laid out for the graph."""

    data: np.ndarray  # [in, out] float8_e4m3fn ([out, in] when `transposed`)
    scale: np.ndarray  # [] or [out] float32 (per output column)
    input_scale: np.ndarray  # [] float32
    transposed: bool = False  # stored [out, in] for a transB Gemm (the LM head)


def pack(parts: list[LinearFp8]) -> Fp8Weight:
    """Linears reading the same input (q/k/v, gate/up) as one [in, Σout] weight with per-column scales.

    modelopt gives fused linears one input scale (it unifies their input amaxes); different ones cannot
    share the single activation Q/DQ of a packed MatMul, so they are refused."""
    scales = {float(p.input_scale) for p in parts}
    if len(scales) != 1:
        raise ValueError(f"linears packed into one MatMul need one input scale, got {sorted(scales)}")
    data = np.concatenate([p.weight.T for p in parts], axis=1)  # [in, Σout]
    per_col = [np.broadcast_to(p.weight_scale.astype(np.float32), (p.weight.shape[0],)) for p in parts]
    scale = np.concatenate(per_col)  # [Σout]
    if (scale == scale[0]).all():
        scale = scale[:1].reshape(())  # one scale (q/k/v and gate/up share theirs: builder.quantize.ptq): per-tensor
    # np.array, not np.ascontiguousarray: the latter makes a 0-d scale [1], which `weight` and `columns` would
    # then read as a per-column scale of one column
    return Fp8Weight(np.ascontiguousarray(data), np.array(scale, np.float32), parts[0].input_scale.astype(np.float32))


def rows_of(linear: LinearFp8, rows: np.ndarray) -> LinearFp8:
    """The linear's output rows `rows` only (a per-row weight scale sliced with them)."""
    scale = linear.weight_scale[rows] if linear.weight_scale.ndim else linear.weight_scale
    return replace(linear, weight=np.ascontiguousarray(linear.weight[rows]), weight_scale=scale)


def single(linear: LinearFp8, transposed: bool = False) -> Fp8Weight:
    w = linear.weight if transposed else linear.weight.T
    return Fp8Weight(
        np.ascontiguousarray(w),
        linear.weight_scale.astype(np.float32),
        linear.input_scale.astype(np.float32),
        transposed,
    )


def quantize(g: Graph, x: str, scale: np.ndarray | float, dtype: str = "float32") -> tuple[str, str]:
    """x → QuantizeLinear(FP8, saturate=1); returns (FP8 codes, the scale value in `dtype`)."""
    s = g.const(np.asarray(scale, np.float32).reshape(()), numpy_type(dtype))
    zero = g.const(np.zeros((), np.float32).astype(_fp8()), _fp8())
    return g.op("QuantizeLinear", x, s, zero, saturate=1), s


def fake_quant(g: Graph, x: str, scale: np.ndarray | float, site: str, dtype: str = "float32") -> str:
    """x → QuantizeLinear(FP8, saturate) → DequantizeLinear; returns the dequantized value (same shape)."""
    q, s = quantize(g, x, scale, dtype)
    y = g.op("DequantizeLinear", q, s)
    g.tags[f"fp8/{g.scope_name}{site}"] = y
    return y


def weight(g: Graph, base: str, w: Fp8Weight, dtype: str = "float32") -> str:
    """The FP8 initializer and its DequantizeLinear (per-tensor, or per output column); the float value."""
    data = g.weight(f"{base}_fp8", w.data)
    scale = g.weight(f"{base}_scale", w.scale.astype(np.float32).astype(numpy_type(dtype)))
    axis = 0 if w.transposed else 1  # the output-column axis of the stored layout
    return g.op("DequantizeLinear", data, scale, axis=axis) if w.scale.ndim else g.op("DequantizeLinear", data, scale)


def ort_foldable(model: onnx.ModelProto) -> onnx.ModelProto:
    """In place: every DequantizeLinear of a constant FP8 initializer becomes Cast(to FLOAT) · scale.

    ONNX Runtime's CPU constant folding skips DequantizeLinear (kept for its QDQ fusions) unless the
    session sets `session.disable_quant_qdq`, so the weight would be dequantized at every step (measured:
    ~35× a 1024×4096 fp32 MatMul). Cast of an FP8 value to float is exact and the Mul rounds once, so the
    folded weight equals DequantizeLinear's bit for bit; ORT folds Cast + Mul at session creation."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    nodes: list[onnx.NodeProto] = []
    for node in g.node:
        src = (
            inits.get(node.input[0]) if node.op_type == "DequantizeLinear" and node.domain in ("", "ai.onnx") else None
        )
        if src is None or src.data_type != FP8 or len(node.input) > 2 and node.input[2]:
            nodes.append(node)
            continue
        scale = inits[node.input[1]]
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
        rank = len(src.dims)
        cast = helper.make_node(
            "Cast", [node.input[0]], [node.output[0] + "/f32"], name=node.name + "/cast", to=TensorProto.FLOAT
        )
        if len(scale.dims) == 1 and axis % rank != rank - 1:  # the graphs put per-column scales on the last axis
            raise ValueError(f"{node.name}: a per-axis scale on axis {axis} of a rank-{rank} weight does not broadcast")
        nodes.append(cast)
        nodes.append(
            helper.make_node("Mul", [cast.output[0], node.input[1]], [node.output[0]], name=node.name + "/scale")
        )
    del g.node[:]
    g.node.extend(nodes)
    return model


def numpy_type(dtype: str) -> type:
    """The NumPy scalar type of an activation dtype name (float32 / bfloat16 / float16)."""
    from builder.export.contract import numpy_dtype

    return numpy_dtype(dtype).type  # type: ignore[no-any-return]


def scales_in(spec: Fp8Spec, dtype: str) -> Fp8Spec:
    """`spec` with every scale rounded to `dtype` (kept as float32 numbers, exactly): the scales a graph in
    that activation dtype holds. float32: `spec` itself."""
    if dtype == "float32":
        return spec
    t = numpy_type(dtype)
    r = lambda a: np.asarray(a, np.float32).astype(t).astype(np.float32)  # noqa: E731
    linears = {
        k: replace(v, weight_scale=r(v.weight_scale), input_scale=r(v.input_scale)) for k, v in spec.linears.items()
    }
    kv = {i: (float(r(k)), float(r(v))) for i, (k, v) in spec.kv_scales.items()}
    return Fp8Spec(linears, kv)


def _fp8() -> type:
    import ml_dtypes

    return ml_dtypes.float8_e4m3fn
