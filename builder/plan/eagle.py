"""EAGLE's share of the memory plans (`builder.plan.drafts`).

TensorRT-LLM (the paged plan, per rank): TensorRT-LLM 1.2 shares nothing between the EagleNets and the base model:
`EagleForCausalLM.__init__` (`tensorrt_llm/models/eagle/model.py` @ 89fd9b74ab7ae753b4c6b3db25a400dca7ea54a0) builds
num_eagle_layers (= the tree depth) `EagleNet`s, each its own `drafter = LLaMAModel(eagle_net_config)` —
vocab_embedding (whole unless use_parallel_embedding), the draft layers (the first without input_layernorm,
`use_input_layernorm_in_first_layer = False`; no ln_f, `use_last_layernorm = False`), `fc` (`fc_after_embed`:
ColumnLinear(2C → C) with bias, split on rows) — and its own `lm_head` (ColumnLinear(C → pad_vocab_size(V, tp)),
split on rows), with eagle_net_config.mapping.tp_size = world_size; `EagleForCausalLM.from_hugging_face` (same file)
and `examples/eagle/convert_checkpoint.py` (@ 65b31db1b401d3752b8ebe7c29093cbfb6af04b7) load each net's embedding and
LM head as separate copies (`preprocess=copy`), and nothing in `trtllm-build` dedups weights across modules
(`share_embedding`, `models/modeling_utils.py` @ b35ac1b64368513d215c57d2ed01d62d910df8da, ties only the first
lm_head to the first vocab_embedding — the base model's — and only when shapes and dtypes match). So every rank holds
num_eagle_layers × (embedding + layers + fc + LM head), in model.dtype (the EagleNets are excluded from FP8:
`*eagle_nets*`), and every EagleNet's layers cache their own KV in the same paged pool. The draft's shape comes from
its config.json when the checkpoint is local, else it is one layer shaped like a target layer (the EAGLE-1 Llama 3
drafts).

trtspec's own engines: the EAGLE draft graph (DRAFT_GRAPH) is an engine of its own — fc, its decoder layer and two
norms, its own embedding table, the target's LM head (FP8 when the target's is), RoPE tables of CAP_e — with a KV
cache of one layer [slots, KV, CAP_e, D] in model.dtype, CAP_e = max_seq_len + tentative draft slots + 1 (EAGLE-2:
depth × top_k; a static tree: max_draft_len + 1). Its scratch per profile: rows T (the step profile at least
CAP_e − max_seq_len), the shared per-row working set, its mask [T, CAP_e] and the log-softmax top-k over the
vocabulary (logits in model.dtype plus two float32 copies).
"""

# trtllm: EAGLE's share of the trtllm backend's paged plan reads the recipe's trtllm section

from __future__ import annotations

import math

from builder.export.contract import DTYPE_BYTES as GRAPH_BYTES
from builder.export.contract import FP8
from builder.plan.drafts import DraftMemory
from builder.plan.own_engines import SHORT, STEP, act_component, kv_per_token
from builder.plan.sizes import (
    DTYPE_BYTES,
    Component,
    Layout,
    layer_linear_params,
    pad_vocab,
    rank_layer,
    scale_bytes,
    weight_dtype,
)
from builder.recipe.loader import LoadedRecipe
from builder.recipe.resolve import architecture_from_hf, parse_checkpoint, read_config
from builder.recipe.schema import Architecture, Recipe


def one_layer(a: Architecture, draft: Architecture | None) -> Architecture:
    """The draft's shape: its config.json's when read, else one layer shaped like a target layer."""
    return draft or a.model_copy(update={"num_layers": 1})


class EagleMemory(DraftMemory):
    def architecture(self, loaded: LoadedRecipe) -> Architecture | None:
        spec = loaded.recipe.speculative
        ref = parse_checkpoint(spec.checkpoint, loaded.dir_of(("speculative", "checkpoint")))
        if ref.local is None or not (ref.local / "config.json").is_file():
            return None
        return architecture_from_hf(read_config(ref.local), ref.local)

    # --- TensorRT-LLM: num_eagle_layers EagleNets ---------------------------------------------------------------
    def paged_weights(
        self, recipe: Recipe, a: Architecture, levels: int, draft: Architecture | None
    ) -> list[Component]:
        c, tp, v, dt = a.hidden_size, recipe.parallelism.tp, a.vocab_size, recipe.model.dtype
        d = one_layer(a, draft)
        lin, _ = rank_layer(d, tp)
        # each net's embedding, split only with the recipe's TensorRT-LLM setting (`trtllm.use_parallel_embedding`)
        embed = pad_vocab(v, tp) // tp * c if recipe.trtllm.use_parallel_embedding else v * c
        norms = (2 * d.num_layers - 1) * c  # the first draft layer has no input norm; no ln_f
        fc = (c // tp) * 2 * c + c // tp  # [C/tp, 2C] + bias
        net = embed + d.num_layers * lin + norms + fc + pad_vocab(v, tp) // tp * c
        scales = scale_bytes(recipe, d.num_layers, False)  # the drafter's KV scales (1.0) when the KV cache is FP8
        return [Component(f"eagle_nets (× {levels})", levels * net, dt, levels * (net * DTYPE_BYTES[dt] + scales))]

    def paged_kv_per_token(
        self, recipe: Recipe, a: Architecture, levels: int, draft: Architecture | None, kv_bytes: int
    ) -> int:
        d = one_layer(a, draft)  # every EagleNet's layers cache their own KV (in the same pool)
        return levels * d.num_layers * 2 * math.ceil(d.num_kv_heads / recipe.parallelism.tp) * d.dim_per_head * kv_bytes

    # --- own engines: the draft graph -----------------------------------------------------------------------------
    def io_top_k(self, recipe: Recipe) -> int:
        tree = recipe.speculative.tree
        return tree.top_k if tree.type == "dynamic" else super().io_top_k(recipe)

    def draft_graph_room(self, recipe: Recipe, draft_len: int) -> int:
        tree = recipe.speculative.tree
        tentative = tree.depth * tree.top_k if tree.type == "dynamic" else draft_len + 1
        return tentative + 1

    def draft_graph_weights(self, recipe: Recipe, a: Architecture, lay: Layout) -> list[Component]:
        """fc, its decoder layer and norms, its own embedding table, the target's LM head, its RoPE tables."""
        tp, act, c, v = recipe.parallelism.tp, lay.act, a.hidden_size, a.vocab_size
        head_fp8 = lay.backend == "tensorrt" and weight_dtype(recipe, "lm_head") == "fp8"
        head = (FP8, v * c // tp + 2 * GRAPH_BYTES[act]) if head_fp8 else (act, v * c // tp * GRAPH_BYTES[act])
        return [
            act_component("eagle_draft", (2 * c * c + c + layer_linear_params(a)) // tp + 2 * c, lay),
            act_component("eagle embed_tokens", v * c // tp, lay),
            Component("eagle lm_head (the target's)", v * c // tp, SHORT[head[0]], head[1]),
            act_component("eagle rope tables", lay.draft_capacity * a.dim_per_head, lay),
        ]

    def draft_graph_scratch(
        self, recipe: Recipe, a: Architecture, lay: Layout, profile: str, rows: int, per_row: int
    ) -> int:
        act, v = GRAPH_BYTES[lay.act], math.ceil(a.vocab_size / recipe.parallelism.tp)
        t = max(rows, lay.draft_capacity - recipe.build.max_seq_len) if profile == STEP else rows
        return lay.slots * t * (per_row + lay.draft_capacity * act + v * (act + 8))

    def draft_kv_per_token(self, recipe: Recipe, a: Architecture, lay: Layout) -> int:
        return kv_per_token(a, lay.act, 1, recipe.parallelism.tp)  # one layer shaped like a target layer


MEMORY = EagleMemory()
