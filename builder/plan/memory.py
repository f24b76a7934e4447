"""Memory plan per tensor-parallel rank (see DESIGN.md, "Memory plan"): TensorRT-LLM's paged KV cache
(target.backend trtllm). trtspec's own engines (tensorrt, onnxruntime) hold per-slot contiguous KV caches in
their graphs' real dtypes: `builder.plan.own_engines` (`builder.plan.report` picks by backend).

weights   per rank, the tensors of TensorRT-LLM's checkpoint rank file as upstream lays them out
          (`builder.trtllm.checkpoint.names`, which `trtllm-build` loads unchanged; fused gate/fc shares one
          scale): per layer the fused qkv ((H/tp + 2·max(KV/tp, 1))·D rows: KV heads duplicated when KV < tp,
          `dup_kv_weight`), dense (columns split), fc and gate (rows split), proj (columns split), its two
          norms whole; FP8 linears 1 byte per weight + weights_scaling_factor and activation_scaling_factor
          (float32 [1] each, 5 linears per layer), kv_cache_scaling_factor and its reciprocal (float32 [1] each)
          on every attention with an FP8 KV cache; ln_f whole; the embedding whole on every rank unless
          trtllm.use_parallel_embedding (then pad_vocab_size(V, tp)/tp rows); lm_head pad_vocab_size(V, tp)/tp rows.
kv/token  2 × layers × max(kv_heads / tp, 1) × head_dim × bytes(kv dtype)   (+ every EagleNet layer's own)
free      device memory − weights − runtime reserve − activations
kv budget free × kv_cache_free_gpu_mem_fraction, in paged blocks of tokens_per_block tokens
sequences blocks ÷ ceil((max_seq_len + max_draft_len) / tokens_per_block)
trtllm    one engine (TensorRT-LLM samples in its runtime: no rejection copy); blocks capped by
          trtllm.max_tokens_in_paged_kv_cache.
EAGLE     TensorRT-LLM 1.2 shares nothing between the EagleNets and the base model: `EagleForCausalLM.__init__`
          (`tensorrt_llm/models/eagle/model.py` @ 89fd9b74ab7ae753b4c6b3db25a400dca7ea54a0) builds
          num_eagle_layers (= the tree depth) `EagleNet`s, each its own `drafter = LLaMAModel(eagle_net_config)`
          — vocab_embedding (whole unless use_parallel_embedding), the draft layers (the first without
          input_layernorm, `use_input_layernorm_in_first_layer = False`; no ln_f, `use_last_layernorm = False`),
          `fc` (`fc_after_embed`: ColumnLinear(2C → C) with bias, split on rows) — and its own `lm_head`
          (ColumnLinear(C → pad_vocab_size(V, tp)), split on rows), with eagle_net_config.mapping.tp_size =
          world_size; `EagleForCausalLM.from_hugging_face` (same file) and `examples/eagle/convert_checkpoint.py`
          (@ 65b31db1b401d3752b8ebe7c29093cbfb6af04b7) load each net's embedding and LM head as separate copies
          (`preprocess=copy`), and nothing in `trtllm-build` dedups weights across modules (`share_embedding`,
          `models/modeling_utils.py` @ b35ac1b64368513d215c57d2ed01d62d910df8da, ties only the first lm_head to
          the first vocab_embedding — the base model's — and only when shapes and dtypes match). So every
          rank holds num_eagle_layers × (embedding + layers + fc + LM head), in model.dtype (the EagleNets are
          excluded from FP8: `*eagle_nets*`). The draft's shape comes from its config.json when the checkpoint
          is local, else it is one layer shaped like a target layer (the EAGLE-1 Llama 3 drafts).
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


def pad_vocab(v: int, tp: int) -> int:
    """TensorRT-LLM's `pad_vocab_size`: the vocabulary rounded up to a multiple of tp."""
    return math.ceil(v / tp) * tp


def _rank_layer(a: Architecture, tp: int) -> tuple[int, int]:
    """(linear weights, norm weights) of one decoder layer on one rank, as TensorRT-LLM splits it."""
    c, d, h, kv, i = a.hidden_size, a.dim_per_head, a.num_attention_heads, a.num_kv_heads, a.intermediate_size
    qkv = (h // tp + 2 * max(kv // tp, 1)) * d * c  # KV heads duplicated to one per rank when kv < tp
    return qkv + c * (h * d // tp) + 3 * (i // tp) * c, 2 * c


def _scale_bytes(recipe: Recipe, layers: int, fp8: bool) -> int:
    """float32 [1] scales: 2 per FP8 linear (5 per layer), 2 per attention with an FP8 KV cache."""
    return layers * (5 * 2 * 4 * fp8 + 2 * 4 * (recipe.quantization.kv_cache == "fp8"))


def _draft_components(recipe: Recipe, a: Architecture, levels: int, draft: Architecture | None) -> list[Component]:
    """The drafter's own weights per rank (module docstring); `levels`: the EAGLE tree's depth."""
    spec, c, tp, v = recipe.speculative, a.hidden_size, recipe.parallelism.tp, a.vocab_size
    dt = recipe.model.dtype
    if spec.method == "medusa":
        per_head = spec.num_layers * (c // tp * c + c // tp) + pad_vocab(v, tp) // tp * c
        params = spec.num_heads * per_head
        return [Component("medusa_heads", params, dt, params * DTYPE_BYTES[dt])]
    if spec.method != "eagle":
        return []
    d = draft or a.model_copy(update={"num_layers": 1})
    lin, _ = _rank_layer(d, tp)
    embed = pad_vocab(v, tp) // tp * c if recipe.trtllm.use_parallel_embedding else v * c
    norms = (2 * d.num_layers - 1) * c  # the first draft layer has no input norm; no ln_f
    fc = (c // tp) * 2 * c + c // tp  # [C/tp, 2C] + bias
    net = embed + d.num_layers * lin + norms + fc + pad_vocab(v, tp) // tp * c
    scales = _scale_bytes(recipe, d.num_layers, False)  # the drafter's KV scales (1.0) when the KV cache is FP8
    return [Component(f"eagle_nets (× {levels})", levels * net, dt, levels * (net * DTYPE_BYTES[dt] + scales))]


def _dtype_of(recipe: Recipe, name: str) -> str:
    q = recipe.quantization
    pattern = "eagle_draft" if name.startswith("eagle_nets") else name  # trtllm's EagleNets are the EAGLE draft
    if q.mode == "fp8" and pattern not in q.exclude_modules and name != "norms":
        return "fp8"
    return recipe.model.dtype


def weight_components(
    recipe: Recipe, a: Architecture, levels: int = 1, draft: Architecture | None = None
) -> list[Component]:
    """Per-rank weights of TensorRT-LLM's engine (module docstring), of the most loaded pipeline stage."""
    tp, pp = recipe.parallelism.tp, recipe.parallelism.pp
    layers = math.ceil(a.num_layers / pp)
    c, v = a.hidden_size, a.vocab_size
    lin, norms = _rank_layer(a, tp)
    fp8 = _dtype_of(recipe, "decoder") == "fp8"
    dt = recipe.model.dtype
    dec_dtype = "fp8" if fp8 else dt
    out = [
        Component(
            "decoder",
            layers * lin,
            dec_dtype,
            layers * lin * DTYPE_BYTES[dec_dtype] + _scale_bytes(recipe, layers, fp8),
        )
    ]
    embed = pad_vocab(v, tp) // tp * c if recipe.trtllm.use_parallel_embedding else v * c
    head_dtype = _dtype_of(recipe, "lm_head")
    head = pad_vocab(v, tp) // tp * c
    first = [Component("embed_tokens", embed, dt, embed * DTYPE_BYTES[dt])]
    head_bytes = head * DTYPE_BYTES[head_dtype] + 8 * (head_dtype == "fp8")  # + its two float32 scales
    last = [] if a.tie_word_embeddings and pp == 1 else [Component("lm_head", head, head_dtype, head_bytes)]
    last += _draft_components(recipe, a, levels, draft)
    stage = first + last if pp == 1 else max(first, last, key=lambda cs: sum(x.bytes for x in cs))
    norm = layers * norms + (c if pp == 1 or stage is last else 0)  # ln_f on the last stage
    return [out[0], Component("norms", norm, dt, norm * DTYPE_BYTES[dt]), *stage]


def kv_bytes_per_token(recipe: Recipe, a: Architecture, levels: int = 1, draft: Architecture | None = None) -> int:
    tp, pp = recipe.parallelism.tp, recipe.parallelism.pp
    kv_dtype = "fp8" if recipe.quantization.kv_cache == "fp8" else recipe.model.dtype
    per_layer = 2 * math.ceil(a.num_kv_heads / tp) * a.dim_per_head * DTYPE_BYTES[kv_dtype]
    total = per_layer * math.ceil(a.num_layers / pp)
    if recipe.speculative.method == "eagle":  # every EagleNet's layers cache their own KV (in the same pool)
        d = draft or a.model_copy(update={"num_layers": 1})
        total += levels * d.num_layers * 2 * math.ceil(d.num_kv_heads / tp) * d.dim_per_head * DTYPE_BYTES[kv_dtype]
    return total


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


def plan_memory(
    recipe: Recipe, a: Architecture, draft_len: int, levels: int = 1, draft: Architecture | None = None
) -> MemoryPlan:
    name, total = device_memory(recipe)
    b, t = recipe.build, recipe.target
    plan = MemoryPlan(
        device=name,
        device_bytes=total,
        tp=recipe.parallelism.tp,
        pp=recipe.parallelism.pp,
        kv_cache_fraction=recipe.triton.kv_cache_free_gpu_mem_fraction,
        tokens_per_block=b.tokens_per_block,
    )
    plan.components = weight_components(recipe, a, levels, draft)
    plan.weight_bytes = sum(c.bytes for c in plan.components)
    for c in plan.components:
        plan.weight_bytes_by_dtype[c.dtype] = plan.weight_bytes_by_dtype.get(c.dtype, 0) + c.bytes
    plan.runtime_reserve_bytes = int(t.runtime_reserve_gib * GIB)
    plan.activation_bytes = activation_bytes(recipe, a, draft_len)
    plan.kv_bytes_per_token = kv_bytes_per_token(recipe, a, levels, draft)
    plan.free_bytes = total - plan.weight_bytes - plan.runtime_reserve_bytes - plan.activation_bytes
    plan.kv_budget_bytes = max(0, int(plan.free_bytes * plan.kv_cache_fraction))
    plan.kv_dtype = "fp8" if recipe.quantization.kv_cache == "fp8" else recipe.model.dtype
    block_bytes = plan.kv_bytes_per_token * b.tokens_per_block
    plan.kv_blocks = plan.kv_budget_bytes // block_bytes
    cap = recipe.trtllm.max_tokens_in_paged_kv_cache
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
