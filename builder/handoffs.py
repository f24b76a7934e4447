"""What one build stage hands the next, and what a served repository reads: every hand-off as one typed model.

    source.json    load → export, engine, checkpoint, repo        `SourceJson`
    export.json    export → engine                                 `ExportJson`
    engine.json    engine → repo → spec_decoder (serving)          `OrtEngineJson` | `TensorrtEngineJson`
                   (TensorRT-LLM's engine.json is the bundle's lock, `builder.trtllm.compat`: plain JSON, below)
    build.json     engine (target.backend: trtllm) → the bundle    `TrtllmBuildJson`
    manifest.json  "info": what each stage records about its run   `*Info` (`StageContext.info`)

Each file carries its format (`"format": N`, the key manifest.json and engine.json always had). A reader meets a
file of another format — an old cache entry, a `trtspec pull` of an entry published by another trtspec, a
repository served by a newer one — and refuses it (`OtherFormat`, a UserError and a ValueError) with one message
naming the file, both formats and the command that rebuilds it; it never guesses at a layout it does not know.
Bump a model's FORMAT when its meaning changes: a stage's cache key covers this module (its code digest is the
stage's import closure), so every stage rebuilds under the new format.

Field shapes follow the writers: `builder.stages.load`, `builder.stages.export`, `builder.stages.engine`,
`builder.engines.tensorrt.folder.build_folder`, `builder.trtllm.build_cmd.BuildCommand.manifest`.

What must run where trtspec is not installed reads its JSON plainly and is not modelled here: the TensorRT-LLM
bundle's `check_engine.py` (`builder.trtllm.compat`, standard library only, inside NVIDIA's container) reads
build.json and writes and checks that backend's engine.json; the GPU check (devtools/gpu_check) reads
manifest.json and quantize.json on an image without pydantic. The Triton Python-backend models run with the
project's packages (pydantic among them: `triton_repo.runtime.CPU_THIRD_PARTY`) and read engine.json through
`builder.engines.folder.read_meta`, which checks it against these models.
"""

# trtllm: every stage hand-off model lives in this one module with its format (the trtllm stages' too)

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from builder.errors import UserError
from builder.speculative import registry

H = TypeVar("H", bound="Handoff")


class OtherFormat(UserError, ValueError):
    """An artifact of a format this trtspec does not read (or not one of ours at all): rebuild it. A ValueError
    too, as the engine folder readers have always raised."""


def rebuild_hint(recipe: str | None = None) -> str:
    return f"rebuild with `trtspec build {recipe or 'RECIPE'} --force`"


def refusal(path: Path, got: Any, want: int, recipe: str | None = None) -> OtherFormat:
    """The one message for a file of another format: what it is, both formats, who wrote it, the rebuild."""
    who = (
        "an older trtspec"
        if got is None or (isinstance(got, int) and got < want)
        else "a newer trtspec"
        if isinstance(got, int)
        else "something else"
    )
    return OtherFormat(
        f"format {got!r}, this trtspec reads format {want}: built by {who}: {rebuild_hint(recipe)}", location=str(path)
    )


class Handoff(BaseModel):
    """A JSON file one stage writes into its output folder and another reads (`FILE`, format `FORMAT`)."""

    model_config = ConfigDict(extra="forbid")
    FILE: ClassVar[str]
    FORMAT: ClassVar[int]

    format: int

    @classmethod
    def read(cls: type[H], folder: str | Path, recipe: str | None = None) -> H:
        """The model of `folder/FILE`; `OtherFormat` (naming `recipe` in the rebuild command) when it is missing,
        not JSON, of another format or not of this shape."""
        path = Path(folder) / cls.FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise OtherFormat(f"missing: {rebuild_hint(recipe)}", location=str(path)) from None
        except (OSError, ValueError) as exc:
            raise OtherFormat(f"not readable JSON ({exc}): {rebuild_hint(recipe)}", location=str(path)) from None
        return cls.validate_file(data, path, recipe)

    @classmethod
    def validate_file(cls: type[H], data: Any, path: Path, recipe: str | None = None) -> H:
        """`data` (the parsed file at `path`) as this model, its format checked first."""
        got = data.get("format") if isinstance(data, dict) else None
        if got != cls.FORMAT:
            raise refusal(path, got, cls.FORMAT, recipe)
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise OtherFormat(
                f"not a format {cls.FORMAT} {cls.FILE} ({where}: {first['msg']}): {rebuild_hint(recipe)}",
                location=str(path),
            ) from None

    def to_json(self) -> dict[str, Any]:
        """The file's content: every field the writer set (optional ones it never set stay out of the file)."""
        return self.model_dump(mode="json", exclude_unset=True)

    def write(self, folder: str | Path) -> Path:
        """Write `folder/FILE` (temp file, then rename: never half-written)."""
        path = Path(folder) / self.FILE
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(json.dumps(self.to_json(), indent=2) + "\n")
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def checked_drafter(value: dict[str, Any]) -> dict[str, Any]:
    """A stored drafter config (export.json, engine.json): its method's recipe section dumped as is, the static tree
    inline (`builder.stages.parts.Parts.drafter_config`), re-validated by that method's config class
    (`builder.speculative.registry.drafter_config`); a method this trtspec does not know is refused."""
    try:
        registry.drafter_config(value)
    except UserError as exc:
        raise ValueError(f"{exc.message} (allowed: {exc.allowed})") from None
    return value


# -- source.json (load) -------------------------------------------------------------------------------------------


class FileEntry(Strict):
    path: str  # relative to the checkpoint folder
    bytes: int
    sha256: str


class CheckpointFiles(Strict):
    dir: str
    files: list[FileEntry]
    safetensors: str | None = None  # the load stage's safetensors copy of a pickled checkpoint (relative)


class SourceJson(Handoff):
    """The checkpoints the build read, strictly checked by the load stage."""

    FILE: ClassVar[str] = "source.json"
    FORMAT: ClassVar[int] = 1

    model: CheckpointFiles
    tokenizer: str  # the folder holding tokenizer.json
    stop_ids: list[int]
    architecture: dict[str, Any]  # `builder.model.config.LlamaConfig` as a dict
    draft: CheckpointFiles | None = None  # Medusa heads / the EAGLE draft


# -- export.json (export) -----------------------------------------------------------------------------------------


class PrecisionJson(Strict):
    act: str
    kv: str


class MedusaHeads(Strict):
    heads: int
    top_k: int


class EagleGraph(Strict):
    layers: int
    kv_heads: int
    head_dim: int
    hidden: int
    top_k: int
    capacity: int  # KV capacity of the draft graph
    draft_vocab: int | None = None
    # EAGLE-3: the target layers (output-of-layer ids) whose outputs the target graphs' `hidden` is the draft's fc of
    aux_layers: list[int] | None = None


class ExportJson(Handoff):
    """The step graphs an export wrote (target-greedy/, target-rejection/, eagle/) and what the engine needs."""

    FILE: ClassVar[str] = "export.json"
    FORMAT: ClassVar[int] = 2  # 2: the drafter as its method's config (was a dict of its own per method)

    variant: str  # "ort" | "standard" (`builder.engines.ort.build.pick_variant`)
    capacity: int  # KV capacity of the target graphs: max_seq_len + room for draft nodes
    max_seq_len: int
    drafter: dict[str, Any]  # the drafter's config (`checked_drafter`)
    medusa: MedusaHeads | None
    eagle: EagleGraph | None
    fp8: bool
    precision: PrecisionJson
    draft_precision: PrecisionJson
    draft_weights: str | None
    tensorrt: dict[str, str] | None = None  # GPU targets: {graph: its TensorRT-form file}

    _drafter = field_validator("drafter")(checked_drafter)


# -- engine.json (engine; read when serving) ----------------------------------------------------------------------


class ModelShape(Strict):
    layers: int
    kv_heads: int
    head_dim: int
    hidden: int
    vocab: int


class EngineGraph(EagleGraph):
    graph: str  # the draft graph's file (relative)


class OrtTargets(Strict):
    greedy: str
    rejection: str | None = None
    greedy_plain: str | None = None  # the plain-steps twin (`builder.export.verify.plain_twin`)


class OrtEngineJson(Handoff):
    """An ONNX Runtime engine folder (cpu targets; `builder.engines.ort.load`)."""

    FILE: ClassVar[str] = "engine.json"
    FORMAT: ClassVar[int] = 2  # 2: the drafter as its method's config (`checked_drafter`)

    backend: Literal["onnxruntime"]
    variant: str
    recipe: str
    capacity: int
    max_seq_len: int
    max_batch_size: int
    model: ModelShape
    target: OrtTargets
    medusa: MedusaHeads | None
    eagle: EngineGraph | None
    drafter: dict[str, Any]
    tokenizer: str
    stop_ids: list[int]
    versions: dict[str, str]
    step_curve: dict[str, Any] | None = None  # `builder.tune.curve.StepCurve.to_json` form, timed by the stage
    # `builder.speculative.budget.BudgetRule.to_json` form, measured by the stage (None: no drafter)
    draft_budget: dict[str, Any] | None = None

    _drafter = field_validator("drafter")(checked_drafter)


class TensorrtTargets(Strict):
    greedy: str
    rejection: str | None = None


class TensorrtEngineJson(Handoff):
    """A TensorRT engine folder (GPU targets; `builder.engines.tensorrt.folder`)."""

    FILE: ClassVar[str] = "engine.json"
    FORMAT: ClassVar[int] = 2  # 2: the drafter as its method's config (`checked_drafter`)

    backend: Literal["tensorrt"]
    variant: str
    recipe: str
    capacity: int
    max_seq_len: int
    max_batch_size: int
    max_input_len: int
    model: ModelShape
    precision: PrecisionJson
    draft_precision: PrecisionJson
    target: TensorrtTargets
    medusa: MedusaHeads | None
    eagle: EngineGraph | None
    drafter: dict[str, Any]
    tokenizer: str
    stop_ids: list[int]
    versions: dict[str, str]
    tensorrt: dict[str, Any]  # the version lock (`builder.engines.tensorrt.lock.engine_lock`)
    engines: dict[str, dict[str, Any]]  # per graph: `build_engine`'s manifest
    # `builder.speculative.budget.BudgetRule.to_json` form, measured on the GPU it was built on (None: no drafter)
    draft_budget: dict[str, Any] | None = None

    _drafter = field_validator("drafter")(checked_drafter)


ENGINE_JSONS: dict[str, type[Handoff]] = {"onnxruntime": OrtEngineJson, "tensorrt": TensorrtEngineJson}


def read_engine_json(folder: str | Path) -> dict[str, Any]:
    """engine.json of one of our own engine folders, checked against its backend's model; the file's content.
    `OtherFormat` for a backend this trtspec does not open, another format, or another shape."""
    path = Path(folder) / "engine.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise OtherFormat("no engine.json (not an engine folder of `trtspec build`)", location=str(path)) from None
    except json.JSONDecodeError as exc:
        raise OtherFormat(f"not JSON ({exc})", location=str(path)) from None
    backend = data.get("backend") if isinstance(data, dict) else None
    if backend not in ENGINE_JSONS:
        raise OtherFormat(
            f"backend {backend!r} is none this trtspec opens", location=str(path), allowed=", ".join(ENGINE_JSONS)
        )
    recipe = data.get("recipe") if isinstance(data.get("recipe"), str) else None
    ENGINE_JSONS[backend].validate_file(data, path, recipe)
    return data


# -- build.json (engine, target.backend: trtllm) -----------------------------------------------------------------
# In this module with the other hand-offs; the bundle's check_engine.py reads the same file as plain JSON.


class BuildFlag(Strict):
    flag: str
    value: str | None
    recipe_field: str
    why: str


class TrtllmBuildJson(Handoff):
    """The exact trtllm-build command and where every flag comes from (`builder.trtllm.build_cmd`)."""

    FILE: ClassVar[str] = "build.json"
    FORMAT: ClassVar[int] = 1

    tool: Literal["trtllm-build"]
    tensorrt_llm: str
    tensorrt: str | None
    target: dict[str, Any]  # compute capability, device, world size, … (`BuildCommand.target`)
    argv: list[str]
    flags: list[BuildFlag]
    notes: list[dict[str, str]]  # settings that are not build flags, and where they go


HANDOFFS: tuple[type[Handoff], ...] = (SourceJson, ExportJson, TrtllmBuildJson)  # by file name, engine.json aside
# engine.json of this backend is the TensorRT-LLM bundle's lock, written and checked by its standard-library script
# (`builder.trtllm.compat`, which this module must not import: build_cmd there imports TrtllmBuildJson from here)
BUNDLE_LOCKS = ("trtllm",)


def check_folder(folder: str | Path, recipe: str | None = None) -> None:
    """Refuse a stage output holding a hand-off of another format (`trtspec pull`, a cached entry): every hand-off
    file at the top of `folder` is read by its model, engine.json by `read_engine_json` (BUNDLE_LOCKS aside)."""
    folder = Path(folder)
    for model in HANDOFFS:
        if (folder / model.FILE).is_file():
            model.read(folder, recipe)
    engine = folder / "engine.json"
    if engine.is_file():
        try:
            backend = json.loads(engine.read_text(encoding="utf-8")).get("backend")
        except (OSError, ValueError, AttributeError):
            backend = None
        if backend not in BUNDLE_LOCKS:
            read_engine_json(folder)


# -- manifest.json "info": what each stage records about its run --------------------------------------------------


class StageInfo(BaseModel):
    """The facts a stage records in its manifest (`StageContext.info`)."""

    model_config = ConfigDict(extra="forbid")

    def to_json(self) -> dict[str, Any]:
        """The manifest's "info" (values JSON cannot spell are written as text by the manifest's writer)."""
        return self.model_dump(exclude_unset=True)


class LoadInfo(StageInfo):
    parameters: int
    dtype: str


class QuantizeInfo(StageInfo):
    source: str  # calibrated | pre-quantized
    quantizers: dict[str, Any]
    quantized_linears: int
    kv_layers: int
    scales: dict[str, Any]
    placement: dict[str, Any] | None
    modelopt: dict[str, Any]
    warnings: list[str]


class ExportInfo(StageInfo):
    variant: str
    capacity: int
    fp8: bool
    precision: dict[str, str]
    quality: dict[str, Any] | None = None  # FP8 exports: perplexity, token agreement, τ per method


class OrtEngineInfo(StageInfo):
    variant: str
    label: str
    kv_bytes: int
    step_curve: dict[str, Any] | None = None  # source, threads, batches, batch-1 ms per tree size
    draft_budget: dict[str, Any] | None = None  # the budget the rule picks per batch size, and τ per budget


class TensorrtEngineInfo(StageInfo):
    variant: str
    tensorrt: dict[str, Any]
    draft_budget: dict[str, Any] | None = None  # the budget the rule picks per batch size, and τ per budget
    engine_bytes: dict[str, int]


class RepoInfo(StageInfo):
    ensemble: str
    models: list[str]
    decoupled: bool
    engine_backend: str
    gpus: list[int]
    runtime: dict[str, Any]


# The TensorRT-LLM backend's stages (builder/stages/backends/trtllm/): their facts, with the other stages' here.


class CheckpointInfo(StageInfo):
    mapping: dict[str, Any] | None
    quantization: dict[str, Any] | None
    total_bytes: int | None
    max_draft_len: int | None


class TrtllmEngineInfo(StageInfo):
    trtllm: str | None
    tensorrt: str | None
    gpu: Any
    world_size: int


class TrtllmRepoInfo(StageInfo):
    ensemble: str
    models: list[str]
    decoding_mode: str | None
