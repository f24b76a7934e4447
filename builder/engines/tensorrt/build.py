"""`build_engine`: a TensorRT-form ONNX graph (`builder.export.tensorrt`) → a serialized TensorRT engine.

Steps: register the plugins (trtspec::TreeVerify via `plugins.tree_verify.trt_plugin`) → a strongly
typed network (`NetworkDefinitionCreationFlag.STRONGLY_TYPED`: every tensor's type follows from the
graph — the GPU form's model.dtype (bfloat16 / float16; `builder.export.contract.Precision`), FP8 where
its Q/DQ nodes say and for an FP8 KV cache, float32 around verification — and the builder picks no
precision itself) → `OnnxParser.parse_from_file` (the weights file beside the model is read from there;
every parser error is reported with its node index, name, operator and TensorRT's source location) → FP8
check (a recipe that asks for FP8 must bring FP8 Q/DQ layers) → I/O types check (with `io_dtypes`: every
network input / output has the contract's type, `contract_io_dtypes`) → one optimization profile per `Profile` →
the host's timing cache loaded (or started; `builder.engines.tensorrt.timing`: one file per TensorRT version
and GPU, outside the engine folder) → `build_serialized_network` → the plan written atomically → the timing
cache written back atomically (merged with timings another build saved meanwhile) → deserialized once as a
check (I/O names and types, device memory per profile and at most: what the shared arena must hold) → a
manifest.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from builder.engines.tensorrt import timing
from builder.engines.tensorrt.probe import require
from builder.engines.tensorrt.profiles import Profile
from builder.export.contract import GRAPHS, Precision

if TYPE_CHECKING:
    import tensorrt as trt


class EngineBuildError(RuntimeError):
    """TensorRT could not parse or build a graph (the message says where and why)."""


TRT_TYPES = {
    "float32": "FLOAT",
    "float16": "HALF",
    "bfloat16": "BF16",
    "float8e4m3fn": "FP8",
    "int64": "INT64",
    "int32": "INT32",
    "bool": "BOOL",
}  # contract dtype name -> trt.DataType name


def contract_io_dtypes(
    graph: str, precision: Precision, *, layers: int, rejection: bool = False, medusa: bool = False
) -> dict[str, str]:
    """trt.DataType name of every input and output of the "target" / "eagle" graph in `precision`."""
    specs = [
        s
        for io in ("inputs", "outputs")
        for s in GRAPHS[graph].specs(io, layers=layers, rejection=rejection, medusa=medusa)
    ]
    return {s.name: TRT_TYPES[precision.resolve(s.dtype)] for s in specs}


def default_plugins() -> None:
    from plugins.tree_verify import trt_plugin

    trt_plugin.register()


def build_engine(
    onnx_path: Path,
    out_path: Path,
    *,
    fp8: bool,
    profiles: Sequence[Profile],
    timing_cache: Path | None,
    plugin: Callable[[], None] | None = default_plugins,
    optimization_level: int | None = None,
    io_dtypes: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Build and write the engine for `onnx_path` to `out_path`; returns its manifest (module docstring)."""
    require()
    import tensorrt as trt

    if plugin is not None:
        plugin()
    log, errors = collecting_logger()
    builder = trt.Builder(log)
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    parser = trt.OnnxParser(network, log)
    if not parser.parse_from_file(str(onnx_path)):
        raise EngineBuildError(parse_errors(parser, onnx_path))
    fp8_layers = count_fp8_layers(network)
    if fp8 and not fp8_layers:
        raise EngineBuildError(
            f"{onnx_path}: the recipe asks for FP8 but the graph has no FP8 Quantize/Dequantize "
            "layers (export from the quantize stage's checkpoint)"
        )
    if io_dtypes is not None:
        check_io_types(network, io_dtypes, onnx_path)
    config = builder.create_builder_config()
    if optimization_level is not None:
        config.builder_optimization_level = optimization_level
    add_profiles(builder, config, network, profiles)
    cache_before = timing.read(timing_cache)
    cache = config.create_timing_cache(cache_before)
    config.set_timing_cache(cache, ignore_mismatch=False)
    t0 = time.perf_counter()
    plan = builder.build_serialized_network(network, config)
    build_s = time.perf_counter() - t0
    if plan is None:
        raise EngineBuildError(f"{onnx_path}: TensorRT built no engine: " + ("; ".join(errors) or "no error logged"))
    timing.write_atomic(out_path, bytes(memoryview(plan)))
    cache_after = 0 if timing_cache is None else save_timing_cache(config, timing_cache, cache_before)
    manifest = {
        "tensorrt": trt.__version__,
        "onnx": onnx_path.name,
        "engine": out_path.name,
        "engine_bytes": plan.nbytes,
        "strongly_typed": True,
        "fp8": fp8,
        "fp8_qdq_layers": fp8_layers,
        "layers": network.num_layers,
        "profiles": [p.as_dict() for p in profiles],
        "plugins": [] if plugin is None else ["trtspec::TreeVerify"],
        "build_s": round(build_s, 3),
        "optimization_level": config.builder_optimization_level,
        "timing_cache": None
        if timing_cache is None
        else {"file": timing_cache.name, "bytes_before": len(cache_before), "bytes_after": cache_after},
    }
    return {**manifest, **device_facts(), **inspect_plan(out_path, log)}


def save_timing_cache(config: "trt.IBuilderConfig", path: Path, loaded: bytes) -> int:
    """Write the builder's timing cache to `path` atomically, merged with timings another build on this host
    saved there since `loaded` was read; returns the bytes written."""
    cache = config.get_timing_cache()
    now = timing.read(path)
    if now and now != loaded:  # a concurrent build saved first: keep its timings too
        cache.combine(config.create_timing_cache(now), ignore_mismatch=False)
    data = bytes(memoryview(cache.serialize()))
    timing.write_atomic(path, data)
    return len(data)


def add_profiles(
    builder: "trt.Builder", config: "trt.IBuilderConfig", network: "trt.INetworkDefinition", profiles: Sequence[Profile]
) -> None:
    """One optimization profile per `Profile`; every network input must be covered by each."""
    import tensorrt as trt

    names = [network.get_input(i).name for i in range(network.num_inputs)]
    for profile in profiles:
        missing = [n for n in names if n not in profile.shapes]
        extra = [n for n in profile.shapes if n not in names]
        if missing or extra:
            raise EngineBuildError(
                f"profile {profile.name!r} does not match the network's inputs (missing {missing}, unknown {extra})"
            )
        p = builder.create_optimization_profile()
        for name, (lo, opt, hi) in profile.shapes.items():
            p.set_shape(name, trt.Dims(list(lo)), trt.Dims(list(opt)), trt.Dims(list(hi)))
        if config.add_optimization_profile(p) < 0:
            raise EngineBuildError(f"TensorRT refused optimization profile {profile.name!r}: {profile.as_dict()}")


def check_io_types(network: "trt.INetworkDefinition", expected: Mapping[str, str], onnx_path: Path) -> None:
    """Every network input / output has the type `expected` names (trt.DataType names; inputs TensorRT
    dropped as unread are not in the network and not checked)."""
    tensors = [network.get_input(i) for i in range(network.num_inputs)]
    tensors += [network.get_output(i) for i in range(network.num_outputs)]
    wrong = [
        f"{t.name}: {t.dtype.name}, the contract says {expected.get(t.name)}"
        for t in tensors
        if expected.get(t.name) != t.dtype.name
    ]
    if wrong:
        raise EngineBuildError(f"{onnx_path}: network I/O types differ from the graph contract: " + "; ".join(wrong))


def parse_errors(parser: "trt.OnnxParser", onnx_path: Path) -> str:
    """Every parser error: node index, name and operator, the description, TensorRT's source location."""
    lines = [f"{onnx_path}: TensorRT's ONNX parser failed ({parser.num_errors} error(s))"]
    for i in range(parser.num_errors):
        e: trt.ParserError = parser.get_error(i)
        lines.append(
            f"  node #{e.node()} {e.node_name()!r} ({e.node_operator()}): {e.desc()} "
            f"[{e.code()}; {e.file()}:{e.line()} {e.func()}]"
        )
    return "\n".join(lines)


def count_fp8_layers(network: "trt.INetworkDefinition") -> int:
    """Quantize layers to FP8 and Dequantize layers from FP8 in the network."""
    import tensorrt as trt

    n = 0
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        if layer.type == trt.LayerType.QUANTIZE and layer.get_output(0).dtype == trt.DataType.FP8:
            n += 1
        elif layer.type == trt.LayerType.DEQUANTIZE and layer.get_input(0).dtype == trt.DataType.FP8:
            n += 1
    return n


def device_facts() -> dict[str, Any]:
    """The building device: name and compute capability (engines run on that capability only)."""
    import torch

    index = torch.cuda.current_device()
    return {
        "device": str(torch.cuda.get_device_name(index)),
        "compute_capability": list(torch.cuda.get_device_capability(index)),
    }


def inspect_plan(path: Path, log: "trt.ILogger") -> dict[str, Any]:
    """Deserialize the plan once: its I/O tensors (mode, dtype) and device memory per profile."""
    import tensorrt as trt

    engine = trt.Runtime(log).deserialize_cuda_engine(path.read_bytes())
    if engine is None:
        raise EngineBuildError(f"{path}: the engine just built does not deserialize")
    io = {}
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        mode = "input" if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT else "output"
        io[name] = {"mode": mode, "dtype": engine.get_tensor_dtype(name).name}
    memory = [engine.get_device_memory_size_for_profile_v2(p) for p in range(engine.num_optimization_profiles)]
    return {"io": io, "device_memory_bytes": memory, "device_memory_max_bytes": engine.device_memory_size_v2}


def collecting_logger() -> tuple["trt.ILogger", list[str]]:
    """A logger that prints warnings and errors (as trt.Logger(WARNING) would) and keeps the errors."""
    import tensorrt as trt

    errors: list[str] = []

    class Log(trt.ILogger):
        def __init__(self) -> None:
            trt.ILogger.__init__(self)

        def log(self, severity: trt.ILogger.Severity, msg: str) -> None:
            if severity <= trt.ILogger.Severity.ERROR:
                errors.append(msg)
            if severity <= trt.ILogger.Severity.WARNING:
                print(f"[TensorRT {severity.name}] {msg}", flush=True)

    return Log(), errors
