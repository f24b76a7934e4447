"""Seconds-long TensorRT probes: what the installed TensorRT accepts, before any full build (steps
`trt-probe-rope`, `trt-probe-kv-update`, `trt-probe-attention`, `trt-probe-treeverify-attrs`).

Each probe writes tiny ONNX graphs (a node or two, static shapes) in each form the question has, and for each
"combo" records how far TensorRT took it: refused by the ONNX parser, refused by the builder, refused at
deserialization, ran and equals a NumPy reference (max error), or ran and is WRONG. A refusal is a recorded
result, not a crash: the step PASSes when no combo computed a wrong answer and at least one form of the
operation works (the treeverify step: when the real TreeVerify node works in both modes and the int-annotated
probe plugin fares as `plugins.tree_verify.trt_attrs.UNWRAPS_SCALARS` predicts for this TensorRT and NumPy), and
the details list every combo.
Networks are created STRONGLY_TYPED, as `builder.engines.tensorrt.build` creates ours.

* rope — RotaryEmbedding on x [B, H, T, D] (non-interleaved, explicit position_ids, cos/sin caches
  [CAP, D/2]) in the ONNX opset-23 form and the `trt` form `builder.export.tensorrt` emits (TensorRT Edge-LLM's
  trt::RotaryEmbedding), with int32 and int64 position ids (issue 36, item 5d: the exporter casts to INT32,
  the ONNX operator documents INT64).
* kv-update — TensorScatter writing T new slots at a per-sequence offset along axis 2 of a [B, KV, CAP, D]
  cache, ONNX opset-24 and `trt` forms, int32 / int64 offsets, float32 / bfloat16 / FP8 (E4M3) caches, each
  run with the output bound to separate memory and to the input's own (in place: how our engines bind
  present_* over past_*). TensorRT documents float32/float16/bfloat16 caches only (item 5c).
* attention — Attention of q [B, H, T, D] over k, v [B, KV, S, D] (GQA, H = 2·KV) with an additive mask
  [B, 1, T, S] of 0 / -inf in the tree pattern, ONNX opset-23 and `trt` (is_causal=0, TRT_decomposable=1)
  forms, float32 and bfloat16.
* treeverify-attrs — a quickly deployable plugin's INT attribute in each form: two probe plugins,
  trtspec_probe::attr_int with `mode: int` and trtspec_probe::attr_array with `mode` an int32 array as
  `plugins.tree_verify.trt_attrs.ModeAttr` (y = x + mode), built from ONNX nodes whose `mode` is an INT or an
  INTS attribute (tensorrt.plugin's int() of the 1-element array the parser passes is what NumPy >= 2.4 refuses:
  item 5a), then the real trtspec::TreeVerify node (`plugins.tree_verify.onnx_op.make_node`, as registered by
  `plugins.tree_verify.trt_plugin`) in both modes against the reference.

Tolerances: data movement (TensorScatter) must be bit-exact; RoPE in float32 within 8 ulp of max|x|; attention
within 4 unit roundoffs of max|v| — float32 matrix products may run in TF32 (TensorRT's default, u = 2^-11),
bfloat16 u = 2^-8; references are computed in float64 from the (rounded) inputs.

No `from __future__ import annotations`: tensorrt.plugin reads the probe plugins' annotations at run time.
"""

import dataclasses
import math
from typing import TYPE_CHECKING, Any, Callable, List, Tuple

import numpy as np
import torch

from devtools.gpu_check.steps import FAIL, PASS, Context, Verdict

if TYPE_CHECKING:
    import tensorrt as trt

F32_ULP = 2.0**-24
TF32_U, BF16_U = 2.0**-11, 2.0**-8
TRT_DOMAIN = "trt"  # builder.export.trt_schemas.TRT_DOMAIN (Edge-LLM's onnxscript Opset("trt", 1))
PROBE_NS = "trtspec_probe"


@dataclasses.dataclass
class Outcome:
    combo: str
    stage: str  # parse | build | deserialize | run | ok | wrong
    detail: str = ""
    max_err: float | None = None

    @property
    def refused(self) -> bool:
        return self.stage not in ("ok", "wrong")

    def line(self) -> str:
        err = "" if self.max_err is None else f" max err {self.max_err:.3g}"
        return f"{self.combo}: {self.stage}{err}{': ' + self.detail if self.detail else ''}"


@dataclasses.dataclass
class Combo:
    """One form of one operation: a tiny ONNX model, its inputs (CPU tensors), its outputs and their check."""

    name: str
    model: Any  # onnx.ModelProto
    feeds: dict[str, torch.Tensor]
    outputs: dict[str, Tuple[Tuple[int, ...], Any]]  # name -> (shape, torch dtype)
    check: Callable[[dict[str, torch.Tensor]], Tuple[bool, float]]  # CPU outputs -> (good, max error)
    alias: dict[str, str] = dataclasses.field(default_factory=dict)  # output -> input bound to the same memory


# -- building and running a tiny network ----------------------------------------------------------------------


class Refused(Exception):
    """TensorRT refused a network at `stage` (parse | build | deserialize | run)."""

    def __init__(self, stage: str, detail: str) -> None:
        super().__init__(f"{stage}: {detail}")
        self.stage, self.detail = stage, detail[:400]


def build(model: Any) -> "trt.ICudaEngine":
    """Parse, build and deserialize `model` (an onnx.ModelProto) into an ICudaEngine, or raise `Refused`. An
    exception raised inside TensorRT (a plugin's Python, e.g. tensorrt.plugin's int()) is a refusal too."""
    import tensorrt as trt

    from builder.engines.tensorrt.build import collecting_logger

    log, errors = collecting_logger()
    builder = trt.Builder(log)
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    parser = trt.OnnxParser(network, log)
    stage = "parse"
    try:
        # bool(): tensorrt-stubs' `-> bool` resolves to tensorrt.bool (a DataType), which mypy takes as always true
        if not bool(parser.parse(model.SerializeToString())):
            descs = []
            for i in range(parser.num_errors):
                e: trt.ParserError = parser.get_error(i)
                descs.append(f"{e.node_operator()}: {e.desc()}")
            raise Refused("parse", "; ".join(descs))
        stage = "build"
        plan = builder.build_serialized_network(network, builder.create_builder_config())
        if plan is None:
            raise Refused("build", "; ".join(errors)[-400:] or "no engine (see the TensorRT log)")
        stage = "deserialize"
        engine = trt.Runtime(log).deserialize_cuda_engine(plan)
        if engine is None:
            raise Refused("deserialize", "; ".join(errors)[-400:] or "no engine")
    except Refused:
        raise
    except Exception as exc:
        raise Refused(stage, f"{type(exc).__name__}: {exc}") from exc
    return engine


def run_tensorrt(combo: Combo) -> Outcome:
    """`combo` through TensorRT on this GPU: how far it got, and its check."""
    try:
        engine = build(combo.model)
    except Refused as refused:
        return Outcome(combo.name, refused.stage, refused.detail)
    feeds = {n: t.cuda() for n, t in combo.feeds.items()}
    outs = {n: poisoned(shape, dtype) for n, (shape, dtype) in combo.outputs.items()}
    context = engine.create_execution_context()
    for name, tensor in feeds.items():
        context.set_tensor_address(name, int(tensor.data_ptr()))
    for name, tensor in outs.items():
        bound = feeds[combo.alias[name]] if name in combo.alias else tensor
        context.set_tensor_address(name, int(bound.data_ptr()))
    stream = torch.cuda.Stream()
    if not bool(context.execute_async_v3(int(stream.cuda_stream))):  # bool(): see `build`
        return Outcome(combo.name, "run", "execute_async_v3 returned False")
    stream.synchronize()
    got = {n: (feeds[combo.alias[n]] if n in combo.alias else t).cpu() for n, t in outs.items()}
    good, err = combo.check(got)
    return Outcome(combo.name, "ok" if good else "wrong", "" if good else "differs from the reference", err)


def poisoned(shape: Tuple[int, ...], dtype: Any) -> torch.Tensor:
    """A CUDA output buffer that no check passes unless written: NaN (0xFF bytes for FP8 E4M3), or -7."""
    if dtype == torch.float8_e4m3fn:
        return torch.full(shape, 255, dtype=torch.uint8, device="cuda").view(dtype)
    if dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype, device="cuda")
    return torch.full(shape, -7, dtype=dtype, device="cuda")


def onnx_model(
    nodes: List[Any],
    inputs: dict[str, torch.Tensor],
    outputs: dict[str, Tuple[Tuple[int, ...], Any]],
    opsets: dict[str, int],
    initializers: List[Any] | None = None,
) -> Any:
    """A model of `nodes` with these (static-shaped) inputs and outputs."""
    from onnx import helper

    ins = [helper.make_tensor_value_info(n, onnx_type(x.dtype), list(x.shape)) for n, x in inputs.items()]
    outs = [helper.make_tensor_value_info(n, onnx_type(dt), list(shape)) for n, (shape, dt) in outputs.items()]
    graph = helper.make_graph(nodes, "probe", ins, outs, initializer=initializers or [])
    imports = [helper.make_opsetid(d, v) for d, v in opsets.items()]
    # the lowest IR version these opsets need: a parser built against an older onnx may refuse a newer IR
    return helper.make_model(graph, opset_imports=imports, ir_version=helper.find_min_ir_version_for(imports, True))


def onnx_type(dtype: Any) -> int:
    from onnx import TensorProto

    return int(
        {
            torch.float32: TensorProto.FLOAT,
            torch.bfloat16: TensorProto.BFLOAT16,
            torch.float16: TensorProto.FLOAT16,
            torch.float8_e4m3fn: TensorProto.FLOAT8E4M3FN,
            torch.int32: TensorProto.INT32,
            torch.int64: TensorProto.INT64,
        }[dtype]
    )


def verdict(name: str, outcomes: List[Outcome], needed: Callable[[Outcome], bool] | None = None) -> Verdict:
    """PASS: nothing wrong and at least one (needed) combo ok (module docstring)."""
    for o in outcomes:
        print(o.line())
    wrong = [o.combo for o in outcomes if o.stage == "wrong"]
    good = [o for o in outcomes if o.stage == "ok" and (needed is None or needed(o))]
    accepted = ", ".join(o.combo for o in outcomes if o.stage == "ok") or "none"
    refused = ", ".join(f"{o.combo} ({o.stage})" for o in outcomes if o.refused) or "none"
    details = {"outcomes": [dataclasses.asdict(o) for o in outcomes]}
    text = f"accepted: {accepted}; refused: {refused}"
    if wrong:
        return Verdict(FAIL, f"{name}: WRONG results from {', '.join(wrong)}; {text}", details)
    if not good:
        return Verdict(FAIL, f"{name}: no form works; {text}", details)
    return Verdict(PASS, text, details)


def probe(name: str, combos: List[Combo]) -> Verdict:
    outcomes = []
    for combo in combos:
        try:
            outcomes.append(run_tensorrt(combo))
        except Exception as exc:  # a refusal raised from the runtime side is a recorded result too
            outcomes.append(Outcome(combo.name, "run", f"{type(exc).__name__}: {exc}"[:400]))
    return verdict(name, outcomes)


FORMS = (("onnx", ""), ("trt", TRT_DOMAIN))  # (form, node domain)


def opsets_for(domain: str, default: int) -> dict[str, int]:
    return {"": default, TRT_DOMAIN: 1} if domain == TRT_DOMAIN else {"": default}


# -- RoPE ---------------------------------------------------------------------------------------------------------


def rope_reference(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, pos: np.ndarray) -> np.ndarray:
    # x [B, H, T, D], cos/sin [CAP, D/2], pos [B, T] -> [B, H, T, D] (non-interleaved halves)
    c, s = cos[pos][:, None], sin[pos][:, None]  # [B, 1, T, D/2]
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    out: np.ndarray = np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)
    return out


def rope_combos() -> List[Combo]:
    from onnx import helper, numpy_helper

    b, h, t, d, cap = 1, 2, 3, 8, 16
    x = torch.randn(b, h, t, d, generator=torch.Generator().manual_seed(0))
    inv = 1.0 / 10000 ** (np.arange(0, d, 2) / d)
    angles = np.arange(cap)[:, None] * inv[None]  # [CAP, D/2]
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    pos = np.array([[5, 0, 11]])
    want = rope_reference(x.double().numpy(), cos.astype(np.float64), sin.astype(np.float64), pos)
    bound = 8 * F32_ULP * float(np.abs(want).max())

    def check(got: dict[str, torch.Tensor]) -> Tuple[bool, float]:
        err = float(np.abs(got["y"].double().numpy() - want).max())
        return err <= bound, err

    combos = []
    for form, domain in FORMS:
        for ids in (torch.int32, torch.int64):
            node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "position_ids"], ["y"], domain=domain)
            inits = [numpy_helper.from_array(cos, "cos"), numpy_helper.from_array(sin, "sin")]
            feeds = {"x": x, "position_ids": torch.tensor(pos, dtype=ids)}
            outputs = {"y": (tuple(x.shape), torch.float32)}
            model = onnx_model([node], feeds, outputs, opsets_for(domain, 23), inits)
            combos.append(Combo(f"{form}/{str(ids).removeprefix('torch.')} ids", model, feeds, outputs, check))
    return combos


def rope_step(ctx: Context) -> Verdict:
    return probe("RotaryEmbedding", rope_combos())


# -- KV-cache update ----------------------------------------------------------------------------------------------


def _raw(x: torch.Tensor) -> torch.Tensor:
    """The same bytes as integers of the element's width (bit-exact comparison, FP8 included)."""
    return x.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[x.element_size()])


def kv_update_combos() -> List[Combo]:
    from onnx import helper

    b, kv, cap, d, t = 2, 1, 8, 4, 2
    offsets = [3, 5]
    gen = torch.Generator().manual_seed(1)
    combos = []
    for form, domain in FORMS:
        for ids in (torch.int32, torch.int64):
            for dtype in (torch.float32, torch.bfloat16, torch.float8_e4m3fn):
                cache = torch.randn(b, kv, cap, d, generator=gen).to(dtype)
                new = torch.randn(b, kv, t, d, generator=gen).to(dtype)
                want = _raw(cache).clone()
                for row, off in enumerate(offsets):
                    want[row, :, off : off + t] = _raw(new)[row]
                attrs = {"axis": 2} if form == "onnx" else {}
                node = helper.make_node("TensorScatter", ["cache", "new", "at"], ["out"], domain=domain, **attrs)
                feeds = {"cache": cache, "new": new, "at": torch.tensor(offsets, dtype=ids)}
                outputs = {"out": (tuple(cache.shape), dtype)}
                model = onnx_model([node], feeds, outputs, opsets_for(domain, 24))

                def check(got: dict[str, torch.Tensor], want: torch.Tensor = want) -> Tuple[bool, float]:
                    same = torch.equal(_raw(got["out"]), want)
                    return same, 0.0 if same else float("nan")

                name = f"{form}/{str(ids).removeprefix('torch.')}/{str(dtype).removeprefix('torch.')}"
                combos.append(Combo(f"{name}/separate", model, feeds, outputs, check))
                combos.append(Combo(f"{name}/in place", model, feeds, outputs, check, {"out": "cache"}))
    return combos


def kv_update_step(ctx: Context) -> Verdict:
    return probe("TensorScatter", kv_update_combos())


# -- attention with an additive mask --------------------------------------------------------------------------


def attention_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray, scale: float) -> np.ndarray:
    # q [B, H, T, D], k/v [B, KV, S, D], mask [B, 1, T, S] additive -> [B, H, T, D]
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scores = q @ k.transpose(0, 1, 3, 2) * scale + mask  # [B, H, T, S]
    scores = scores - scores.max(-1, keepdims=True)
    p = np.exp(scores)
    out: np.ndarray = (p / p.sum(-1, keepdims=True)) @ v
    return out


def tree_mask(t: int, past: int) -> np.ndarray:
    """[T, past + T] bool: every past slot, and the tree's ancestors (node 0 the root, nodes 1.. its children)."""
    allowed: np.ndarray = np.zeros((t, past + t), dtype=bool)
    allowed[:, :past] = True
    for node in range(t):
        allowed[node, past] = True
        allowed[node, past + node] = True
    return allowed


def attention_combos() -> List[Combo]:
    from onnx import helper

    b, h, kvh, t, past, d = 1, 4, 2, 3, 3, 8
    s, scale = past + t, 1 / math.sqrt(d)
    allowed = tree_mask(t, past)
    gen = torch.Generator().manual_seed(2)
    combos = []
    for dtype, u in ((torch.float32, TF32_U), (torch.bfloat16, BF16_U)):
        shapes = ((b, h, t, d), (b, kvh, s, d), (b, kvh, s, d))
        q, k, v = (torch.randn(*shape, generator=gen).to(dtype) for shape in shapes)
        mask = torch.from_numpy(np.where(allowed, 0.0, -np.inf)[None, None]).to(dtype)  # [B, 1, T, S]
        want = attention_reference(
            q.double().numpy(), k.double().numpy(), v.double().numpy(), mask.double().numpy(), scale
        )
        bound = 4 * u * float(v.double().abs().max())

        def check(got: dict[str, torch.Tensor], want: np.ndarray = want, bound: float = bound) -> Tuple[bool, float]:
            err = float(np.abs(got["y"].double().numpy() - want).max())
            return err <= bound, err

        for form, domain in FORMS:
            attrs: dict[str, Any] = {"scale": scale, "is_causal": 0}
            if form == "trt":
                attrs["TRT_decomposable"] = 1
            node = helper.make_node("Attention", ["q", "k", "v", "mask"], ["y"], domain=domain, **attrs)
            feeds = {"q": q, "k": k, "v": v, "mask": mask}
            outputs = {"y": (tuple(q.shape), dtype)}
            model = onnx_model([node], feeds, outputs, opsets_for(domain, 23))
            combos.append(Combo(f"{form}/{str(dtype).removeprefix('torch.')}", model, feeds, outputs, check))
    return combos


def attention_step(ctx: Context) -> Verdict:
    return probe("Attention (additive mask)", attention_combos())


# -- QDP attribute forms and the real TreeVerify node --------------------------------------------------------------

_probe_plugins: List[bool] = []
# as plugins.tree_verify.trt_attrs.ModeAttr: tensorrt.plugin needs the dtype argument, and the impl must repeat it
ProbeArray = np.ndarray[Any, np.dtype[np.int32]]


def register_probe_plugins() -> None:
    """trtspec_probe::attr_int (`mode: int`) and trtspec_probe::attr_array (`mode: ProbeArray`): y = x + mode."""
    if _probe_plugins:
        return
    import tensorrt.plugin as trtp

    @trtp.register(f"{PROBE_NS}::attr_int")
    def attr_int_shape(x: trtp.TensorDesc, mode: int) -> trtp.TensorDesc:
        return x.like()

    @trtp.impl(f"{PROBE_NS}::attr_int")
    def attr_int_impl(x: trtp.Tensor, mode: int, outputs: Tuple[trtp.Tensor], stream: int) -> None:
        with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
            torch.as_tensor(outputs[0], device="cuda").copy_(torch.as_tensor(x, device="cuda") + float(mode))

    @trtp.register(f"{PROBE_NS}::attr_array")
    def attr_array_shape(x: trtp.TensorDesc, mode: ProbeArray) -> trtp.TensorDesc:
        return x.like()

    @trtp.impl(f"{PROBE_NS}::attr_array")
    def attr_array_impl(x: trtp.Tensor, mode: ProbeArray, outputs: Tuple[trtp.Tensor], stream: int) -> None:
        value = float(np.asarray(mode).reshape(-1)[0])
        with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
            torch.as_tensor(outputs[0], device="cuda").copy_(torch.as_tensor(x, device="cuda") + value)

    _probe_plugins.append(True)


def attribute_combos() -> List[Combo]:
    """The probe plugins' nodes with `mode` = 3 as an ONNX INT and as an INTS [3] attribute."""
    from onnx import helper

    x = torch.arange(4, dtype=torch.float32)

    def check(got: dict[str, torch.Tensor]) -> Tuple[bool, float]:
        err = float((got["y"] - (x + 3)).abs().max())
        return err == 0.0, err

    combos = []
    for plugin, annotation in (("attr_int", "int"), ("attr_array", "ndarray")):
        for kind, mode in (("INT", 3), ("INTS", [3])):
            node = helper.make_node(
                plugin, ["x"], ["y"], domain=PROBE_NS, mode=mode, plugin_namespace=PROBE_NS, plugin_version="1"
            )
            feeds = {"x": x}
            outputs: dict[str, Tuple[Tuple[int, ...], Any]] = {"y": ((4,), torch.float32)}
            model = onnx_model([node], feeds, outputs, {"": 21, PROBE_NS: 1})
            combos.append(
                Combo(f"{plugin} ({annotation}-annotated) / ONNX {kind} attribute", model, feeds, outputs, check)
            )
    return combos


def treeverify_combos() -> List[Combo]:
    """The real trtspec::TreeVerify node (`onnx_op.make_node`), both modes, on a small random case."""
    from devtools.gpu_check.engines import verify_model
    from devtools.verify_cases import compare, random_case
    from plugins.tree_verify.contract import INPUT_NAMES, OUTPUT_NAMES, Mode
    from plugins.tree_verify.reference import VerifyResult

    combos = []
    for mode in Mode:
        case = random_case(3, 2, 8, 64, mode)
        b, w = case.tokens.shape[0], case.paths.shape[2]
        outputs = dict(zip(OUTPUT_NAMES, (((b,), torch.int32), ((b,), torch.int32), ((b, w), torch.int32))))

        def check(got: dict[str, torch.Tensor], case: Any = case) -> Tuple[bool, float]:
            result = compare(case, VerifyResult(*(got[n] for n in OUTPUT_NAMES)))
            return not result.wrong, float(len(result.wrong))

        feeds = dict(zip(INPUT_NAMES, (t.contiguous() for t in case.inputs())))
        combos.append(
            Combo(
                f"TreeVerify mode={mode.name.lower()} (as onnx_op.make_node writes it)",
                verify_model(case),
                feeds,
                outputs,
                check,
            )
        )
    return combos


def int_attribute_expected(trt_version: str, numpy_version: str) -> bool | None:
    """Whether an int-annotated QDP attribute should work with this TensorRT and NumPy, by the rule
    `plugins.tree_verify.trt_attrs` records per TensorRT version read (None: a version it has not read)."""
    from plugins.tree_verify.trt_attrs import UNWRAPS_SCALARS

    unwraps = UNWRAPS_SCALARS.get(trt_version)
    if unwraps is None:
        return None
    numpy_major_minor = tuple(int(p) for p in numpy_version.split(".")[:2])
    return unwraps or numpy_major_minor < (2, 4)  # int() of a 1-element array: refused from NumPy 2.4 on


def treeverify_attrs_step(ctx: Context) -> Verdict:
    import tensorrt

    from plugins.tree_verify import trt_plugin

    register_probe_plugins()
    trt_plugin.register()
    outcomes = []
    for combo in attribute_combos() + treeverify_combos():
        try:
            outcomes.append(run_tensorrt(combo))
        except Exception as exc:
            outcomes.append(Outcome(combo.name, "run", f"{type(exc).__name__}: {exc}"[:400]))
    verdicts = verdict("QDP attributes", outcomes, needed=lambda o: o.combo.startswith("TreeVerify"))
    expected = int_attribute_expected(str(tensorrt.__version__), str(np.__version__))
    verdicts.details["int_attribute_expected_ok"] = expected
    contradicting = [
        o.combo
        for o in outcomes
        if o.combo.startswith("attr_int") and expected is not None and (o.stage == "ok") != expected
    ]
    tree = [o for o in outcomes if o.combo.startswith("TreeVerify")]
    if verdicts.status == PASS and not all(o.stage == "ok" for o in tree):
        return Verdict(FAIL, f"TreeVerify does not build and run in both modes; {verdicts.reason}", verdicts.details)
    if verdicts.status == PASS and contradicting:
        return Verdict(
            FAIL,
            f"{', '.join(contradicting)} contradict plugins.tree_verify.trt_attrs.UNWRAPS_SCALARS "
            f"(expected {'ok' if expected else 'refused'} with TensorRT {tensorrt.__version__}, NumPy "
            f"{np.__version__}); {verdicts.reason}",
            verdicts.details,
        )
    return verdicts
