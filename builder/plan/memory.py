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
kv/token  2 × layers × max(kv_heads / tp, 1) × head_dim × bytes(kv dtype)   (+ the draft's own layers')
free      device memory − weights − runtime reserve − activations
kv budget free × kv_cache_free_gpu_mem_fraction, in paged blocks of tokens_per_block tokens
sequences blocks ÷ ceil((max_seq_len + max_draft_len) / tokens_per_block)
trtllm    one engine (TensorRT-LLM samples in its runtime: no rejection copy); blocks capped by
          trtllm.max_tokens_in_paged_kv_cache.
draft     the method's share (`builder.plan.drafts`, named by its `Method.memory`): Medusa's heads
          (`builder.plan.medusa`), EAGLE's EagleNets — one per tree level, each with its own embedding, layers,
          fc, LM head and KV cache — (`builder.plan.eagle`); none for a method without draft weights.
With pp > 1 each pipeline stage holds ceil(layers / pp) layers; the first adds the embedding, the last
the lm_head and draft weights. The plan reports the most loaded stage.
"""

# trtllm: this is the trtllm backend's paged memory plan (Backend.memory_plan "paged"); it reads the trtllm section

from __future__ import annotations

import math

from builder.plan.drafts import draft_memory
from builder.plan.sizes import (
    DTYPE_BYTES,
    GIB,
    Component,
    MemoryPlan,
    device_memory,
    pad_vocab,
    rank_layer,
    scale_bytes,
    weight_dtype,
)
from builder.recipe.schema import Architecture, Recipe


def weight_components(
    recipe: Recipe, a: Architecture, levels: int = 1, draft: Architecture | None = None
) -> list[Component]:
    """Per-rank weights of TensorRT-LLM's engine (module docstring), of the most loaded pipeline stage."""
    tp, pp = recipe.parallelism.tp, recipe.parallelism.pp
    layers = math.ceil(a.num_layers / pp)
    c, v = a.hidden_size, a.vocab_size
    lin, norms = rank_layer(a, tp)
    fp8 = weight_dtype(recipe, "decoder") == "fp8"
    dt = recipe.model.dtype
    dec_dtype = "fp8" if fp8 else dt
    out = [
        Component(
            "decoder",
            layers * lin,
            dec_dtype,
            layers * lin * DTYPE_BYTES[dec_dtype] + scale_bytes(recipe, layers, fp8),
        )
    ]
    embed = pad_vocab(v, tp) // tp * c if recipe.trtllm.use_parallel_embedding else v * c
    head_dtype = weight_dtype(recipe, "lm_head")
    head = pad_vocab(v, tp) // tp * c
    first = [Component("embed_tokens", embed, dt, embed * DTYPE_BYTES[dt])]
    head_bytes = head * DTYPE_BYTES[head_dtype] + 8 * (head_dtype == "fp8")  # + its two float32 scales
    last = [] if a.tie_word_embeddings and pp == 1 else [Component("lm_head", head, head_dtype, head_bytes)]
    last += draft_memory(recipe.speculative).paged_weights(recipe, a, levels, draft)  # the method's share
    stage = first + last if pp == 1 else max(first, last, key=lambda cs: sum(x.bytes for x in cs))
    norm = layers * norms + (c if pp == 1 or stage is last else 0)  # ln_f on the last stage
    return [out[0], Component("norms", norm, dt, norm * DTYPE_BYTES[dt]), *stage]


def kv_bytes_per_token(recipe: Recipe, a: Architecture, levels: int = 1, draft: Architecture | None = None) -> int:
    tp, pp = recipe.parallelism.tp, recipe.parallelism.pp
    kv_dtype = "fp8" if recipe.quantization.kv_cache == "fp8" else recipe.model.dtype
    per_layer = 2 * math.ceil(a.num_kv_heads / tp) * a.dim_per_head * DTYPE_BYTES[kv_dtype]
    share = draft_memory(recipe.speculative).paged_kv_per_token(recipe, a, levels, draft, DTYPE_BYTES[kv_dtype])
    return per_layer * math.ceil(a.num_layers / pp) + share


def activation_bytes(recipe: Recipe, a: Architecture, draft_len: int) -> int:
    """Estimate of the largest live tensors of one engine pass plus fp32 logits for every node."""
    tp, b = recipe.parallelism.tp, recipe.build
    act = DTYPE_BYTES["fp32" if recipe.model.dtype == "fp32" else "bf16"]
    qkv = (a.num_attention_heads + 2 * a.num_kv_heads) * a.dim_per_head
    per_token = (a.hidden_size + (2 * a.intermediate_size + qkv) // tp) * act
    logits = b.max_batch_size * (draft_len + 1) * math.ceil(a.vocab_size / tp) * 4
    return b.max_num_tokens * per_token + logits


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
