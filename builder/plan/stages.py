"""Build stages, their inputs and content-addressed cache keys.

A stage's key hashes the recipe fields it reads, the identity of the files it reads (local
checkpoints: config.json contents plus every file's name, size and sha256 — never file times, so a fresh
clone or a pulled cache hits; hub checkpoints: repo and revision), its upstream stage's key, the trtspec
version, the tools' versions and a digest of the stage's own source code (so a changed exporter never
reuses a stale graph). Same key ⇒ same output ⇒ cache hit.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import builder
from builder.recipe.loader import LoadedRecipe
from builder.recipe.resolve import parse_checkpoint, tree_choices_spec, tree_field
from builder.speculative.choices import load_choices
from builder.versions import tool_versions


@dataclass
class Stage:
    name: str
    description: str
    reads: list[str]  # recipe field paths
    upstream: str | None
    key: str = ""
    inputs: dict[str, Any] = field(default_factory=dict)

    def output_dir(self, cache_dir: Path) -> Path:
        return cache_dir / self.name / self.key


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:20]


def checkpoint_identity(text: str, recipe_dir: Path) -> dict[str, Any]:
    ref = parse_checkpoint(text, recipe_dir)
    if ref.local is None:
        return {"repo": ref.repo, "revision": ref.revision}
    if not ref.local.is_dir():
        return {"path": str(ref.local), "missing": True}
    files = sorted(p for p in ref.local.rglob("*") if p.is_file())
    cfg = ref.local / "config.json"
    with FileHashes() as hashes:
        return {
            "config": hashlib.sha256(cfg.read_bytes()).hexdigest() if cfg.is_file() else None,
            "files": [(str(p.relative_to(ref.local)), p.stat().st_size, hashes.sha256(p)) for p in files],
        }


class FileHashes:
    """sha256 of checkpoint files by content, remembered per host by (path, size, mtime, inode).

    Keys must not depend on file times (a fresh clone or a restored cache has new ones), but reading a 70B
    checkpoint on every `plan` is too slow: the digest of an unchanged file is looked up in
    `$TRTSPEC_HASH_CACHE` (default `$XDG_CACHE_HOME/trtspec/file-hashes.json`), written atomically.
    """

    def __init__(self) -> None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        self.path = Path(os.environ.get("TRTSPEC_HASH_CACHE") or os.path.join(base, "trtspec", "file-hashes.json"))
        self.known: dict[str, list] = {}
        self.changed = False

    def __enter__(self) -> "FileHashes":
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            self.known = data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            self.known = {}
        return self

    def sha256(self, path: Path) -> str:
        from builder.files import sha256_file

        st = path.stat()
        stamp = [st.st_size, st.st_mtime_ns, st.st_ino]
        key = str(path.resolve())
        hit = self.known.get(key)
        if isinstance(hit, list) and len(hit) == 4 and hit[:3] == stamp:
            return str(hit[3])
        digest = sha256_file(path)
        self.known[key] = [*stamp, digest]
        self.changed = True
        return digest

    def __exit__(self, *exc: object) -> None:
        if not self.changed:
            return
        try:  # best effort: a read-only home only costs re-hashing next time
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
            tmp.write_text(json.dumps(self.known), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError:
            pass


def _get(data: dict[str, Any], dotted: str) -> Any:
    node: Any = data
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


ROOT = Path(__file__).resolve().parents[2]  # the folder holding builder/, plugins/, triton_repo/
STAGE_CODE = {  # source files (or folders of them) whose change must rebuild the stage
    "load": (
        "builder/stages/load.py",
        "builder/stages/parts.py",
        "builder/model",
        # a pre-quantized checkpoint is recognised and dequantized by these (Parts.model)
        "builder/quantize/prequantized.py",
        "builder/quantize/hf_quant.py",
        "builder/quantize/checkpoint.py",
    ),
    "quantize": ("builder/stages/quantize.py", "builder/quantize"),
    "export": (
        "builder/stages/export.py",
        "builder/stages/parts.py",
        "builder/export",
        "plugins/tree_verify",
        "builder/speculative/drafters.py",
    ),
    "engine": ("builder/stages/engine.py", "builder/engines/ort", "builder/engines/tensorrt"),
    # the repository carries a copy of the serving runtime (triton_repo/runtime.py: the models' import closure,
    # computed at emit time); these paths are a superset of that closure, so any change to it rebuilds the repo
    "repo": (
        "builder/stages/repo.py",
        "triton_repo",
        "builder/__init__.py",
        "builder/errors.py",
        "builder/section.py",
        "builder/speculative",
        "builder/engines",
        "builder/export/__init__.py",
        "builder/export/contract.py",
        "plugins/__init__.py",
        "plugins/tree_verify",
    ),
}
TRTLLM_STAGE_CODE = {  # the trtllm backend's stages that differ (load and quantize are shared)
    "checkpoint": ("builder/stages/checkpoint.py", "builder/stages/parts.py", "builder/trtllm/checkpoint"),
    "engine": (
        "builder/stages/engine.py",
        "builder/trtllm/build_cmd.py",
        "builder/trtllm/engine.py",
        "builder/stages/trtllm_engine.py",
        "builder/trtllm/compat.py",
    ),  # compat: engine.json's code
    "repo": ("builder/stages/repo.py", "builder/trtllm/repo_settings.py", "triton_repo/trtllm"),
}


STAGE_TOOLS = {
    "load": ("torch", "safetensors", "transformers"),
    "quantize": ("torch", "nvidia-modelopt", "transformers"),
    "export": ("torch", "onnx", "onnxruntime"),
    "checkpoint": ("torch", "safetensors"),
    "engine": ("onnxruntime", "onnx", "tensorrt"),
    "repo": ("onnxruntime", "tritonclient", "nvidia-pytriton"),
}
TRTLLM_STAGE_TOOLS = {"engine": ("tensorrt-llm", "tensorrt"), "repo": ("tritonclient",)}


def stage_tools(stage: str, backend: str = "onnxruntime") -> tuple[str, ...]:
    """The distributions whose versions a stage's output depends on (in its cache key and manifest)."""
    if backend == "trtllm" and stage in TRTLLM_STAGE_TOOLS:
        return TRTLLM_STAGE_TOOLS[stage]
    return STAGE_TOOLS[stage]


def gpu_identity() -> list[str]:
    """The GPUs of this host as "name sm<cc>" (nvidia-smi), [] where there is none: an engine is built for one."""
    from builder.trtllm.compat import gpus_here

    return [f"{name} sm{cc[0]}{cc[1]}" for name, cc in gpus_here()]


def code_digest(stage: str, backend: str = "onnxruntime") -> str:
    """sha256 over the stage's source files (names and bytes), in a stable order."""
    h = hashlib.sha256()
    table = TRTLLM_STAGE_CODE if backend == "trtllm" and stage in TRTLLM_STAGE_CODE else STAGE_CODE
    for rel in table.get(stage, ()):
        path = ROOT / rel
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.is_file() else []
        for f in files:
            h.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


STAGES = [
    (
        "load",
        "HF checkpoint + draft → torch reference",
        ["model", "speculative.method", "speculative.checkpoint", "speculative.allow_pickle"],
    ),
    ("quantize", "modelopt FP8 PTQ (weights, activations, KV)", ["quantization"]),
    ("export", "ONNX step + draft graphs, FP8 Q/DQ", ["speculative", "build", "target.device"]),
    ("engine", "ORT sessions (cpu) | TensorRT + tree_verify (GPU)", ["target", "parallelism", "build"]),
    ("repo", "Triton repository (pre → spec_decoder → post)", ["triton"]),
]
TRTLLM_STAGES = [  # target.backend: trtllm (TensorRT-LLM 1.2.x)
    STAGES[0],
    STAGES[1],
    (
        "checkpoint",
        "TensorRT-LLM checkpoint: config.json + rank{N}.safetensors (TP/PP, FP8)",
        [
            "model",
            "speculative",
            "parallelism",
            "build.max_draft_len",
            "trtllm.version",
            "trtllm.use_parallel_embedding",
        ],
    ),
    (
        "engine",
        "trtllm-build (GPU host with TensorRT-LLM)",
        ["target", "parallelism", "build", "speculative", "trtllm"],
    ),
    (
        "repo",
        "inflight_batcher_llm repository (TensorRT-LLM Triton backend)",
        ["triton", "trtllm", "speculative", "build", "parallelism", "target"],
    ),
]


def _source_identity(loaded: LoadedRecipe) -> str:
    """The calibration source EAGLE's draft vocabulary is counted from: a builtin name, or a file's name and hash."""
    src = loaded.recipe.quantization.calibration.source
    if src.startswith("builtin:"):
        return src
    path = Path(src) if Path(src).is_absolute() else loaded.dir_of(("quantization", "calibration", "source")) / src
    if not path.is_file():
        return f"{src}#missing"
    with FileHashes() as hashes:
        return f"{src}#{hashes.sha256(path)}"


def stage_table(loaded: LoadedRecipe) -> list[tuple[str, str, list[str]]]:
    """The recipe's stages in order: (name, what it does, recipe fields it reads)."""
    return TRTLLM_STAGES if loaded.recipe.target.engine_backend == "trtllm" else STAGES


def plan_stages(loaded: LoadedRecipe) -> list[Stage]:
    recipe, data = loaded.recipe, loaded.recipe.model_dump(mode="json")
    quantized = recipe.quantization.mode != "none" or recipe.quantization.kv_cache != "model_dtype"
    stages: list[Stage] = []
    upstream: str | None = None
    backend = recipe.target.engine_backend
    for name, description, reads in stage_table(loaded):
        if name == "quantize" and not quantized:
            continue
        stage = Stage(name, description, reads, upstream)
        stage.inputs = {path: _get(data, path) for path in reads}
        if name == "export":
            # a developer override of the ONNX Runtime graph variant (builder.engines.ort.build.pick_variant)
            stage.inputs["env.TRTSPEC_ORT_VARIANT"] = os.environ.get("TRTSPEC_ORT_VARIANT")
        if name == "export" or (backend == "trtllm" and name in ("checkpoint", "engine", "repo")):
            choices = tree_choices_spec(recipe)  # the tree's contents, not only its name or file path
            if choices is not None:
                stage.inputs["speculative.tree#choices"] = load_choices(choices, loaded.dir_of(tree_field(recipe)))
        if name == "export" and getattr(recipe.speculative, "draft_vocab", None) is not None:
            stage.inputs["quantization.calibration.source"] = _source_identity(loaded)  # the counted text
        if name == "load":
            stage.inputs["model.checkpoint#files"] = checkpoint_identity(
                recipe.model.checkpoint, loaded.dir_of(("model", "checkpoint"))
            )
            draft = getattr(recipe.speculative, "checkpoint", None)
            if draft:
                stage.inputs["speculative.checkpoint#files"] = checkpoint_identity(
                    draft, loaded.dir_of(("speculative", "checkpoint"))
                )
        # Outputs depend on the tools that made them (an upgraded exporter or TensorRT never reuses a stale
        # output) and an engine on the GPU it was built for.
        stage.inputs["tools"] = tool_versions(*stage_tools(name, backend))
        if name == "engine" and recipe.target.device != "cpu":
            stage.inputs["host.gpus"] = gpu_identity()
        stage.key = _digest(
            {
                "stage": name,
                "inputs": stage.inputs,
                "upstream": upstream,
                "trtspec": builder.__version__,
                "code": code_digest(name, backend),
            }
        )
        upstream = stage.key
        stages.append(stage)
    return stages
