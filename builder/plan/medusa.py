"""Medusa's share of the memory plans (`builder.plan.drafts`): its heads, each `num_layers` residual blocks
(C × C + bias) and its own LM head (C × V), in model.dtype (the heads stay out of FP8: `medusa_heads` in
quantization.exclude_modules).

TensorRT-LLM (`MedusaForCausalLM`, tensorrt_llm/models/medusa/model.py): every head's blocks and LM head are
ColumnLinear layers split on rows over the tensor-parallel ranks (the LM head padded, `pad_vocab_size`), on the
last pipeline stage; the heads cache no KV of their own. trtspec's own engines: the heads are fused into every
target step graph (FUSED_HEADS: the graph contract's `medusa_topk` [B, Hm, K]), with the activations of every head
[slots, Hm, C + V] in each profile's scratch.
"""

from __future__ import annotations

import math

from builder.export.contract import DTYPE_BYTES as GRAPH_BYTES
from builder.plan.drafts import DraftMemory
from builder.plan.own_engines import act_component
from builder.plan.sizes import DTYPE_BYTES, Component, Layout, pad_vocab
from builder.recipe.schema import Architecture, Recipe

HEADS = "medusa_heads"  # the component's name: the heads' module (their quantization.exclude_modules pattern)


class MedusaMemory(DraftMemory):
    def paged_weights(
        self, recipe: Recipe, a: Architecture, levels: int, draft: Architecture | None
    ) -> list[Component]:
        spec, c, tp, v, dt = recipe.speculative, a.hidden_size, recipe.parallelism.tp, a.vocab_size, recipe.model.dtype
        per_head = spec.num_layers * (c // tp * c + c // tp) + pad_vocab(v, tp) // tp * c
        params = spec.num_heads * per_head
        return [Component(HEADS, params, dt, params * DTYPE_BYTES[dt])]

    def fused_weights(self, recipe: Recipe, a: Architecture, lay: Layout) -> list[Component]:
        spec, c, v = recipe.speculative, a.hidden_size, a.vocab_size
        per_head = spec.num_layers * (c * c + c) + c * v
        return [act_component(HEADS, spec.num_heads * per_head // recipe.parallelism.tp, lay)]

    def fused_scratch(self, recipe: Recipe, a: Architecture, lay: Layout) -> int:
        v = math.ceil(a.vocab_size / recipe.parallelism.tp)
        return lay.slots * recipe.speculative.num_heads * (a.hidden_size + v) * GRAPH_BYTES[lay.act]

    def fused_heads(self, recipe: Recipe) -> int:
        return recipe.speculative.num_heads


MEMORY = MedusaMemory()
