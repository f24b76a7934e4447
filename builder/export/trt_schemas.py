"""The `trt` ONNX domain of the TensorRT form (`builder.export.tensorrt`): schemas for trt::Attention /
RotaryEmbedding / TensorScatter (signatures as TensorRT Edge-LLM's `tensorrt_edgellm/onnx/onnx_custom_schemas.py`)
so onnx.checker can check the TensorRT form, and `check` itself.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from plugins.tree_verify import onnx_op

TRT_DOMAIN = "trt"  # Edge-LLM: onnxscript.values.Opset("trt", 1)
TRT_OPSET = 1


def register_schemas() -> None:
    """Schemas for trt::Attention / RotaryEmbedding / TensorScatter (signatures as Edge-LLM's
    onnx_custom_schemas.py) and trtspec::TreeVerify, so onnx.checker can check the TensorRT form; idempotent."""
    onnx_op.register_schema()
    io, attr, kind = onnx.defs.OpSchema.FormalParameter, onnx.defs.OpSchema.Attribute, onnx.defs.OpSchema.AttrType
    floats = [("T", ["tensor(float)", "tensor(float16)", "tensor(bfloat16)"], "activations")]
    caches = [("T", ["tensor(float)", "tensor(float16)", "tensor(bfloat16)", "tensor(float8e4m3fn)"], "cache")]
    optional = onnx.defs.OpSchema.FormalParameterOption.Optional
    specs = {
        "RotaryEmbedding": ([io("x", "T", "[B, heads, T, D]"), io("cos", "T", "[CAP, D/2]"), io("sin", "T", "[CAP, D/2]"),
                             io("position_ids", "tensor(int32)", "[B, T]")], []),
        "TensorScatter": ([io("cache", "T", "[B, KV, CAP, D]"), io("new_kv", "T", "[B, KV, T, D]"),
                           io("cache_indices", "tensor(int32)", "[B] write offset")], []),
        "Attention": ([io("query", "T", "[B, H, T, D]"), io("key", "T", "[B, KV, S, D]"), io("value", "T", "[B, KV, S, D]"),
                       io("attn_mask", "T", "additive [B, 1, T, S]", param_option=optional)],
                      [attr("is_causal", kind.INT, "0 / 1", required=False),
                       attr("TRT_decomposable", kind.INT, "1: TensorRT may decompose", required=False),
                       attr("scale", kind.FLOAT, "multiplier of QK^T", required=False)]),
    }  # fmt: skip
    for op, (inputs, attrs) in specs.items():
        if not onnx.defs.has(op, TRT_DOMAIN):
            onnx.defs.register_schema(onnx.defs.OpSchema(
                op, TRT_DOMAIN, TRT_OPSET, f"TensorRT native {op} (TensorRT >= 10.15)", inputs=inputs,
                outputs=[io("output", "T", "")], type_constraints=caches if op == "TensorScatter" else floats,
                attributes=attrs))  # fmt: skip


def check(model: onnx.ModelProto) -> None:
    """onnx.checker (full check) with the trt:: and trtspec:: schemas registered, in memory, without reading
    the weights: initializers stored in a weights file are declared as graph inputs of the same type and
    shape for the check (the checker would otherwise look for the file relative to the working directory,
    and refuses a hard-linked one)."""
    register_schemas()
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    g = probe.graph
    external = [t for t in g.initializer if t.data_location == TensorProto.EXTERNAL]
    g.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in external)
    kept = [t for t in g.initializer if t.data_location != TensorProto.EXTERNAL]
    del g.initializer[:]
    g.initializer.extend(kept)
    onnx.checker.check_model(probe, full_check=True)
