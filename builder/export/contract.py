"""The graph I/O contract, defined once as data: names, shapes (symbolic dims) and dtypes of the target step
graph and the EAGLE draft graph. The prose (what each tensor means) is `builder.export`'s docstring.

It generates
  * the exporters' graph inputs and outputs (`builder.export.target`, `builder.export.eagle`, through
    `builder.export.graph.Graph.declare`),
  * the ONNX Runtime bindings (`call_spec`: name -> (shape, NumPy dtype) for one call's sizes;
    `builder.engines.ort`),
  * the TensorRT optimization profiles (`profile_shapes`: (min, opt, max) per input from ranges of the
    dynamic dims; `builder.engines.tensorrt.profiles`).

Dims: dynamic B, T, Tv, P, W (target), F, U, R (EAGLE); fixed at export CAP, KV, D (caches), C (hidden), Hm
(Medusa heads), K (top-K). C is the width of the target's `hidden` and the draft's `hidden_in` / `hidden_out`: the
model's, or with EAGLE-3 the draft's (its fc folded into the target graph: `builder.export.target.Features`), so the
EAGLE contract serves EAGLE-1/2 and EAGLE-3 alike (`builder.export.eagle`, `builder.export.eagle3`).

Dtypes are kinds, resolved by a `Precision`:
  "act"  the activation dtype: float32 in the CPU form; the recipe's model.dtype (bfloat16 / float16) in the
         GPU form (`builder.export.tensorrt`);
  "kv"   the KV cache's storage dtype: `act`, or float8e4m3fn (one byte per element, scaled by the
         calibrated k/v scales) when the GPU form stores an FP8 KV cache (`quantization.kv_cache: fp8`);
  int64 / int32 / bool / float32 as written.

Pure Python (NumPy and ml_dtypes only inside `numpy_dtype`): `trtspec validate` / `plan` may import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

ACT_DTYPES = ("float32", "bfloat16", "float16")
FP8 = "float8e4m3fn"
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, FP8: 1, "int64": 8, "int32": 4, "bool": 1}
DYNAMIC = ("B", "T", "Tv", "P", "W", "F", "U", "R")
FIXED = ("CAP", "KV", "D", "C", "Hm", "K")
Dims3 = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]


@dataclass(frozen=True)
class Precision:
    """What the `act` and `kv` dtype kinds stand for in one graph."""

    act: str = "float32"  # float32 | bfloat16 | float16
    kv: str = "float32"  # `act`, or float8e4m3fn (FP8 KV cache stored as such)

    def __post_init__(self) -> None:
        if self.act not in ACT_DTYPES:
            raise ValueError(f"activation dtype {self.act!r} is not one of {', '.join(ACT_DTYPES)}")
        if self.kv not in (self.act, FP8):
            raise ValueError(f"KV cache dtype {self.kv!r}: the activation dtype {self.act} or {FP8}")

    @property
    def fp8_kv(self) -> bool:
        return self.kv == FP8

    def resolve(self, kind: str) -> str:
        return {"act": self.act, "kv": self.kv}.get(kind, kind)

    def as_dict(self) -> dict[str, str]:
        return {"act": self.act, "kv": self.kv}


CPU = Precision()  # the CPU form (and every graph ONNX Runtime runs): float32 throughout


@dataclass(frozen=True)
class TensorSpec:
    name: str  # "{l}" in per-layer names (caches) is the layer index
    dims: tuple[str, ...]  # symbolic dims (module docstring)
    dtype: str  # a kind (module docstring)
    when: str = ""  # "" always; "rejection": rejection-mode graphs only; "medusa": with fused Medusa heads;
    # "rows" / "all_rows": EAGLE graphs that pick their output rows (`out_rows`, the ONNX Runtime form) / that do not


@dataclass(frozen=True)
class GraphContract:
    name: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    def specs(
        self, io: str, *, layers: int, rejection: bool = False, medusa: bool = False, rows: bool = False
    ) -> list[TensorSpec]:
        """The inputs (io="inputs") or outputs of one graph, per-layer entries expanded, in graph order."""
        on = {"": True, "rejection": rejection, "medusa": medusa, "rows": rows, "all_rows": not rows}
        out: list[TensorSpec] = []
        for s in self.inputs if io == "inputs" else self.outputs:
            if "{l}" not in s.name:
                out += [s] if on[s.when] else []
        per_layer = [s for s in (self.inputs if io == "inputs" else self.outputs) if "{l}" in s.name]
        for layer in range(layers):
            out += [TensorSpec(s.name.format(l=layer), s.dims, s.dtype, s.when) for s in per_layer]
        return out


CACHE = ("B", "KV", "CAP", "D")
TARGET = GraphContract(
    "target_step",
    inputs=(
        TensorSpec("tokens", ("B", "T"), "int64"),
        TensorSpec("position_ids", ("B", "T"), "int64"),
        TensorSpec("tree_mask", ("B", "T", "T"), "bool"),
        TensorSpec("past_len", ("B",), "int64"),
        TensorSpec("num_nodes", ("B",), "int64"),
        TensorSpec("verify_index", ("B", "Tv"), "int64"),
        TensorSpec("paths", ("B", "P", "W"), "int32"),
        TensorSpec("temperature", ("B",), "float32", "rejection"),
        TensorSpec("top_p", ("B",), "float32", "rejection"),
        TensorSpec("uniforms", ("B", "W"), "float32", "rejection"),
        TensorSpec("past_key_{l}", CACHE, "kv"),
        TensorSpec("past_value_{l}", CACHE, "kv"),
    ),
    outputs=(
        TensorSpec("accepted_len", ("B",), "int32"),
        TensorSpec("best_path", ("B",), "int32"),
        TensorSpec("output_tokens", ("B", "W"), "int32"),
        TensorSpec("node_argmax", ("B", "Tv"), "int64"),
        TensorSpec("hidden", ("B", "T", "C"), "act"),
        TensorSpec("medusa_topk", ("B", "Hm", "K"), "int64", "medusa"),
        TensorSpec("present_key_{l}", CACHE, "kv"),
        TensorSpec("present_value_{l}", CACHE, "kv"),
    ),
)
EAGLE = GraphContract(
    "eagle_step",
    inputs=(
        TensorSpec("tokens", ("B", "F"), "int64"),
        TensorSpec("hidden_in", ("B", "F", "C"), "act"),
        TensorSpec("position_ids", ("B", "F"), "int64"),
        TensorSpec("past_len", ("B",), "int64"),
        TensorSpec("write_offset", ("B",), "int64"),
        TensorSpec("num_new", ("B",), "int64"),
        TensorSpec("tree_mask", ("B", "F", "U"), "bool"),
        TensorSpec("out_rows", ("B", "R"), "int64", "rows"),
        TensorSpec("past_key_{l}", CACHE, "kv"),
        TensorSpec("past_value_{l}", CACHE, "kv"),
    ),
    outputs=(
        TensorSpec("hidden_out", ("B", "F", "C"), "act", "all_rows"),
        TensorSpec("topk_tokens", ("B", "F", "K"), "int64", "all_rows"),
        TensorSpec("topk_logprobs", ("B", "F", "K"), "float32", "all_rows"),
        TensorSpec("hidden_out", ("B", "R", "C"), "act", "rows"),
        TensorSpec("topk_tokens", ("B", "R", "K"), "int64", "rows"),
        TensorSpec("topk_logprobs", ("B", "R", "K"), "float32", "rows"),
        TensorSpec("present_key_{l}", CACHE, "kv"),
        TensorSpec("present_value_{l}", CACHE, "kv"),
    ),
)
GRAPHS = {"target": TARGET, "eagle": EAGLE}
# The plain-steps twin of the greedy ORT target graph (`builder.export.verify.plain_twin`) leaves TARGET's verdict
# outputs to the host and returns the verify nodes' float32 logits [B, Tv, V] instead (`builder.engines.ort.target`).
PLAIN_LOGITS = "verify_logits"
HOST_VERDICT = ("node_argmax", "output_tokens", "best_path", "accepted_len")


def cache_names(layer: int) -> tuple[str, str, str, str]:
    """(past_key, past_value, present_key, present_value) of one layer."""
    names = [s.name.format(l=layer) for s in (*TARGET.inputs[-2:], *TARGET.outputs[-2:])]
    return names[0], names[1], names[2], names[3]


def onnx_dims(spec: TensorSpec, fixed: Mapping[str, int]) -> list[int | str]:
    """Dims as declared in the graph: fixed dims as numbers, dynamic ones by name."""
    return [fixed[d] if d in FIXED else d for d in spec.dims]


def declared(
    contract: GraphContract,
    io: str,
    fixed: Mapping[str, int],
    precision: Precision,
    *,
    layers: int,
    rejection: bool = False,
    medusa: bool = False,
    rows: bool = False,
) -> Iterator[tuple[str, str, list[int | str]]]:
    """(name, dtype name, dims) of every graph input or output, in graph order."""
    for s in contract.specs(io, layers=layers, rejection=rejection, medusa=medusa, rows=rows):
        yield s.name, precision.resolve(s.dtype), onnx_dims(s, fixed)


def numpy_dtype(name: str) -> Any:
    """The NumPy dtype of a dtype name (ml_dtypes for bfloat16 / float8e4m3fn)."""
    import numpy as np

    if name in ("bfloat16", FP8):
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name.replace("float8e4m3fn", "float8_e4m3fn")))
    return np.dtype(name)


def call_spec(
    contract: GraphContract,
    sizes: Mapping[str, int],
    precision: Precision = CPU,
    *,
    rejection: bool = False,
    medusa: bool = False,
    rows: bool = False,
) -> tuple[dict[str, tuple[tuple[int, ...], Any]], dict[str, tuple[tuple[int, ...], Any]]]:
    """(inputs, outputs) of one call, caches excluded: name -> (shape, NumPy dtype), every dim from `sizes`."""
    out: list[dict[str, tuple[tuple[int, ...], Any]]] = []
    for io in ("inputs", "outputs"):
        out.append(
            {
                s.name: (tuple(sizes[d] for d in s.dims), numpy_dtype(precision.resolve(s.dtype)))
                for s in contract.specs(io, layers=0, rejection=rejection, medusa=medusa, rows=rows)
            }
        )
    return out[0], out[1]


def profile_shapes(
    contract: GraphContract,
    ranges: Mapping[str, tuple[int, int, int]],
    fixed: Mapping[str, int],
    *,
    layers: int,
    rejection: bool = False,
) -> dict[str, Dims3]:
    """(min, opt, max) shape of every graph input from a (min, opt, max) range per dynamic dim."""
    out: dict[str, Dims3] = {}
    for s in contract.specs("inputs", layers=layers, rejection=rejection):
        per_dim = [(fixed[d],) * 3 if d in FIXED else ranges[d] for d in s.dims]
        out[s.name] = (tuple(r[0] for r in per_dim), tuple(r[1] for r in per_dim), tuple(r[2] for r in per_dim))
    return out


def nbytes(dtype: str, dims: Sequence[int]) -> int:
    n = DTYPE_BYTES[dtype]
    for d in dims:
        n *= d
    return n
