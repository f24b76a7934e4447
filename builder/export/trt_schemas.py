"""The `trt` ONNX domain of the TensorRT form (`builder.export.tensorrt`) and what TensorRT documents it takes.

* `register_schemas()`: schemas for trt::Attention / RotaryEmbedding / TensorScatter (signatures as TensorRT
  Edge-LLM's `tensorrt_edgellm/onnx/onnx_custom_schemas.py`, types as TensorRT documents them: below), each with
  a type inference (output type = input 0's), so onnx.checker and shape inference go through the TensorRT form.
* `check(model)`: onnx.checker (full) on the TensorRT form.
* `OPERATOR_TYPES` / `operator_problems(model)`: TensorRT's ONNX parser's support matrix as data, and every
  node of a TensorRT-form graph checked against it — operator, the types of its data inputs, and the dtype
  of each index input. The nearest thing to running the parser that a machine without TensorRT allows.

Sources (TensorRT 10.15, the release `builder.engines.tensorrt.probe` requires):
- onnx/onnx-tensorrt `docs/operators.md` of the 10.15 release ("TensorRT 10.15 supports operators in the
  inclusive range of opset 9 to opset 24"): the "Supported Types" column, and its restrictions
  "RotaryEmbedding | FP32, FP16, BF16 | `position_ids` must be INT64" and "TensorScatter | FP32, FP16, BF16,
  INT32 | `past_cache` and `update` must be 4D. `axis` must be -2".
- TensorRT's operator reference (docs.nvidia.com/deeplearning/tensorrt, operators/RotaryEmbedding.html and
  KVCacheUpdate.html): RotaryEmbedding positionIds "M: int64"; KVCacheUpdate cache "T: float32, float16,
  bfloat16", writeIndices "M: int32, int64" — no FP8 cache.
- ONNX's own schemas for what the table leaves to them: TensorScatter-24 write_indices tensor(int64);
  Gather* indices int32 | int64; the shape / axes / K inputs of Reshape, Expand, Unsqueeze, ReduceMean,
  Split, TopK, ConstantOfShape: int64.
TensorRT Edge-LLM's exporter writes int32 position ids and cache indices (`_rope_onnx_translation`,
`_kv_cache_update_onnx_translation` in tensorrt_edgellm/onnx/dynamo_translations.py) — against these
documents; we follow the documents (int64); only a TensorRT host can settle it (build both forms).
"""

from __future__ import annotations

from typing import Any, Iterable

import onnx
from onnx import TensorProto, helper

from plugins.tree_verify import onnx_op
from plugins.tree_verify.contract import DOMAIN as PLUGIN_DOMAIN
from plugins.tree_verify.contract import INPUTS as PLUGIN_INPUTS
from plugins.tree_verify.contract import OP_TYPE as PLUGIN_OP

TRT_DOMAIN = "trt"  # Edge-LLM: onnxscript.values.Opset("trt", 1)
TRT_OPSET = 1
FLOATS = ("tensor(float)", "tensor(float16)", "tensor(bfloat16)")


def _same_as_input0(ctx: Any) -> None:
    ctx.set_output_type(0, ctx.get_input_type(0))  # RoPE: x; the scatter: the cache; attention: q [B, H, T, D]


def register_schemas() -> None:
    """Schemas for trt::Attention / RotaryEmbedding / TensorScatter and trtspec::TreeVerify, so onnx.checker
    and shape inference can check the TensorRT form; idempotent."""
    onnx_op.register_schema()
    io, attr, kind = onnx.defs.OpSchema.FormalParameter, onnx.defs.OpSchema.Attribute, onnx.defs.OpSchema.AttrType
    optional = onnx.defs.OpSchema.FormalParameterOption.Optional
    specs = {
        "RotaryEmbedding": (
            [
                io("x", "T", "[B, heads, T, D]"),
                io("cos", "T", "[CAP, D/2]"),
                io("sin", "T", "[CAP, D/2]"),
                io("position_ids", "tensor(int64)", "[B, T] (onnx-tensorrt: must be INT64)"),
            ],
            [],
        ),
        "TensorScatter": (
            [
                io("cache", "T", "[B, KV, CAP, D]"),
                io("new_kv", "T", "[B, KV, T, D]"),
                io("cache_indices", "tensor(int64)", "[B] write offset (TensorScatter-24: int64)"),
            ],
            [],
        ),
        "Attention": (
            [
                io("query", "T", "[B, H, T, D]"),
                io("key", "T", "[B, KV, S, D]"),
                io("value", "T", "[B, KV, S, D]"),
                io("attn_mask", "T", "additive [B, 1, T, S]", param_option=optional),
            ],
            [
                attr("is_causal", kind.INT, "0 / 1", required=False),
                attr("TRT_decomposable", kind.INT, "1: TensorRT may decompose", required=False),
                attr("scale", kind.FLOAT, "multiplier of QK^T", required=False),
            ],
        ),
    }
    for op, (inputs, attrs) in specs.items():
        if not onnx.defs.has(op, TRT_DOMAIN):
            schema = onnx.defs.OpSchema(
                op,
                TRT_DOMAIN,
                TRT_OPSET,
                f"TensorRT native {op} (TensorRT >= 10.15)",
                inputs=inputs,
                outputs=[io("output", "T", "")],
                type_constraints=[("T", list(FLOATS), "float32 / float16 / bfloat16")],
                attributes=attrs,
            )
            schema.set_type_and_shape_inference_function(_same_as_input0)
            onnx.defs.register_schema(schema)


def check(model: onnx.ModelProto) -> None:
    """onnx.checker (full check) with the trt:: and trtspec:: schemas registered, in memory, without reading
    the weights: initializers stored in a weights file are declared as graph inputs of the same type and
    shape for the check (the checker would otherwise look for the file relative to the working directory,
    and refuses a hard-linked one)."""
    onnx.checker.check_model(_without_external_data(model), full_check=True)


def _without_external_data(model: onnx.ModelProto) -> onnx.ModelProto:
    register_schemas()
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    g = probe.graph
    external = [t for t in g.initializer if t.data_location == TensorProto.EXTERNAL]
    g.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in external)
    kept = [t for t in g.initializer if t.data_location != TensorProto.EXTERNAL]
    del g.initializer[:]
    g.initializer.extend(kept)
    return probe


# -- TensorRT 10.15's ONNX support matrix, as data (module docstring) -----------------------------------------

_ALL = "FP32 FP16 BF16 INT32 INT64 BOOL"
_NUM = "FP32 FP16 BF16 INT32 INT64"
_FLT = "FP32 FP16 BF16"
# "Supported Types" of onnx-tensorrt docs/operators.md (10.15) for every operator a TensorRT form may hold
OPERATOR_TYPES: dict[str, str] = {
    "Add": _NUM,
    "And": "BOOL",
    "ArgMax": _NUM,
    "Attention": "FP32 FP16 BF16 INT8 FP8",
    "Cast": "FP32 FP16 BF16 INT32 INT64 UINT8 BOOL",
    "Concat": _ALL,
    "ConstantOfShape": "FP32 FP16 BF16 FP8 FP4 INT4 INT32 INT64 BOOL",
    "CumSum": _FLT,
    "DequantizeLinear": "INT8 FP8 FP4 INT4",
    "Div": _NUM,
    "Equal": _NUM,
    "Exp": _FLT,
    "Expand": _ALL,
    "Gather": _ALL,
    "GatherElements": _ALL,
    "GatherND": _ALL,
    "Gemm": _FLT,
    "Greater": _NUM,
    "GreaterOrEqual": _NUM,
    "Identity": _ALL,
    "Less": _NUM,
    "LessOrEqual": _NUM,
    "Log": _FLT,
    "LogSoftmax": _FLT,
    "MatMul": _FLT,
    "Max": _NUM,
    "Min": _NUM,
    "Mul": _NUM,
    "Neg": _NUM,
    "Not": "BOOL",
    "Or": "BOOL",
    "Pow": _NUM,
    "QuantizeLinear": _FLT,
    "Range": _NUM,
    "Reciprocal": _FLT,
    "ReduceMax": _NUM,
    "ReduceMean": _NUM,
    "ReduceSum": _NUM,
    "Reshape": _ALL,
    "RotaryEmbedding": _FLT,
    "Shape": _ALL,
    "Sigmoid": _FLT,
    "Slice": _ALL,
    "Softmax": _FLT,
    "Split": _ALL,
    "Sqrt": _FLT,
    "Squeeze": _ALL,
    "Sub": _NUM,
    "TensorScatter": "FP32 FP16 BF16 INT32",
    "Tile": _ALL,
    "TopK": _NUM,
    "Transpose": _ALL,
    "Unsqueeze": _ALL,
    "Where": _ALL,
}
# inputs the column does not speak of, and the dtypes documented for them (an absent op: all inputs are data)
_I64, _IND = ("INT64",), ("INT32", "INT64")
INDEX_INPUTS: dict[str, dict[int, tuple[str, ...]]] = {
    "RotaryEmbedding": {3: _I64},  # onnx-tensorrt: "`position_ids` must be INT64"; TensorRT: M = int64
    "TensorScatter": {2: _I64},  # ONNX TensorScatter-24 write_indices: int64 (TensorRT KVCacheUpdate: int32 | int64)
    "Gather": {1: _IND},
    "GatherElements": {1: _IND},
    "GatherND": {1: _I64},
    "Reshape": {1: _I64},
    "Expand": {1: _I64},
    "Unsqueeze": {1: _I64},
    "Squeeze": {1: _I64},
    "Tile": {1: _I64},
    "ReduceMean": {1: _I64},
    "ReduceMax": {1: _I64},
    "ReduceSum": {1: _I64},
    "Split": {1: _I64},
    "TopK": {1: _I64},
    "Slice": {1: _IND, 2: _IND, 3: _IND, 4: _IND},
    "CumSum": {1: _IND},
    "ConstantOfShape": {0: _I64},
    "Where": {0: ("BOOL",)},
    "QuantizeLinear": {1: ("FP32", "FP16", "BF16"), 2: ("FP8", "INT8")},
    "DequantizeLinear": {1: ("FP32", "FP16", "BF16"), 2: ("FP8", "INT8")},
}
_CASTS_TO = {"Cast"}  # operators whose output type the column also bounds
_NAMES = {
    TensorProto.FLOAT: "FP32",
    TensorProto.FLOAT16: "FP16",
    TensorProto.BFLOAT16: "BF16",
    TensorProto.INT32: "INT32",
    TensorProto.INT64: "INT64",
    TensorProto.BOOL: "BOOL",
    TensorProto.UINT8: "UINT8",
    TensorProto.INT8: "INT8",
    TensorProto.FLOAT8E4M3FN: "FP8",
    TensorProto.INT4: "INT4",
    TensorProto.FLOAT4E2M1: "FP4",
}
_CONTRACT = {"float32": "FP32", "float16": "FP16", "bfloat16": "BF16", "int32": "INT32"}


def value_types(model: onnx.ModelProto) -> dict[str, str]:
    """Element type (the table's names: FP32, INT64, ...) of every value ONNX shape inference types in the
    TensorRT form (the trt:: schemas registered: inference goes through them)."""
    inferred = onnx.shape_inference.infer_shapes(_without_external_data(model)).graph
    values = (*inferred.input, *inferred.output, *inferred.value_info)
    types = {v.name: int(v.type.tensor_type.elem_type) for v in values}
    types.update({t.name: int(t.data_type) for t in model.graph.initializer})
    return {k: _NAMES.get(v, TensorProto.DataType.Name(v)) for k, v in types.items() if v != TensorProto.UNDEFINED}


def operator_problems(model: onnx.ModelProto) -> list[str]:
    """Every way a TensorRT-form graph departs from OPERATOR_TYPES / INDEX_INPUTS (module docstring); a value
    whose type inference cannot tell counts as a problem too (nothing goes unchecked silently)."""
    types = value_types(model)
    problems = []
    for node in model.graph.node:
        where = f"node {node.name!r} ({node.domain + '::' if node.domain else ''}{node.op_type})"
        if node.domain == PLUGIN_DOMAIN and node.op_type == PLUGIN_OP:  # our plugin: its I/O types are the contract's
            for name, spec in zip(node.input, PLUGIN_INPUTS):
                allowed = tuple(_CONTRACT[d] for d in spec.dtypes)
                problems += _mismatch(where, f"input {spec.name}", types.get(name), allowed)
            continue
        if node.domain not in ("", "ai.onnx", TRT_DOMAIN) or node.op_type not in OPERATOR_TYPES:
            problems.append(f"{where}: not in TensorRT 10.15's ONNX support matrix as we record it")
            continue
        column = tuple(OPERATOR_TYPES[node.op_type].split())
        index = INDEX_INPUTS.get(node.op_type, {})
        for i, name in enumerate(node.input):
            if name:
                problems += _mismatch(where, f"input {i} {name!r}", types.get(name), index.get(i, column))
        if node.op_type in _CASTS_TO:
            problems += _mismatch(where, f"output {node.output[0]!r}", types.get(node.output[0]), column)
    return problems


def _mismatch(where: str, what: str, have: str | None, allowed: Iterable[str]) -> list[str]:
    allowed = tuple(allowed)
    if have is None:
        return [f"{where}: {what}: type unknown (shape inference could not tell)"]
    return [] if have in allowed else [f"{where}: {what} is {have}; TensorRT documents {', '.join(allowed)}"]
