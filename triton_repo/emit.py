"""Write a self-contained, relocatable Triton model repository around an engine folder (ONNX Runtime or TensorRT).

    <repo>/
      <model_name>/config.pbtxt, 1/model.py   the front model: text in, text out (clients call this; it relays
                                           to spec_decoder over a local socket and forwards cancellation)
      preprocessing/config.pbtxt, 1/model.py, 1/tokenizer.json
      spec_decoder/config.pbtxt, 1/model.py, 1/engine/   the engine folder (engine.json, ONNX graphs or TensorRT
                                                          engines, tokenizer.json, its build manifest.json)
      postprocessing/config.pbtxt, 1/model.py, 1/tokenizer.json
      <every model>/1/trtspec_runtime/     the code the models import (`triton_repo.runtime`), with runtime.json
      trtspec-repo.json                    what was emitted: settings, tensors, versions, endpoints' models

Engine files are hard-linked where the filesystem allows (else copied); the runtime is copied from the source
tree once and hard-linked into the other models. Nothing in the repository names a path outside it — no config
parameter, no manifest entry — so the folder may be moved or renamed and served from anywhere whose Python
environment has the third-party packages (`triton_repo.runtime.THIRD_PARTY`).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

from builder.files import link_or_copy
from triton_repo import tensors as T
from triton_repo.config import RepositorySettings, all_configs, render
from triton_repo.runtime import FOLDER, Carried, copy_runtime

BOOTSTRAP = Path(__file__).with_name("models") / "model.py"
INFO = "trtspec-repo.json"


def _tree(src: Path, dst: Path) -> None:
    for f in sorted(src.rglob("*")):
        if f.is_file():
            link_or_copy(f, dst / f.relative_to(src))


def emit(
    out: Path, engine_dir: Path, settings: RepositorySettings, carried: tuple[Carried, ...] = ()
) -> dict[str, Any]:
    """Write the repository into `out` (an empty folder); returns what trtspec-repo.json records. `carried`: the
    third-party method the engine's drafter is, its code copied into the runtime (`triton_repo.runtime.Carried`)."""
    if settings.model_name in T.RESERVED_NAMES:
        raise ValueError(
            f"triton.model_name {settings.model_name!r} collides with a composing model ({', '.join(T.RESERVED_NAMES)})"
        )
    engine_dir = Path(engine_dir)
    meta = json.loads((engine_dir / "engine.json").read_text(encoding="utf-8"))
    backend = meta.get("backend")
    if (backend == "tensorrt") != bool(settings.gpus):
        raise ValueError(
            f"a {backend} engine's spec_decoder runs on "
            f"{'GPUs (KIND_GPU): give settings.gpus' if backend == 'tensorrt' else 'the CPU: no gpus'}"
        )
    configs = all_configs(settings)
    for name, cfg in configs.items():
        (out / name / "1").mkdir(parents=True, exist_ok=True)
        (out / name / "config.pbtxt").write_text(render(cfg), encoding="utf-8")
    models = (T.PREPROCESSING, T.SPEC_DECODER, T.POSTPROCESSING, settings.model_name)
    first = out / models[0] / "1" / FOLDER
    runtime = copy_runtime(first, carried=carried)
    for name in models:
        shutil.copy2(BOOTSTRAP, out / name / "1" / "model.py")
        if name != models[0]:
            _tree(first, out / name / "1" / FOLDER)  # hard links to the first copy where the filesystem allows
    _tree(engine_dir, out / T.SPEC_DECODER / "1" / "engine")
    tokenizer = engine_dir / meta["tokenizer"]
    for name in (T.PREPROCESSING, T.POSTPROCESSING):
        link_or_copy(tokenizer, out / name / "1" / "tokenizer.json")
    info = {
        "ensemble": settings.model_name,  # the model clients call (the front model; the key predates it)
        "models": list(configs),
        "settings": {k: v for k, v in asdict(settings).items() if k != "extra"},
        "engine": {
            "label": meta.get("drafter", {}).get("method"),
            "backend": backend,
            "format": meta.get("format"),
            "max_batch_size": meta.get("max_batch_size"),
            "max_seq_len": meta.get("max_seq_len"),
            "versions": meta.get("versions", {}),
            "tensorrt": meta.get("tensorrt"),
        },
        "runtime": {
            "folder": FOLDER,
            "trtspec": runtime["trtspec"],
            "files": len(runtime["files"]),
            **({"carried": runtime["carried"]} if runtime["carried"] else {}),
        },
        "inputs": [
            {"name": t.name, "datatype": t.dtype, "dims": list(t.dims), "optional": t.optional} for t in T.CLIENT_INPUTS
        ],
        "outputs": [{"name": t.name, "datatype": t.dtype, "dims": list(t.dims)} for t in T.CLIENT_OUTPUTS],
    }
    (out / INFO).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return info
