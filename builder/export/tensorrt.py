"""The TensorRT form of the `standard` canonical graphs: a rewrite into what TensorRT's ONNX parser takes.

TensorRT ≥ 10.15 reaches its native attention, rotary-embedding and KV-cache-update layers through the
nodes NVIDIA's own exporter emits (TensorRT Edge-LLM, `tensorrt_edgellm/onnx/dynamo_translations.py`:
`_attention_onnx_translation`, `_rope_onnx_translation`, `_kv_cache_update_onnx_translation`; their
schemas in `onnx_custom_schemas.py`). `to_tensorrt(model)` maps the canonical graph's standard ops onto
them and leaves every other node as it is (FP8 QuantizeLinear / DequantizeLinear included):

    RotaryEmbedding(x, cos, sin, position_ids)      → trt::RotaryEmbedding(x, cos, sin, position_ids)
                                                       (no attributes; position ids INT64, as TensorRT documents:
                                                       `trt_schemas`; cast to INT64 only where they are not)
    TensorScatter(cache, new, write_at, axis=2)     → trt::TensorScatter(cache, new, write_at)
                                                       (no attributes: writes along axis 2 = -2 of [B, KV, CAP, D];
                                                       write indices INT64 (TensorScatter-24's type); TensorRT
                                                       updates the cache in place, so present_* must share
                                                       past_*'s memory, as the ORT engine binds them; float32 /
                                                       float16 / bfloat16 caches only: an FP8 one is refused)
    Attention(q, Slice(present_k, 0, S), Slice(present_v, 0, S), mask [B, 1, T, S] bool)
                                                    → trt::Attention(q, present_k, present_v, additive mask
                                                       [B, 1, T, CAP]) with is_causal=0, TRT_decomposable=1,
                                                       scale=1/√D (or the node's own scale)
    RMSNormalization(x, w, axis=-1, epsilon)        → Pow, ReduceMean, Add, Sqrt, Reciprocal, Mul, Mul (the
                                                       elementwise form Edge-LLM's RMSNorm module exports;
                                                       Edge-LLM notes TensorRT 10.13 has no RMSNormalization,
                                                       models/qwen3_omni/modeling_qwen3_omni_code2wav.py); in a
                                                       bfloat16 / float16 graph between Cast(to float32) and
                                                       Cast(back) before the weight, as stash_type=1 says
    Swish(x, alpha)                                 → Mul(x, Sigmoid(alpha·x))
    trtspec::TreeVerify                             kept; plugin_namespace / plugin_version ensured (the
                                                       parser's plugin fallback finds trtspec::TreeVerify)

Attention over the whole cache: the standard graph slices the cache to the batch's live prefix S =
max(write_at + num_new), a length computed from input *values*. TensorRT shapes may only follow from
shapes (or shape-tensor inputs), so the TensorRT form attends all CAP slots, like Edge-LLM's own
(`ActionAttention.forward` in models/alpamayo: the full cache and a 0 / -inf mask). The mask
subgraph (`builder.export.attention.attend_mask`) is reused: its Range over [0, S) becomes the constant
[0, CAP) (an initializer), so the same ops yield the [B, 1, T, CAP] mask; dead nodes (the Slices, S) are
pruned. The boolean mask becomes an additive float mask (0 attend, -inf not), the type Edge-LLM's
trt::Attention schema declares. Cost: a step reads CAP slots per row instead of S (measure on the GPU).
`num_nodes` (target) / `num_new` (EAGLE) stay graph inputs but are no longer read: they only sized S.

The `trt` domain: TensorRT's ONNX parser finds its importers by op type (onnx-tensorrt's
ModelImporter does not consult the domain), so trt::Attention reaches the same importer as Attention,
while onnx and ONNX Runtime do not mistake these nodes (Edge-LLM's attributes, the additive mask over the
whole cache) for the standard ops. `register_schemas()` declares them to onnx.checker, and
`operator_problems` checks every node against TensorRT 10.15's ONNX support matrix, index dtypes included
(`builder.export.trt_schemas`, which cites the documents). Index dtypes: TensorRT documents INT64 position
ids for RotaryEmbedding (onnx-tensorrt docs/operators.md: "`position_ids` must be INT64"; TensorRT's
operator reference: M = int64) and ONNX's TensorScatter-24 takes int64 write indices (TensorRT's
KVCacheUpdate layer: int32 or int64), so the canonical graph's int64 inputs pass through uncast. Edge-LLM's
own exporter casts both to int32 — against those documents; only a TensorRT host can settle it (build both).

The GPU form's dtypes (`builder.export.contract.Precision`) pass through: a bfloat16 / float16 graph gives
an additive mask of that dtype (the trt::Attention schema's T), the Attention's softmax_precision=FLOAT is
dropped (TensorRT's attention layer normalizes in float32 — to be confirmed on a GPU host). An FP8 KV cache
has no TensorRT form: TensorRT's KV-cache update takes float32 / float16 / bfloat16 caches only (TensorRT
operator reference, KVCacheUpdate; onnx-tensorrt's TensorScatter row), so a TensorScatter into a
FLOAT8E4M3FN cache is refused here as `validate` refuses `quantization.kv_cache: fp8` on this backend
(TensorRT-LLM, `target.backend: trtllm`, keeps FP8 caches).

Refused with a precise error: ONNX Runtime contrib ops (the `ort` variant), attention without a mask,
3-D attention inputs, interleaved / partial rotary, a scatter along another axis, an FP8 KV cache.

`write_tensorrt(folder, stem)` writes `{stem}.trt.onnx` beside `{stem}.onnx`, sharing its weights file, once
onnx.checker and the support-matrix check pass;
`write_tensorrt_graphs(export_dir, variant)` does it for every graph the export stage wrote.
"""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from builder.errors import UserError
from builder.export.graph import prune, save_sharing_data
from builder.export.trt_schemas import TRT_DOMAIN, TRT_OPSET, check, operator_problems
from plugins.tree_verify import onnx_op
from plugins.tree_verify.contract import DOMAIN as PLUGIN_DOMAIN
from plugins.tree_verify.contract import OP_TYPE as PLUGIN_OP
from plugins.tree_verify.contract import OP_VERSION as PLUGIN_VERSION

NATIVE = ("Attention", "RotaryEmbedding", "TensorScatter")  # standard ops with a trt:: twin
CONTRIB_DOMAINS = ("com.microsoft",)  # ONNX Runtime-only ops TensorRT cannot parse
TRANSPARENT = ("Cast", "Identity", "QuantizeLinear", "DequantizeLinear")  # passed over when tracing K / V
GRAPHS = (
    ("greedy", "target-greedy", "target"),
    ("rejection", "target-rejection", "target"),
    ("eagle", "eagle", "eagle"),
)


def to_tensorrt(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of the canonical `standard` graph in TensorRT's form (see the module docstring)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    _Rewrite(out).run()
    return out


def _attr(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


FP8_TYPES = (TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2, TensorProto.FLOAT8E5M2FNUZ)


def _refuse(node: onnx.NodeProto, why: str) -> UserError:
    return UserError(
        f"TensorRT rewrite: node {node.name!r} ({node.op_type}): {why}", field="export.variant", allowed="standard"
    )


class _Rewrite:
    """One pass over the graph: emits the new node list, new constants, and the opset import."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model, self.g = model, model.graph
        self.producer = {o: n for n in self.g.node for o in n.output if o}
        self.graph_inputs = {v.name: v for v in self.g.input}
        self.used = {n.name for n in self.g.node} | set(self.producer) | set(self.graph_inputs)
        self.used |= {t.name for t in self.g.initializer}
        self.nodes: list[onnx.NodeProto] = []
        self.consts: dict[tuple[Any, ...], str] = {}
        self.memo: dict[tuple[str, str], str] = {}  # (kind, source value) -> emitted value
        self.rename: dict[str, str] = {}  # bypassed Slice outputs -> the full cache
        self.limits: dict[str, int] = {}  # Range node name -> CAP
        self.types = _value_types(model)  # value -> ONNX element type (where inference knows it)

    def run(self) -> None:
        for node in self.g.node:
            if node.domain in CONTRIB_DOMAINS:
                raise _refuse(node, f"{node.domain} ops are ONNX Runtime-only; export the `standard` variant")
        for node in self.g.node:
            self._one(node)
        kept = []
        for node in self.nodes:
            for i, name in enumerate(node.input):
                node.input[i] = self.rename.get(name, name)
            if node.op_type == "Range" and node.name in self.limits:
                self._slots(node, self.limits[node.name])
            else:
                kept.append(node)
        del self.g.node[:]
        self.g.node.extend(kept)
        if not any(o.domain == TRT_DOMAIN for o in self.model.opset_import):
            self.model.opset_import.append(helper.make_opsetid(TRT_DOMAIN, TRT_OPSET))
        prune(self.model)
        left = [n.name for n in self.g.node if n.domain in ("", "ai.onnx") and n.op_type in NATIVE]
        if left:
            raise ValueError(f"TensorRT rewrite left standard nodes behind: {left}")

    # -- helpers ---------------------------------------------------------------------------------

    def fresh(self, base: str) -> str:
        name, n = base, 0
        while name in self.used:
            n += 1
            name = f"{base}_{n}"
        self.used.add(name)
        return name

    def const(self, value: object, dtype: Any) -> str:
        arr = np.asarray(value, dtype=dtype)
        key = (arr.dtype.name, arr.shape, arr.tobytes())
        if key not in self.consts:
            name = self.fresh("trt_const")
            self.g.initializer.append(numpy_helper.from_array(arr, name))
            self.consts[key] = name
        return self.consts[key]

    def emit(
        self,
        op: str,
        inputs: Iterable[str],
        base: str,
        out: str | None = None,
        domain: str = "",
        replaces: bool = False,
        **attrs: Any,
    ) -> str:
        """Append a node; `replaces`: it takes the name of the node it replaces (`base`)."""
        name = base if replaces else self.fresh(base)
        output = out or name
        self.nodes.append(helper.make_node(op, list(inputs), [output], name=name, domain=domain or None, **attrs))
        return output

    def as_int64(self, value: str) -> str:
        """`value` as INT64 (the index dtype TensorRT documents): itself when it is, else one Cast (memoized)."""
        if self.types.get(value) == TensorProto.INT64:
            return value
        key = ("int64", value)
        if key not in self.memo:
            self.memo[key] = self.emit("Cast", [value], f"{value}/int64", to=TensorProto.INT64)
        return self.memo[key]

    # -- per node --------------------------------------------------------------------------------

    def _one(self, node: onnx.NodeProto) -> None:
        standard = node.domain in ("", "ai.onnx")
        handler = (
            {
                "Attention": self._attention,
                "RotaryEmbedding": self._rotary,
                "TensorScatter": self._scatter,
                "RMSNormalization": self._rms_norm,
                "Swish": self._swish,
            }.get(node.op_type)
            if standard
            else None
        )
        if handler is not None:
            handler(node)
        elif node.domain == PLUGIN_DOMAIN and node.op_type == PLUGIN_OP:
            self.nodes.append(_with_plugin_attrs(node))
        else:
            self.nodes.append(node)

    def _rotary(self, node: onnx.NodeProto) -> None:
        if len(node.input) < 4 or not node.input[3]:
            raise _refuse(node, "trt::RotaryEmbedding takes explicit position_ids")
        if _attr(node, "interleaved", 0) or _attr(node, "rotary_embedding_dim", 0) or _attr(node, "num_heads"):
            raise _refuse(node, "only full, non-interleaved rotary on 4-D [B, heads, T, D] inputs maps to TensorRT")
        x, cos, sin, pos = node.input[:4]
        self.emit(
            "RotaryEmbedding",
            [x, cos, sin, self.as_int64(pos)],
            node.name,
            node.output[0],
            domain=TRT_DOMAIN,
            replaces=True,
        )

    def _scatter(self, node: onnx.NodeProto) -> None:
        if len(node.input) < 3 or not node.input[2]:
            raise _refuse(node, "trt::TensorScatter takes explicit write indices")
        if _attr(node, "axis", -2) not in (2, -2) or _attr(node, "mode", b"linear") not in (b"linear", "linear"):
            raise _refuse(node, "only a linear write along axis 2 of [B, KV, CAP, D] maps to TensorRT")
        cache, new, at = node.input[:3]
        if self.types.get(cache) in FP8_TYPES:
            raise UserError(
                f"TensorRT rewrite: node {node.name!r} writes an FP8 KV cache ({cache!r}); TensorRT's "
                "KV-cache update takes float32/float16/bfloat16 caches only",
                field="quantization.kv_cache",
                allowed="model_dtype, or target.backend: trtllm",
            )
        self.emit(
            "TensorScatter",
            [cache, new, self.as_int64(at)],
            node.name,
            node.output[0],
            domain=TRT_DOMAIN,
            replaces=True,
        )

    def _attention(self, node: onnx.NodeProto) -> None:
        if len(node.input) < 4 or not node.input[3] or any(node.input[4:]) or len(node.output) > 1:
            raise _refuse(node, "expects (q, k, v, mask) with a boolean mask and one output")
        known = {"scale", "is_causal", "softcap", "qk_matmul_output_mode", "softmax_precision"}
        unknown = {a.name for a in node.attribute} - known
        if (
            unknown
            or _attr(node, "is_causal", 0)
            or _attr(node, "softcap", 0.0)
            or _attr(node, "qk_matmul_output_mode", 0)
        ):
            raise _refuse(node, "only 4-D, non-causal attention with a mask (no softcap) maps to TensorRT")
        if _attr(node, "softmax_precision", TensorProto.FLOAT) != TensorProto.FLOAT:
            raise _refuse(node, "TensorRT's attention normalizes in float32: softmax_precision must be FLOAT")
        q, k, v, mask = node.input[:4]
        cap_k, head_dim = self._bypass_live_slice(node, k)
        cap_v, _ = self._bypass_live_slice(node, v)
        if cap_k != cap_v:
            raise _refuse(node, f"key and value caches differ in capacity ({cap_k} vs {cap_v})")
        scale = _attr(node, "scale")
        self.emit(
            "Attention",
            [q, k, v, self._full_mask(node, mask, cap_k, self.types.get(q, TensorProto.FLOAT))],
            node.name,
            node.output[0],
            domain=TRT_DOMAIN,
            replaces=True,
            is_causal=0,
            TRT_decomposable=1,
            scale=float(scale) if scale is not None else 1.0 / math.sqrt(head_dim),
        )

    def _bypass_live_slice(self, node: onnx.NodeProto, value: str) -> tuple[int, int]:
        """Find Slice(cache, [0], S, [2]) above `value` (through Cast / Identity / Q / DQ, on either side of
        the Slice) with `cache` a TensorScatter output; reroute its uses to the cache (or to the DQ of the
        cache). Returns (CAP, D) of that cache."""
        cur = self.producer.get(value)
        while cur is not None and cur.op_type in TRANSPARENT:
            cur = self.producer.get(cur.input[0])
        if cur is None or cur.op_type != "Slice":
            raise _refuse(node, f"input {value!r} is not a Slice of a TensorScatter's cache")
        data = self.producer.get(cur.input[0])
        while data is not None and data.op_type in TRANSPARENT:
            data = self.producer.get(data.input[0])
        if data is None or data.op_type != "TensorScatter" or data.domain not in ("", "ai.onnx"):
            raise _refuse(node, f"{cur.name!r} does not slice a TensorScatter output")
        if not (
            len(cur.input) in (4, 5)
            and self._int_const(cur.input[1]) == [0]
            and self._int_const(cur.input[3]) == [2]
            and (len(cur.input) == 4 or self._int_const(cur.input[4]) == [1])
        ):
            raise _refuse(node, f"{cur.name!r} is not Slice(cache, [0], S, axes=[2])")
        self.rename[cur.output[0]] = cur.input[0]
        return self._cache_dims(node, data.input[0])

    def _cache_dims(self, node: onnx.NodeProto, cache: str) -> tuple[int, int]:
        vi = self.graph_inputs.get(cache)
        dims = [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim] if vi else []
        if len(dims) != 4 or dims[2] is None or dims[3] is None:
            raise _refuse(node, f"cache {cache!r} must be a graph input [B, KV, CAP, D] with static CAP and D")
        return int(dims[2]), int(dims[3])

    def _int_const(self, name: str) -> list[int] | None:
        init = next((t for t in self.g.initializer if t.name == name), None)
        return None if init is None else [int(v) for v in numpy_helper.to_array(init).reshape(-1)]

    def _full_mask(self, node: onnx.NodeProto, mask: str, cap: int, elem: int) -> str:
        """The additive mask [B, 1, T, CAP] of element type `elem` (memoized): the mask subgraph's Range
        gets CAP as its limit."""
        key = ("mask", f"{mask}/{elem}")
        if key in self.memo:
            return self.memo[key]
        ranges = [n for n in self._ancestors(mask) if n.op_type == "Range"]
        if len(ranges) != 1:
            raise _refuse(
                node, f"the mask {mask!r} should come from one Range over the cache slots, found {len(ranges)}"
            )
        if self.limits.setdefault(ranges[0].name, cap) != cap:
            raise _refuse(node, "one mask serves caches of different capacities")
        t = helper.tensor_dtype_to_np_dtype(elem)
        zero, ninf = self.const(0.0, t), self.const(-np.inf, t)
        self.memo[key] = self.emit("Where", [mask, zero, ninf], f"{mask}/additive")  # [B, 1, T, CAP] in q's dtype
        return self.memo[key]

    def _slots(self, node: onnx.NodeProto, cap: int) -> None:
        """Replace the mask's Range(start, S, delta) by the constant Range(start, CAP, delta)."""
        start, delta = self._int_const(node.input[0]), self._int_const(node.input[2])
        if start is None or delta is None or len(start) != 1 or len(delta) != 1:
            raise _refuse(node, "the mask's Range needs constant start and delta")
        slots = np.arange(start[0], cap, delta[0], dtype=np.int64)  # [CAP]
        self.g.initializer.append(numpy_helper.from_array(slots, node.output[0]))

    def _ancestors(self, value: str) -> list[onnx.NodeProto]:
        seen: dict[str, onnx.NodeProto] = {}
        todo = [value]
        while todo:
            n = self.producer.get(todo.pop())
            if n is not None and n.name not in seen:
                seen[n.name] = n
                todo.extend(i for i in n.input if i)
        return list(seen.values())

    def _rms_norm(self, node: onnx.NodeProto) -> None:
        if _attr(node, "axis", -1) != -1 or len(node.input) != 2:
            raise _refuse(node, "only RMSNormalization(x, weight) over the last axis is decomposed")
        x, w = node.input
        eps, base = float(_attr(node, "epsilon", 1e-5)), node.name
        elem = self.types.get(x, TensorProto.FLOAT)
        narrow = elem != TensorProto.FLOAT  # stash_type=1: normalize in float32, cast back before the weight
        x32 = self.emit("Cast", [x], f"{base}/f32", to=TensorProto.FLOAT) if narrow else x
        sq = self.emit("Pow", [x32, self.const(2.0, np.float32)], f"{base}/pow")
        var = self.emit("ReduceMean", [sq, self.const([-1], np.int64)], f"{base}/mean", keepdims=1)  # [..., 1]
        std = self.emit(
            "Sqrt", [self.emit("Add", [var, self.const(eps, np.float32)], f"{base}/add_eps")], f"{base}/sqrt"
        )
        normed = self.emit("Mul", [x32, self.emit("Reciprocal", [std], f"{base}/rsqrt")], f"{base}/normed")
        if narrow:
            normed = self.emit("Cast", [normed], f"{base}/normed_cast", to=elem)
        self.emit("Mul", [normed, w], f"{base}/scale", node.output[0])

    def _swish(self, node: onnx.NodeProto) -> None:
        x, alpha, base = node.input[0], float(_attr(node, "alpha", 1.0)), node.name
        t = helper.tensor_dtype_to_np_dtype(self.types.get(x, TensorProto.FLOAT))
        z = x if alpha == 1.0 else self.emit("Mul", [x, self.const(alpha, t)], f"{base}/alpha")
        self.emit("Mul", [x, self.emit("Sigmoid", [z], f"{base}/sigmoid")], f"{base}/mul", node.output[0])


def _value_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element types of the graph's values as ONNX shape inference finds them (custom ops' outputs may be
    missing: callers default to float32, the type of every float value of the CPU form)."""
    onnx_op.register_schema()
    g = onnx.shape_inference.infer_shapes(model).graph
    types = {v.name: int(v.type.tensor_type.elem_type) for v in (*g.input, *g.output, *g.value_info)}
    types.update({t.name: int(t.data_type) for t in model.graph.initializer})
    return {k: v for k, v in types.items() if v != TensorProto.UNDEFINED}


def _with_plugin_attrs(node: onnx.NodeProto) -> onnx.NodeProto:
    """The TreeVerify node with TensorRT's plugin attributes (added where an older export lacks them)."""
    have = {a.name for a in node.attribute}
    extra = {"plugin_namespace": PLUGIN_DOMAIN, "plugin_version": str(PLUGIN_VERSION)}
    node.attribute.extend(helper.make_attribute(k, v) for k, v in extra.items() if k not in have)
    return node


# -- files ---------------------------------------------------------------------------------------------


def write_tensorrt(src_dir: Path, stem: str, dst_dir: Path | None = None) -> Path:
    """Rewrite `src_dir/{stem}.onnx` into `{stem}.trt.onnx` in `dst_dir` (default: beside it), sharing the
    weights file (hard-linked, else copied, into `dst_dir` when that is another folder). Returns the path."""
    src_dir = Path(src_dir)
    dst_dir = Path(dst_dir or src_dir)
    model = onnx.load(str(src_dir / f"{stem}.onnx"), load_external_data=False)
    trt_model = to_tensorrt(model)
    if dst_dir.resolve() != src_dir.resolve():
        dst_dir.mkdir(parents=True, exist_ok=True)
        for location in _external_files(trt_model):
            _link(src_dir / location, dst_dir / location)
    check(trt_model)
    problems = operator_problems(trt_model)
    if problems:  # an exporter bug, not a user error: every graph the export stage writes must pass
        more = f"; … {len(problems) - 10} more" if len(problems) > 10 else ""
        raise ValueError(
            f"{src_dir / stem}.onnx: the TensorRT form departs from TensorRT's documented operator "
            f"support: {'; '.join(problems[:10])}{more}"
        )
    path = dst_dir / f"{stem}.trt.onnx"
    save_sharing_data(trt_model, path)
    return path


def write_tensorrt_graphs(
    export_dir: Path, variant: str, say: Callable[[str], None] = lambda _m: None
) -> dict[str, str]:
    """`{stem}.trt.onnx` beside every graph of an export folder; returns {"greedy" | "rejection" | "eagle":
    path relative to `export_dir`}."""
    if variant != "standard":
        raise UserError(
            f"the TensorRT graphs are rewritten from the `standard` variant, not {variant!r} (unset "
            "TRTSPEC_ORT_VARIANT for GPU targets)",
            field="variant",
            allowed="standard",
        )
    files = {}
    for key, folder, stem in GRAPHS:
        if (Path(export_dir) / folder / f"{stem}.onnx").is_file():
            say(f"rewriting {folder} for TensorRT")
            files[key] = str(write_tensorrt(Path(export_dir) / folder, stem).relative_to(export_dir))
    return files


def _external_files(model: onnx.ModelProto) -> set[str]:
    return {e.value for t in model.graph.initializer for e in t.external_data if e.key == "location"}


def _link(src: Path, dst: Path) -> None:
    if dst.exists():
        return
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
