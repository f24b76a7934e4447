"""The float32 lowering of a GPU-form graph: what ONNX Runtime runs to check the GPU form on the CPU.

The GPU form (`builder.export.contract.Precision`) computes in bfloat16 or float16 and may store its KV
cache as FLOAT8E4M3FN. ONNX Runtime 1.32's CPU provider runs the step graphs' ops in float16 (MatMul, Gemm,
Attention, RotaryEmbedding, RMSNormalization, TensorScatter, Q/DQ, ... — probed op by op here), has no
bfloat16 kernel for most of them ("Could not find an implementation for MatMul(13)", likewise Add, Mul,
Where, Expand, QuantizeLinear, ...) and no TensorScatter over FLOAT8E4M3FN. `lower(model)` rewrites such a
graph into one that computes in float32 but rounds every tensor the GPU form holds in a narrow type
exactly as the GPU form does:

* every value of type bfloat16 / float16 (node outputs and graph inputs) is computed (or fed) in float32
  and rounded by Cast(to that type) → Cast(to float32) — ONNX Runtime's Cast rounds to nearest even, as
  torch and the GPU do (checked element for element against torch); so weights, activations, logits,
  hidden states and the KV cache writes hold exactly the narrow type's values;
* narrow initializers (the weights) stay as stored and are read through Cast(to float32), which ONNX
  Runtime folds at session creation (the weights file is shared with the GPU form);
* FP8: a FLOAT8E4M3FN value is represented by its dequantization (code · scale, exact in float32).
  QuantizeLinear → Q then DequantizeLinear in float32; a DequantizeLinear of such a value is the value
  itself, rounded to its output type; the ops that only move FP8 codes (TensorScatter into the cache,
  Slice, Reshape, ...) move the dequantized values instead. FP8 caches become float32 caches holding
  code · scale, so the cache written is exactly the GPU form's, read back as its DequantizeLinear gives.
  A weight DequantizeLinear becomes Cast(to float32) · scale (folded at session creation);
* RMSNormalization with a narrow output keeps ONNX's two roundings: the normalized value is rounded to the
  narrow type before the weight multiplies it (the function body of RMSNormalization-23, and HF's RMSNorm).

What stays op-internal is not rounded: a MatMul's or an attention's accumulation runs in float32 (as
TensorRT's kernels accumulate), and an op's own intermediates (e.g. attention scores) are not rounded.
Graph inputs and outputs of narrow / FP8 type become float32 (the CPU form's contract). A float32 graph
without FP8 caches (the CPU form) is returned unchanged.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

NARROW = (TensorProto.BFLOAT16, TensorProto.FLOAT16)
FP8 = TensorProto.FLOAT8E4M3FN
F32 = TensorProto.FLOAT
MOVES = ("TensorScatter", "Slice", "Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Gather", "Expand")


class LoweringError(ValueError):
    """The graph holds a narrow or FP8 value in a way the lowering does not know."""


def needs_lowering(model: onnx.ModelProto) -> bool:
    """A narrow (bfloat16 / float16) value anywhere, or an FP8 graph input (a stored FP8 cache)."""
    g = model.graph
    if any(_elem(v) == FP8 or _elem(v) in NARROW for v in (*g.input, *g.output)):
        return True
    return any(t.data_type in NARROW for t in g.initializer) or any(_elem(v) in NARROW for v in g.value_info)


def lower(model: onnx.ModelProto) -> onnx.ModelProto:
    """The float32 lowering of `model` (module docstring); `model` itself when nothing needs lowering.
    Custom-domain nodes must be gone (decompose TreeVerify first)."""
    if not needs_lowering(model) and not _narrow_inside(model):
        return model
    return _Lower(model).run()


def _elem(v: onnx.ValueInfoProto) -> int:
    return int(v.type.tensor_type.elem_type)


def _narrow_inside(model: onnx.ModelProto) -> bool:
    """A node making a narrow value from wider ones (a Cast to it, a narrow constant attribute)."""
    for node in model.graph.node:
        for a in node.attribute:
            if a.name == "to" and a.i in NARROW or a.type == onnx.AttributeProto.TENSOR and a.t.data_type in NARROW:
                return True
    return False


class _Lower:
    def __init__(self, model: onnx.ModelProto) -> None:
        self.src = model
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        g = inferred.graph
        self.types = {v.name: _elem(v) for v in (*g.input, *g.output, *g.value_info)}
        self.types.update({t.name: t.data_type for t in model.graph.initializer})
        self.inits = {t.name: t for t in model.graph.initializer}
        self.used = set(self.types) | {n.name for n in model.graph.node}
        self.nodes: list[onnx.NodeProto] = []
        self.rename: dict[str, str] = {}
        self.fp8: dict[str, str | None] = {}  # FP8 value -> the (lowered) scale it was quantized with, if known
        self.new_inits: list[onnx.TensorProto] = []

    def run(self) -> onnx.ModelProto:
        out = onnx.ModelProto()
        out.CopyFrom(self.src)
        g = out.graph
        for t in g.initializer:
            if t.data_type in NARROW:
                self.rename[t.name] = self.emit("Cast", [t.name], f"{t.name}/f32", to=F32)
        for vi in g.input:
            if _elem(vi) in NARROW:
                vi.type.tensor_type.elem_type = F32
                self.rename[vi.name] = self.round(vi.name, self.types[vi.name], f"{vi.name}/rounded")
            elif _elem(vi) == FP8:
                vi.type.tensor_type.elem_type = F32
                self.fp8[vi.name] = None
        for node in self.src.graph.node:
            self.node(node)
        g.initializer.extend(self.new_inits)
        for vi in g.output:
            if _elem(vi) in NARROW or _elem(vi) == FP8:
                vi.type.tensor_type.elem_type = F32
        del g.node[:]
        g.node.extend(self.nodes)
        del g.value_info[:]
        return out

    # -- helpers ---------------------------------------------------------------------------------

    def fresh(self, base: str) -> str:
        name, n = base, 0
        while name in self.used:
            n += 1
            name = f"{base}_{n}"
        self.used.add(name)
        return name

    def emit(self, op: str, inputs: list[str], out: str, fresh: bool = True, **attrs: Any) -> str:
        name = self.fresh(out) if fresh else out
        self.nodes.append(helper.make_node(op, inputs, [name], name=self.fresh(f"{name}/node"), **attrs))
        return name

    def round(self, value: str, to: int, out: str, fresh: bool = True) -> str:
        """Cast(to `to`) → Cast(to float32): `value` rounded to the narrow type, as float32."""
        narrow = self.emit("Cast", [value], f"{out}/{TensorProto.DataType.Name(to).lower()}", to=to)
        return self.emit("Cast", [narrow], out, fresh=fresh, to=F32)

    def fail(self, node: onnx.NodeProto, why: str) -> LoweringError:
        return LoweringError(f"cannot lower node {node.name!r} ({node.op_type}): {why}")

    # -- per node --------------------------------------------------------------------------------

    def node(self, node: onnx.NodeProto) -> None:
        ins = [self.rename.get(i, i) if i else "" for i in node.input]
        fp8_in = [i for i in node.input if i in self.fp8]
        if node.domain not in ("", "ai.onnx"):
            if fp8_in or any(self.types.get(v) in NARROW for v in (*node.input, *node.output)):
                raise self.fail(node, "custom-domain node on narrow / FP8 values")
            self.nodes.append(_copy(node, ins))
        elif node.op_type == "Cast":
            self.cast(node, ins)
        elif node.op_type == "QuantizeLinear":
            self.quantize(node, ins)
        elif node.op_type == "DequantizeLinear":
            self.dequantize(node, ins)
        elif fp8_in:
            self.move(node, ins, fp8_in)
        elif node.op_type == "RMSNormalization" and self.types[node.output[0]] in NARROW:
            self.rms_norm(node, ins)
        else:
            self.generic(node, ins)

    def generic(self, node: onnx.NodeProto, ins: list[str]) -> None:
        narrow = [o for o in node.output if o and self.types.get(o) in NARROW]
        raw = {o: self.fresh(f"{o}/f32raw") for o in narrow}
        new = _copy(node, ins, [raw.get(o, o) for o in node.output])
        for a in new.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type in NARROW:
                a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float32), a.t.name))
            elif a.name in ("to", "dtype", "output_dtype") and a.i in (*NARROW, FP8):
                raise self.fail(node, f"attribute {a.name} asks for a narrow / FP8 type")
        self.nodes.append(new)
        for o in narrow:
            self.round(raw[o], self.types[o], o, fresh=False)

    def cast(self, node: onnx.NodeProto, ins: list[str]) -> None:
        to, src = next(a.i for a in node.attribute if a.name == "to"), self.types.get(node.input[0])
        if to == FP8 or src == FP8:
            raise self.fail(node, "Cast to / from FP8")
        if to in NARROW:
            self.round(ins[0], to, node.output[0], fresh=False)
        elif src in NARROW and to == F32:
            self.emit("Identity", [ins[0]], node.output[0], fresh=False)
        else:
            self.nodes.append(_copy(node, ins))

    def quantize(self, node: onnx.NodeProto, ins: list[str]) -> None:
        """Q → DQ in float32: the FP8 value as its dequantization (code · scale)."""
        codes = self.fresh(f"{node.output[0]}/codes")
        self.nodes.append(_copy(node, ins, [codes]))
        keep = {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name in ("axis", "block_size")}
        self.nodes.append(
            helper.make_node(
                "DequantizeLinear", [codes, *ins[1:3]], [node.output[0]], name=self.fresh(f"{node.name}/dq"), **keep
            )
        )
        self.fp8[node.output[0]] = ins[1]

    def dequantize(self, node: onnx.NodeProto, ins: list[str]) -> None:
        x, out, to = node.input[0], node.output[0], self.types[node.output[0]]
        if x in self.fp8:  # already the dequantized value: round it to the output type
            if self.fp8[x] not in (None, ins[1]):
                raise self.fail(node, f"dequantizes {x!r} with scale {ins[1]!r}, quantized with {self.fp8[x]!r}")
            if to in NARROW:
                self.round(ins[0], to, out, fresh=False)
            else:
                self.emit("Identity", [ins[0]], out, fresh=False)
            return
        if x not in self.inits or self.inits[x].data_type != FP8:
            self.generic(node, ins)  # a float32 graph's own Q/DQ (CPU form)
            return
        if len(ins) > 2 and ins[2] and np.any(numpy_helper.to_array(self.inits[node.input[2]]).astype(np.float32)):
            raise self.fail(node, "a non-zero FP8 zero point")
        scale = ins[1]
        axis, rank = next((a.i for a in node.attribute if a.name == "axis"), 1), len(self.inits[x].dims)
        if len(self.inits[node.input[1]].dims) == 1 and axis % rank != rank - 1:
            axes = [i for i in range(rank) if i != axis % rank]
            scale = self.emit("Unsqueeze", [scale, self._const(axes)], f"{out}/scale")
        codes = self.emit("Cast", [x], f"{out}/codes", to=F32)  # exact
        raw = self.emit("Mul", [codes, scale], f"{out}/f32raw")  # folded at session creation
        if to in NARROW:
            self.round(raw, to, out, fresh=False)
        else:
            self.emit("Identity", [raw], out, fresh=False)

    def move(self, node: onnx.NodeProto, ins: list[str], fp8_in: list[str]) -> None:
        if node.op_type not in MOVES:
            raise self.fail(node, f"{node.op_type} reads an FP8 value (only {', '.join(MOVES)} move FP8 codes)")
        scales = {self.fp8[i] for i in fp8_in} - {None}
        if len(scales) > 1:
            raise self.fail(node, f"joins FP8 values of different scales {sorted(scales)}")  # type: ignore[type-var]
        self.nodes.append(_copy(node, ins))
        for o in node.output:
            if o:
                self.fp8[o] = next(iter(scales), None)

    def rms_norm(self, node: onnx.NodeProto, ins: list[str]) -> None:
        """RMSNormalization-23's two roundings: normalized → narrow, then · weight → narrow."""
        to, out = self.types[node.output[0]], node.output[0]
        width = next(d.dim_value for d in reversed(self._dims(node.input[1])))
        ones = self._const(np.ones(width, np.float32))
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        normed = self.fresh(f"{out}/normed")
        self.nodes.append(
            helper.make_node("RMSNormalization", [ins[0], ones], [normed], name=self.fresh(node.name), **attrs)
        )
        scaled = self.emit("Mul", [self.round(normed, to, f"{out}/normed_rounded"), ins[1]], f"{out}/f32raw")
        self.round(scaled, to, out, fresh=False)

    def _dims(self, name: str) -> list[onnx.TensorShapeProto.Dimension]:
        if name in self.inits:
            return [onnx.TensorShapeProto.Dimension(dim_value=d) for d in self.inits[name].dims]
        raise LoweringError(f"RMSNormalization weight {name!r} is not an initializer")

    def _const(self, value: object) -> str:
        arr = np.asarray(value, dtype=np.int64 if isinstance(value, list) else None)
        name = self.fresh("lower_const")
        self.new_inits.append(numpy_helper.from_array(arr, name))
        return name


def _copy(node: onnx.NodeProto, ins: list[str], outs: list[str] | None = None) -> onnx.NodeProto:
    new = onnx.NodeProto()
    new.CopyFrom(node)
    del new.input[:]
    new.input.extend(ins)
    if outs is not None:
        del new.output[:]
        new.output.extend(outs)
    return new
