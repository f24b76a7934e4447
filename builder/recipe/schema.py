"""The recipe schema: one pydantic model drives validation, the JSON schema, --set and cache keys.

Method-specific sections live beside their method (builder/speculative/<method>/config.py); the `speculative`
union is built from the method registry (`builder.speculative.registry`), so an installed method's section is
part of the schema.
Every number has an upper bound an engine can represent (token counts fit in int32 with room for
products such as max_batch_size × max_seq_len) and every float is finite; strings have a length cap.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import Field, field_validator

from builder.recipe.draft_training import DraftTraining
from builder.recipe.trtllm import TrtllmSection
from builder.section import Section
from builder.speculative import registry
from builder.speculative.none.config import NoSpeculation

DEVICES = ("cpu", "h100", "h100-pcie", "h200", "a100", "l40s")
MAX_TOKENS = 1_048_576  # 2**20: the longest sequence (prompt + output) any field may name
MAX_PATH = 4096  # characters in a path or hf:// reference (PATH_MAX)


class Architecture(Section):
    """Llama 3 architecture numbers (from config.json when the checkpoint is local)."""

    num_layers: int = Field(gt=0, le=1024, description="Decoder layers (num_hidden_layers).")
    hidden_size: int = Field(gt=0, le=65_536, description="Model width.")
    num_attention_heads: int = Field(gt=0, le=1024, description="Query heads.")
    num_kv_heads: int = Field(gt=0, le=1024, description="Key/value heads (GQA).")
    intermediate_size: int = Field(gt=0, le=262_144, description="SwiGLU MLP width.")
    vocab_size: int = Field(gt=0, le=1_048_576, description="Vocabulary size (128256 for Llama 3).")
    rope_theta: float = Field(  # allow_inf_nan=False: .nan / .inf are valid YAML floats, never valid settings
        gt=0, le=1e12, allow_inf_nan=False, description="Rotary base (500000 for Llama 3)."
    )
    max_position_embeddings: int = Field(
        8192, gt=0, le=MAX_TOKENS, description="Context length the model was trained for."
    )
    head_dim: int | None = Field(None, gt=0, le=1024, description="Per-head width; default hidden_size / heads.")
    tie_word_embeddings: bool = Field(False, description="lm_head shares the embedding matrix.")

    @property
    def dim_per_head(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads


class ModelSection(Section):
    family: Literal["llama3"] = Field("llama3", description="Model family. Only Llama 3 (LlamaForCausalLM).")
    checkpoint: str = Field(
        max_length=MAX_PATH,
        description="HF checkpoint: a local directory (relative paths are relative to the recipe file) "
        "or hf://org/name[@revision].",
    )
    dtype: Literal["bf16", "fp16", "fp32"] = Field("bf16", description="Dtype of unquantized weights and activations.")
    tokenizer: str | None = Field(
        None, max_length=MAX_PATH, description="Tokenizer directory or hf:// ref; defaults to the checkpoint."
    )
    architecture: Architecture | None = Field(
        None, description="Architecture numbers; required for planning when the checkpoint is not local."
    )
    allow_pickle: bool = Field(
        False,
        description="Read a target checkpoint that has only pickled weights: pytorch_model.bin, or the shards "
        "pytorch_model.bin.index.json lists, with torch.load(weights_only=True) — plain tensors only, no code "
        "objects. Nothing else pickled is ever read. False (default): such a checkpoint is refused; convert it "
        "once with `trtspec convert-draft` instead.",
    )


class Calibration(Section):
    source: str = Field(
        "builtin:stdlib",
        max_length=MAX_PATH,
        description="builtin:stdlib (Python standard-library source), builtin:humaneval, or a JSONL file "
        "with a 'text' field per line (relative to the recipe).",
    )
    num_samples: int = Field(64, gt=0, le=100_000, description="Calibration sequences.")
    seq_len: int = Field(256, gt=0, le=131_072, description="Tokens per calibration sequence.")

    @field_validator("source")
    @classmethod
    def _source(cls, v: str) -> str:
        if v.startswith("builtin:") and v not in ("builtin:stdlib", "builtin:humaneval"):
            raise ValueError(
                f"unknown builtin source {v!r} (allowed: builtin:stdlib, builtin:humaneval, a .jsonl path)"
            )
        if not v.startswith("builtin:") and not v.endswith(".jsonl"):
            raise ValueError(
                f"{v!r} is neither a builtin source nor a .jsonl path (allowed: builtin:stdlib, builtin:humaneval, *.jsonl)"
            )
        return v


class Quantization(Section):
    mode: Literal["none", "fp8"] = Field(
        "none",
        description="fp8: FP8 E4M3 weights and activations — modelopt PTQ (on this host's CUDA GPUs in model.dtype, "
        "else the CPU in float32), or, when model.checkpoint is a modelopt FP8 checkpoint (unified HF format: "
        "hf_quant_config.json / quantization_config), its own FP8 weights and scales without calibration (fp8 is "
        "then required).",
    )
    kv_cache: Literal["model_dtype", "fp8"] = Field(
        "model_dtype", description="KV cache dtype. fp8 from a pre-quantized checkpoint needs its k/v scales."
    )
    calibration: Calibration = Field(
        default_factory=Calibration,
        description="Calibration data for FP8 scales (ignored, with a warning, for a pre-quantized checkpoint).",
    )
    exclude_modules: list[Annotated[str, Field(max_length=256)]] = Field(
        default_factory=lambda: ["lm_head", "embed_tokens", "medusa_heads", "eagle_draft", "eagle3_draft"],
        max_length=256,
        description="Module name patterns kept in the model dtype.",
    )


# every registered method's section (`builder.speculative.registry`: the built-in ones, then installed ones)
if TYPE_CHECKING:  # the union exists at run time only (installed methods join it): any section, to a type checker
    Speculative = Any
else:
    Speculative = Annotated[Union[registry.configs()], Field(discriminator="method")]


class Parallelism(Section):
    tp: int = Field(1, gt=0, le=64, description="Tensor-parallel ranks.")
    pp: int = Field(1, gt=0, le=64, description="Pipeline-parallel ranks.")


class Build(Section):
    max_batch_size: int = Field(8, gt=0, le=4096, description="Sequences batched per engine step.")
    max_input_len: int = Field(1024, gt=0, le=MAX_TOKENS, description="Longest prompt, in tokens.")
    max_seq_len: int = Field(2048, gt=0, le=MAX_TOKENS, description="Longest prompt + generated sequence, in tokens.")
    max_num_tokens: int = Field(
        8192, gt=0, le=16_777_216, description="Tokens per engine pass across the batch (≤ 2**24, int32-safe)."
    )
    max_draft_len: int | None = Field(
        None,
        ge=0,
        le=2048,
        description="Draft tokens per step; derived from the method when omitted, checked when given.",
    )
    tokens_per_block: int = Field(32, gt=0, le=1024, description="Paged KV cache block size (a power of two).")

    @field_validator("tokens_per_block")
    @classmethod
    def _pow2(cls, v: int) -> int:
        if v & (v - 1):
            raise ValueError(f"tokens_per_block must be a power of two, got {v}")
        return v


class Target(Section):
    device: Literal["cpu", "h100", "h100-pcie", "h200", "a100", "l40s"] = Field(
        "cpu", description="Where the engine runs (cpu: ONNX Runtime; GPUs: TensorRT)."
    )
    gpus: int = Field(1, gt=0, le=64, description="GPUs used; must equal tp × pp on GPU targets.")
    backend: Literal["onnxruntime", "tensorrt", "trtllm", "trtllm-llmapi"] | None = Field(
        None,
        description="Engine backend; default onnxruntime on cpu, tensorrt on GPUs. trtllm: a TensorRT-LLM 1.2.x "
        "checkpoint, trtllm-build command and inflight_batcher_llm repository (settings in the trtllm section). "
        "trtllm-llmapi: TensorRT-LLM's PyTorch / LLM-API flow — a modelopt FP8 HF checkpoint, the LLM-API options "
        "file, a Triton llmapi repository and a trtllm-serve launch (docs/trtllm-llmapi.md).",
    )
    runtime_reserve_gib: float = Field(
        2.0,
        ge=0,
        le=1024,
        allow_inf_nan=False,
        description="GPU memory kept for the CUDA context, cuBLAS/TensorRT workspaces (planning).",
    )

    @property
    def engine_backend(self) -> str:
        return self.backend or ("onnxruntime" if self.device == "cpu" else "tensorrt")


class Ports(Section):
    http: int = Field(8000, gt=0, lt=65536, description="HTTP port.")
    grpc: int = Field(8001, gt=0, lt=65536, description="gRPC port.")
    metrics: int = Field(8002, gt=0, lt=65536, description="Metrics port.")


class Instances(Section):
    preprocessing: int = Field(1, gt=0, le=64, description="Tokenizer model instances.")
    spec_decoder: int = Field(1, gt=0, le=64, description="Decoding-loop model instances.")
    postprocessing: int = Field(1, gt=0, le=64, description="Detokenizer model instances.")


class TritonSection(Section):
    model_name: str = Field(
        "trtspec",
        pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$",
        max_length=255,
        description="Name of the ensemble model clients call.",
    )
    instances: Instances = Field(default_factory=Instances, description="Instance counts per model.")
    max_queue_delay_us: int = Field(100, ge=0, le=60_000_000, description="Dynamic-batching queue delay (≤ 60 s).")
    decoupled: bool = Field(True, description="Stream tokens as they are accepted (decoupled transaction policy).")
    kv_cache_free_gpu_mem_fraction: float = Field(
        0.9,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="Share of GPU memory left free after weights that the KV cache may take.",
    )
    exclude_input_in_output: bool = Field(True, description="Return generated tokens only.")
    max_queue_size: int = Field(
        64,
        ge=1,
        le=65_536,
        description="Requests waiting for a decoding slot; past it new requests are refused at once with an "
        "overload error (trtllm: the tensorrt_llm model's default_queue_policy.max_queue_size).",
    )
    request_timeout_s: float = Field(
        600.0,
        gt=0,
        le=86_400,
        allow_inf_nan=False,
        description="Default per-request deadline in seconds (a request's `timeout_s` parameter may shorten it); a "
        "request past it ends with a deadline error and frees its slot.",
    )
    bind_address: str = Field(
        "127.0.0.1", max_length=255, description="Address the server binds (loopback unless told otherwise)."
    )
    ports: Ports = Field(default_factory=Ports, description="Server ports.")
    draft_schedule: list[Annotated[list[Annotated[int, Field(ge=1, le=4096)]], Field(min_length=2, max_length=2)]] = (
        Field(
            default_factory=list,
            max_length=64,
            description="Draft-node budget per batch size for the served decoding loop: [[max_batch, max_nodes], …] with "
            "max_batch strictly increasing (1..4096) and max_nodes 1..4096 counting the whole tree, root included (1 = "
            "speculation off). A step with b sequences uses the first entry with b <= max_batch; past the last entry "
            "speculation is off. Static trees keep their first max_nodes nodes, Lookahead lowers G, EAGLE-2 caps "
            "total_nodes. Empty (default): the full draft at every batch size. E.g. [[1, 64], [4, 16], [8, 1]].",
        )
    )

    @field_validator("draft_schedule")
    @classmethod
    def _schedule(cls, v: list[list[int]]) -> list[list[int]]:
        batches = [b for b, _ in v]
        if any(x >= y for x, y in zip(batches, batches[1:])):
            raise ValueError(f"draft_schedule max_batch values must strictly increase, got {batches}")
        return v


class Bench(Section):
    concurrency: list[Annotated[int, Field(gt=0, le=4096)]] = Field(
        default_factory=lambda: [1, 2, 4, 8],
        min_length=1,
        max_length=64,
        description="perf_analyzer concurrency levels (each 1..4096, at most 64 levels).",
    )
    input_len: int = Field(128, gt=0, le=MAX_TOKENS, description="Prompt tokens per request.")
    output_len: int = Field(128, gt=0, le=MAX_TOKENS, description="Generated tokens per request.")
    prompt_source: str = Field(
        "builtin:humaneval",
        max_length=MAX_PATH,
        description="builtin:humaneval, builtin:synthetic, or a JSONL file with 'text'.",
    )
    measurement_window_ms: int = Field(
        10_000, gt=0, le=3_600_000, description="perf_analyzer measurement interval (≤ 1 hour)."
    )


class Recipe(Section):
    """A trtspec recipe: what to build, for which hardware, and how to serve and measure it."""

    model: ModelSection = Field(description="Target model.")
    quantization: Quantization = Field(default_factory=Quantization, description="Quantization settings.")
    speculative: Speculative = Field(
        default_factory=lambda: NoSpeculation(method="none"), description="Speculative-decoding method."
    )
    parallelism: Parallelism = Field(default_factory=Parallelism, description="Model parallelism.")
    build: Build = Field(default_factory=Build, description="Engine build limits.")
    target: Target = Field(default_factory=Target, description="Target hardware.")
    trtllm: TrtllmSection = Field(
        default_factory=TrtllmSection, description="TensorRT-LLM settings (used when target.backend is trtllm)."
    )
    triton: TritonSection = Field(default_factory=TritonSection, description="Triton model repository.")
    bench: Bench = Field(default_factory=Bench, description="Benchmark settings.")
    draft_training: DraftTraining | None = Field(
        None,
        description="How `trtspec train-draft` trains the speculative draft for this target (null: not trained here).",
    )


def schema_text() -> str:
    """The recipe JSON schema as committed in recipes/schema.json."""
    schema = Recipe.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "trtspec recipe"
    schema.setdefault("properties", {})["extends"] = {
        "description": "Recipe(s) this one extends: a path relative to this file, or a list merged in order.",
        "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
    }
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"
