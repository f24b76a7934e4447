"""Memory plan per tensor-parallel rank (see DESIGN.md, "Memory plan"): TensorRT-LLM's paged KV cache
(target.backend trtllm). trtspec's own engines (tensorrt, onnxruntime) hold per-slot contiguous KV caches in
their graphs' real dtypes: `builder.plan.own_engines` (`builder.plan.report` picks by backend).

weights   Σ params × bytes(dtype) / tp for sharded matrices (decoder linears, vocab-parallel embedding
          and lm_head, draft heads); norms and FP8 scales are replicated on every rank. Recipes that
          sample (speculative.verification: rejection) hold the target twice: a greedy and a rejection
          step engine.
kv/token  2 × layers × ceil(kv_heads / tp) × head_dim × bytes(kv dtype)   (+ the EAGLE layer's own)
free      device memory − weights − runtime reserve − activations
kv budget free × kv_cache_free_gpu_mem_fraction, in paged blocks of tokens_per_block tokens
sequences blocks ÷ ceil((max_seq_len + max_draft_len) / tokens_per_block)
trtllm    (target.backend: trtllm) one engine (TensorRT-LLM samples in its runtime: no rejection copy), the
          embedding replicated on every rank unless trtllm.use_parallel_embedding, KV heads duplicated to one
          per rank when kv_heads < tp (ceil above), blocks capped by trtllm.max_tokens_in_paged_kv_cache;
          EAGLE is num_eagle_layers (= tree depth) EagleNets, each with the draft layer (and its KV), fc, an
          embedding table and an LM head.
With pp > 1 each pipeline stage holds ceil(layers / pp) layers; the first adds the embedding, the last
the lm_head and draft weights. The plan reports the most loaded stage.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field

from builder.recipe.gpus import GPUS
from builder.recipe.schema import Architecture, Recipe

DTYPE_BYTES = {"fp8": 1, "bf16": 2, "fp16": 2, "fp32": 4}
FP8_SCALE_BYTES = 8  # one fp32 weight scale + one fp32 input scale per quantized linear
GIB = 2**30


@dataclass
class Component:
    name: str  # decoder, embed_tokens, lm_head, medusa_heads, eagle_draft, norms
    params: int  # per rank
    dtype: str
    bytes: int


@dataclass
class MemoryPlan:
    device: str
    device_bytes: int
    tp: int
    pp: int
    components: list[Component] = field(default_factory=list)
    weight_bytes: int = 0
    weight_bytes_by_dtype: dict[str, int] = field(default_factory=dict)
    runtime_reserve_bytes: int = 0
    activation_bytes: int = 0
    kv_bytes_per_token: int = 0
    free_bytes: int = 0
    kv_cache_fraction: float = 0.9
    kv_budget_bytes: int = 0
    tokens_per_block: int = 32
    kv_dtype: str = "bf16"
    kv_blocks: int = 0
    kv_tokens: int = 0
    tokens_per_sequence: int = 0
    concurrent_sequences: int = 0
    headroom_bytes: int = 0
    fits: bool = True
    problems: list[str] = field(default_factory=list)
    layout: str = ""  # what the plan assumed of the engines (own engines: dtypes, KV layout, scratch)
    scratch_bytes: dict[str, int] = field(default_factory=dict)  # own engines: "engine/profile" -> estimate
    io_slot_bytes: dict[str, int] = field(default_factory=dict)  # tensorrt: device I/O slots per engine
    pinned_host_bytes: int = 0  # tensorrt: the I/O slots' pinned host staging (host RAM, not the GPU)
    draft_kv_bytes_per_token: int = 0  # own engines: the EAGLE draft's KV per token (model.dtype)

    def to_json(self) -> dict:
        return asdict(self)


def _layer_linear_params(a: Architecture) -> int:
    hd = a.dim_per_head
    attn = a.hidden_size * hd * (a.num_attention_heads * 2 + a.num_kv_heads * 2)  # q, o + k, v
    return attn + 3 * a.hidden_size * a.intermediate_size


def _draft_components(recipe: Recipe, a: Architecture, levels: int) -> list[tuple[str, int, int]]:
    """(name, sharded params, replicated params) of the drafter's own weights; `levels`: the EAGLE tree's depth."""
    spec, h = recipe.speculative, a.hidden_size
    if spec.method == "medusa":
        per_head = spec.num_layers * (h * h + h) + h * a.vocab_size
        return [("medusa_heads", spec.num_heads * per_head, 0)]
    if spec.method == "eagle":
        layer = 2 * h * h + h + _layer_linear_params(a)
        if recipe.target.engine_backend != "trtllm":
            return [("eagle_draft", layer, 2 * h)]
        # TensorRT-LLM's EagleForCausalLM holds num_eagle_layers identical EagleNets (one per tree level),
        # each with the draft layer, fc, its own embedding table and LM head (models/eagle/model.py).
        vh = a.vocab_size * h
        embed = (vh, 0) if recipe.trtllm.use_parallel_embedding else (0, vh)
        n = levels
        return [(f"eagle_nets (× {n})", n * (layer + vh + embed[0]), n * (2 * h + embed[1]))]
    return []



def _dtype_of(recipe: Recipe, name: str) -> str:
    q = recipe.quantization
    pattern = "eagle_draft" if name.startswith("eagle_nets") else name  # trtllm's EagleNets are the EAGLE draft
    if q.mode == "fp8" and pattern not in q.exclude_modules and name != "norms":
        return "fp8"
    return recipe.model.dtype


def weight_components(recipe: Recipe, a: Architecture, levels: int = 1) -> list[Component]:
    tp, pp = recipe.parallelism.tp, recipe.parallelism.pp
    layers = math.ceil(a.num_layers / pp)
    vh = a.vocab_size * a.hidden_size
    parts: list[tuple[str, int, int]] = [
        ("decoder", layers * _layer_linear_params(a), 0),
        ("norms", 0, (2 * layers + 1) * a.hidden_size),
    ]
    # TensorRT-LLM keeps the whole embedding table on every rank unless trtllm.use_parallel_embedding
    # (tensorrt_llm/models/llama/convert.py); trtspec's own engines count it vocab-parallel.
    replicated_embed = recipe.target.engine_backend == "trtllm" and not recipe.trtllm.use_parallel_embedding
    first_stage = [("embed_tokens", 0, vh)] if replicated_embed else [("embed_tokens", vh, 0)]
    last_stage = [] if a.tie_word_embeddings and pp == 1 else [("lm_head", vh, 0)]
    last_stage += _draft_components(recipe, a, levels)
    stages = first_stage + last_stage if pp == 1 else max(first_stage, last_stage, key=lambda s: sum(p + r for _, p, r in s))
    out = []
    for name, sharded, replicated in parts + list(stages):
        params = math.ceil(sharded / tp) + replicated
        dtype = _dtype_of(recipe, name)
        nbytes = params * DTYPE_BYTES[dtype]
        if dtype == "fp8":
            linears = 7 * layers if name == "decoder" else 1
            nbytes += linears * FP8_SCALE_BYTES
        out.append(Component(name, params, dtype, nbytes))
    return out


def kv_bytes_per_token(recipe: Recipe, a: Architecture, levels: int = 1) -> int:
    tp, pp = recipe.parallelism.tp, recipe.parallelism.pp
    kv_dtype = "fp8" if recipe.quantization.kv_cache == "fp8" else recipe.model.dtype
    per_layer = 2 * math.ceil(a.num_kv_heads / tp) * a.dim_per_head * DTYPE_BYTES[kv_dtype]
    draft_layers = 0
    if recipe.speculative.method == "eagle":  # trtllm: every EagleNet's layer caches its own KV
        draft_layers = levels if recipe.target.engine_backend == "trtllm" else 1
    return per_layer * (math.ceil(a.num_layers / pp) + draft_layers)


def activation_bytes(recipe: Recipe, a: Architecture, draft_len: int) -> int:
    """Estimate of the largest live tensors of one engine pass plus fp32 logits for every node."""
    tp, b = recipe.parallelism.tp, recipe.build
    act = DTYPE_BYTES["fp32" if recipe.model.dtype == "fp32" else "bf16"]
    qkv = (a.num_attention_heads + 2 * a.num_kv_heads) * a.dim_per_head
    per_token = (a.hidden_size + (2 * a.intermediate_size + qkv) // tp) * act
    logits = b.max_batch_size * (draft_len + 1) * math.ceil(a.vocab_size / tp) * 4
    return b.max_num_tokens * per_token + logits


def device_memory(recipe: Recipe) -> tuple[str, int]:
    device = recipe.target.device
    if device == "cpu":
        return "host RAM", os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    gpu = GPUS[device]
    return gpu.name, gpu.memory_bytes


def plan_memory(recipe: Recipe, a: Architecture, draft_len: int, levels: int = 1) -> MemoryPlan:
    name, total = device_memory(recipe)
    b, t = recipe.build, recipe.target
    plan = MemoryPlan(device=name, device_bytes=total, tp=recipe.parallelism.tp, pp=recipe.parallelism.pp,
                      kv_cache_fraction=recipe.triton.kv_cache_free_gpu_mem_fraction, tokens_per_block=b.tokens_per_block)
    plan.components = weight_components(recipe, a, levels)
    if recipe.speculative.verification == "rejection" and recipe.target.engine_backend != "trtllm":
        # Sampling runs the rejection step graph, a second engine beside the greedy one holding its own copy
        # of the target's weights (TensorRT engines and ONNX Runtime sessions do not share them).
        target = [c for c in plan.components if c.name not in ("medusa_heads", "eagle_draft")]
        plan.components += [Component(f"{c.name} (rejection engine)", c.params, c.dtype, c.bytes) for c in target]
    plan.weight_bytes = sum(c.bytes for c in plan.components)
    for c in plan.components:
        plan.weight_bytes_by_dtype[c.dtype] = plan.weight_bytes_by_dtype.get(c.dtype, 0) + c.bytes
    plan.runtime_reserve_bytes = int(t.runtime_reserve_gib * GIB)
    plan.activation_bytes = activation_bytes(recipe, a, draft_len)
    plan.kv_bytes_per_token = kv_bytes_per_token(recipe, a, levels)
    plan.free_bytes = total - plan.weight_bytes - plan.runtime_reserve_bytes - plan.activation_bytes
    plan.kv_budget_bytes = max(0, int(plan.free_bytes * plan.kv_cache_fraction))
    plan.kv_dtype = "fp8" if recipe.quantization.kv_cache == "fp8" else recipe.model.dtype
    block_bytes = plan.kv_bytes_per_token * b.tokens_per_block
    plan.kv_blocks = plan.kv_budget_bytes // block_bytes
    cap = recipe.trtllm.max_tokens_in_paged_kv_cache if recipe.target.engine_backend == "trtllm" else None
    if cap is not None:  # the tensorrt_llm model's max_tokens_in_paged_kv_cache caps the pool (per rank)
        plan.kv_blocks = min(plan.kv_blocks, cap // b.tokens_per_block)
    plan.kv_tokens = plan.kv_blocks * b.tokens_per_block
    plan.tokens_per_sequence = b.max_seq_len + draft_len
    blocks_per_seq = math.ceil(plan.tokens_per_sequence / b.tokens_per_block)
    plan.concurrent_sequences = plan.kv_blocks // blocks_per_seq
    plan.headroom_bytes = max(0, plan.free_bytes) - plan.kv_budget_bytes
    one_seq = blocks_per_seq * block_bytes
    fixed = plan.weight_bytes + plan.runtime_reserve_bytes + plan.activation_bytes
    if fixed + one_seq > total or plan.concurrent_sequences < 1:
        plan.fits = False
        plan.problems.append(
            f"weights {plan.weight_bytes / GIB:.2f} GiB + reserve {plan.runtime_reserve_bytes / GIB:.2f} GiB + "
            f"activations {plan.activation_bytes / GIB:.2f} GiB + one {plan.tokens_per_sequence}-token sequence "
            f"{one_seq / GIB:.2f} GiB (at kv fraction {plan.kv_cache_fraction}) do not fit in "
            f"{total / GIB:.2f} GiB per rank ({name}); raise parallelism.tp, quantize to fp8, or lower build limits"
        )
    return plan
