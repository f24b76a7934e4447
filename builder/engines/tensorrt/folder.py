"""The engine stage's output for GPU targets (a self-contained folder), and opening it.

    engine.json       format 1, backend "tensorrt", variant "standard", recipe, capacity, max_seq_len,
                      max_batch_size, max_input_len, model {layers, kv_heads, head_dim, hidden, vocab},
                      precision, draft_precision: {act, kv} dtypes of the target / EAGLE graphs (export.json's:
                      the KV buffers are allocated in their `kv`, the host arrays in their I/O contract types),
                      target {greedy, rejection}: engine files, medusa {heads, top_k} | null,
                      eagle {graph: engine file, layers, kv_heads, head_dim, hidden, top_k, capacity} | null,
                      drafter, tokenizer, stop_ids, versions,
                      tensorrt: the version lock {version, device, compute_capability, plugin {id, sha256,
                      files}} (`builder.engines.tensorrt.lock`: `check_lock` before serving),
                      engines {greedy | rejection | eagle: build_engine's manifest (profiles, I/O types, device
                      memory per profile and at most, timing cache file name and sizes, …)}
    target-greedy.engine, target-rejection.engine, eagle.engine   serialized TensorRT engines
    tokenizer.json

The builder's timing cache is the host's (`builder.engines.tensorrt.timing`: one file per TensorRT version
and GPU under $XDG_CACHE_HOME/trtspec/timing), not part of the folder: the next build on this host reuses it.
Every engine is built against the graph I/O contract's types in the export's precision (`contract_io_dtypes`):
a graph whose network inputs or outputs differ is refused before building.

When the export stage's folder has no TensorRT-form graphs (an export cached for a cpu target with the
same key), they are rewritten here (`builder.export.tensorrt`) into a scratch `onnx/` folder, removed
once the engines are built.

Engines run on the compute capability they were built on: the build refuses a host whose GPU differs
from the recipe's target. Nothing here reads the recipe or the checkpoint when opening. `open_tensorrt_engine` runs
every engine of the folder on one `device.Lane` (one stream, one scratch arena sized for the largest
engine profile recorded in engine.json).
"""

from __future__ import annotations

import json
import platform
import shutil
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from builder.engines.tensorrt.profiles import CacheDims, Profile, eagle_profiles, target_profiles
from builder.export.contract import CPU, Precision

if TYPE_CHECKING:
    from builder.engines.opened import Opened
    from builder.engines.tensorrt.device import CudaApi

ENGINE_JSON = "engine.json"
FORMAT = 2  # `builder.handoffs.TensorrtEngineJson.FORMAT`
TARGET_GRAPHS = ("greedy", "rejection")  # FP8 where the export quantized; the draft graph stays in model.dtype
BACKEND = "tensorrt"


@dataclass(frozen=True)
class TensorrtBuildSettings:
    """What the build takes from the recipe."""

    recipe: str  # the recipe's path (recorded only)
    device: str  # the recipe's target device, e.g. "h200"
    compute_capability: tuple[int, int]  # the target device's (builder.recipe.gpus)
    max_batch_size: int
    max_input_len: int


def build_folder(
    export_dir: Path,
    source: dict[str, Any],
    settings: TensorrtBuildSettings,
    out: Path,
    say: Callable[[str], None] = lambda _m: None,
) -> dict[str, Any]:
    """Build every exported graph's engine into `out`, write engine.json (returned) and the tokenizer."""
    from builder.engines.tensorrt import timing
    from builder.engines.tensorrt.build import build_engine, device_facts
    from builder.engines.tensorrt.lock import engine_lock
    from builder.engines.tensorrt.probe import version
    from builder.errors import UserError
    from builder.export.tensorrt import GRAPHS, write_tensorrt

    info = json.loads((export_dir / "export.json").read_text(encoding="utf-8"))
    if info["variant"] != "standard":
        raise UserError(
            f"TensorRT engines are built from the `standard` graphs; the export has {info['variant']!r} "
            "(unset TRTSPEC_ORT_VARIANT)",
            field="variant",
            allowed="standard",
        )
    facts = device_facts()
    if tuple(facts["compute_capability"]) != tuple(settings.compute_capability):
        have, want = (".".join(map(str, c)) for c in (facts["compute_capability"], settings.compute_capability))
        raise UserError(
            f"this host's GPU ({facts['device']}, compute capability {have}) is not the recipe's target "
            f"{settings.device} ({want}); TensorRT engines run only on the capability they were built on",
            field="target.device",
        )
    arch = source["architecture"]
    model = {
        "layers": arch["num_hidden_layers"],
        "kv_heads": arch["num_key_value_heads"],
        "head_dim": arch["head_dim"],
        "hidden": arch["hidden_size"],
        "vocab": arch["vocab_size"],
    }
    profiles = graph_profiles(info, model, settings)
    precision = precisions(info)
    io_types = graph_io_dtypes(info, model, precision)
    cache = timing.cache_path(version(), facts["device"], facts["compute_capability"])
    rewritten = info.get("tensorrt") or {}
    engines, files = {}, {}
    for key, folder, stem in GRAPHS:
        if key not in profiles or not (export_dir / folder).is_dir():  # greedy-only recipes export no rejection graph
            continue
        if key in rewritten:
            onnx_path = export_dir / rewritten[key]
        else:
            say(f"rewriting {folder} for TensorRT (the cached export has no TensorRT form)")
            onnx_path = write_tensorrt(export_dir / folder, stem, out / "onnx" / folder)
        files[key] = f"{folder}.engine"
        say(f"building the {key} engine ({onnx_path.name})")
        engines[key] = build_engine(
            onnx_path,
            out / files[key],
            fp8=bool(info.get("fp8")) and key in TARGET_GRAPHS,
            profiles=profiles[key],
            timing_cache=cache,
            io_dtypes=io_types[key],
        )
    shutil.rmtree(out / "onnx", ignore_errors=True)  # scratch rewrites (weights hard-linked): not part of the folder
    shutil.copy2(Path(source["tokenizer"]) / "tokenizer.json", out / "tokenizer.json")
    eagle = info.get("eagle")
    meta = {
        "format": FORMAT,
        "backend": BACKEND,
        "variant": info["variant"],
        "recipe": settings.recipe,
        "capacity": info["capacity"],
        "max_seq_len": info["max_seq_len"],
        "max_batch_size": settings.max_batch_size,
        "max_input_len": settings.max_input_len,
        "model": model,
        "precision": precision[0].as_dict(),
        "draft_precision": precision[1].as_dict(),
        "target": {"greedy": files["greedy"], "rejection": files.get("rejection")},
        "medusa": info["medusa"],
        "eagle": None if eagle is None else {"graph": files["eagle"], **eagle},
        "drafter": info["drafter"],
        "tokenizer": "tokenizer.json",
        "stop_ids": source["stop_ids"],
        "versions": _versions(),
        "tensorrt": engine_lock(engines["greedy"]["tensorrt"], facts["device"], facts["compute_capability"]),
        "engines": engines,
    }
    (out / ENGINE_JSON).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return meta


def precisions(info: dict[str, Any]) -> tuple[Precision, Precision]:
    """(target, EAGLE draft) precision of an export (export.json / engine.json; float32 when not recorded)."""
    return (Precision(**info.get("precision", CPU.as_dict())), Precision(**info.get("draft_precision", CPU.as_dict())))


def graph_io_dtypes(
    info: dict[str, Any], model: dict[str, int], precision: tuple[Precision, Precision]
) -> dict[str, dict[str, str]]:
    """trt.DataType name of every input and output of each graph the export may hold (the I/O contract)."""
    from builder.engines.tensorrt.build import contract_io_dtypes

    medusa = info.get("medusa") is not None
    out = {
        mode: contract_io_dtypes(
            "target", precision[0], layers=model["layers"], rejection=mode == "rejection", medusa=medusa
        )
        for mode in ("greedy", "rejection")
    }
    if info.get("eagle") is not None:
        out["eagle"] = contract_io_dtypes("eagle", precision[1], layers=info["eagle"]["layers"])
    return out


def graph_profiles(
    info: dict[str, Any], model: dict[str, int], settings: TensorrtBuildSettings
) -> dict[str, list[Profile]]:
    """The profiles of each exported graph (see `builder.engines.tensorrt.profiles`)."""
    max_nodes = info["capacity"] - info["max_seq_len"]  # room for draft nodes (any drafter the folder serves)
    cache = CacheDims(model["layers"], model["kv_heads"], info["capacity"], model["head_dim"])
    out = {
        mode: target_profiles(
            max_batch_size=settings.max_batch_size,
            max_input_len=settings.max_input_len,
            max_nodes=max_nodes,
            cache=cache,
            rejection=mode == "rejection",
        )
        for mode in ("greedy", "rejection")
    }
    e = info.get("eagle")
    if e is not None:
        out["eagle"] = eagle_profiles(
            max_batch_size=settings.max_batch_size,
            max_input_len=settings.max_input_len,
            max_rows=max(max_nodes, e["capacity"] - info["max_seq_len"]),
            hidden_size=e["hidden"],
            cache=CacheDims(e["layers"], e["kv_heads"], e["capacity"], e["head_dim"]),
        )
    return out


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in ("trtspec", "tensorrt", "torch", "triton", "onnx"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def read_tensorrt_meta(folder: Path) -> dict[str, Any]:
    path = Path(folder) / ENGINE_JSON
    meta: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    if meta.get("format") != FORMAT or meta.get("backend") != BACKEND:
        raise ValueError(f"{path}: not a TensorRT engine folder of format {FORMAT}")
    return meta


def arena_bytes(meta: dict[str, Any]) -> int:
    """The scratch arena the folder's engines share: the largest device memory any engine's profile needs, as
    recorded when it was built (`build_engine`'s manifest), so it is allocated once."""
    sizes = [
        int(e.get("device_memory_max_bytes", max(e.get("device_memory_bytes") or [0])))
        for e in meta["engines"].values()
    ]
    return max(sizes, default=0)


def open_tensorrt_engine(
    folder: str | Path, drafter: dict[str, Any] | None = None, max_batch_size: int = 1, cuda: "CudaApi | None" = None
) -> "Opened":
    """The TensorRT engines of `folder` and a drafter factory, all on one `Lane` (stream + scratch arena, through
    `cuda`: torch's unless given); `drafter` overrides the folder's (none / lookahead, or the folder's own
    method), as for ONNX Runtime."""
    from builder.engines.opened import drafter_for, opened, target_hidden
    from builder.engines.tensorrt.device import Lane
    from builder.engines.tensorrt.eagle import TrtEagleNet
    from builder.engines.tensorrt.target import TrtEngine, TrtTargetSpec

    folder = Path(folder)
    meta = read_tensorrt_meta(folder)
    config = drafter_for(meta, drafter)
    if max_batch_size > meta["max_batch_size"]:
        raise ValueError(f"the engines' profiles take up to {meta['max_batch_size']} sequences, not {max_batch_size}")
    m, t, engines = meta["model"], meta["target"], meta["engines"]
    profiles = {k: tuple(Profile.from_dict(p) for p in engines[k]["profiles"]) for k in engines}
    medusa = None if meta["medusa"] is None else (meta["medusa"]["heads"], meta["medusa"]["top_k"])
    precision, draft_precision = precisions(meta)
    lane = Lane(cuda, reserve=arena_bytes(meta))
    spec = TrtTargetSpec(
        folder / t["greedy"],
        folder / t["rejection"] if t.get("rejection") else None,
        m["layers"],
        m["kv_heads"],
        m["head_dim"],
        target_hidden(meta),
        m["vocab"],
        meta["capacity"],
        medusa,
        profiles,
        precision,
    )
    engine = TrtEngine(spec, meta["max_seq_len"], max_batch_size, lane)

    def draft_net(e: dict[str, Any]) -> TrtEagleNet:
        return TrtEagleNet(
            folder / e["graph"],
            profiles["eagle"],
            layers=e["layers"],
            kv_heads=e["kv_heads"],
            head_dim=e["head_dim"],
            hidden_size=e["hidden"],
            top_k=e["top_k"],
            capacity=e["capacity"],
            max_batch_size=max_batch_size,
            precision=draft_precision,
            lane=lane,
        )

    return opened(folder, meta, config, engine, draft_net)
