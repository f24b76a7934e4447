"""EAGLE-3's share of the memory plans (`builder.plan.drafts`).

The draft (`builder.speculative.eagle3.draft_model`): fc [H, 3·Ht], one midlayer whose q/k/v take 2H, three norms in
it and a final norm, its own LM head over the draft vocabulary Vd (the checkpoint's `draft_vocab_size`; 32000 for the
published Llama 3 drafts), d2t [Vd], and the target's embedding (a copy in the draft graph).

trtspec's own engines: the target step graph carries fc (folded in: its `hidden` output is fc of the three aux
states, `builder.export.target`) — the fused weights; the draft graph the rest, with a one-layer KV cache and
scratch whose logits span Vd, not V.

TensorRT-LLM's PyTorch flow (one-model EAGLE-3, `target.backend: trtllm-llmapi`): the draft's weights once per rank
(not per level: one draft module runs every level) and its one layer's KV per token in the same pool. The engine
flow (`paged_*` of the trtllm backend) never serves EAGLE-3 (`Method.trtllm.engine` is NotServed), so these numbers
are the LLM-API flow's.
"""

from __future__ import annotations

import math

from builder.export.contract import DTYPE_BYTES as GRAPH_BYTES
from builder.plan.eagle import EagleMemory, one_layer
from builder.plan.own_engines import STEP, act_component, kv_per_token
from builder.plan.sizes import DTYPE_BYTES, Component, Layout, layer_linear_params
from builder.recipe.loader import LoadedRecipe
from builder.recipe.resolve import architecture_numbers, parse_checkpoint, read_config
from builder.recipe.schema import Architecture, Recipe

PUBLISHED_DRAFT_VOCAB = 32000  # the published Llama 3 EAGLE-3 drafts (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B config.json)


def draft_params(a: Architecture, d: Architecture, vd: int) -> int:
    """The draft's weights but the embedding: fc, the midlayer (2H-input q/k/v), four norms, its LM head."""
    h, hd = d.hidden_size, d.dim_per_head
    qkv_extra = h * hd * (d.num_attention_heads + 2 * d.num_kv_heads)  # q/k/v read 2H: one more H of columns each
    return 3 * a.hidden_size * h + layer_linear_params(d) + qkv_extra + 4 * h + vd * h


class Eagle3Memory(EagleMemory):
    def draft_vocab(self, recipe: Recipe, loaded: LoadedRecipe | None = None) -> int:
        """Vd: the checkpoint's draft_vocab_size when its config.json is local, else the published drafts'."""
        if loaded is not None:
            spec = loaded.recipe.speculative
            ref = parse_checkpoint(spec.checkpoint, loaded.dir_of(("speculative", "checkpoint")))
            if ref.local is not None and (ref.local / "config.json").is_file():
                cfg = read_config(ref.local)
                return int(cfg.get("draft_vocab_size") or cfg.get("vocab_size") or PUBLISHED_DRAFT_VOCAB)
        arch = recipe.model.architecture
        v = arch.vocab_size if arch is not None else PUBLISHED_DRAFT_VOCAB
        return min(v, PUBLISHED_DRAFT_VOCAB)

    def architecture(self, loaded: LoadedRecipe) -> Architecture | None:
        spec = loaded.recipe.speculative
        ref = parse_checkpoint(spec.checkpoint, loaded.dir_of(("speculative", "checkpoint")))
        if ref.local is None or not (ref.local / "config.json").is_file():
            return None
        from builder.speculative.eagle3.checkpoint import parse_config

        c = parse_config(read_config(ref.local), str(ref.local / "config.json")).cfg
        return Architecture(**{**architecture_numbers(c), "num_layers": 1})  # the draft's one midlayer

    # --- TensorRT-LLM's PyTorch flow: one draft module, whole on every rank -----------------------------------
    def paged_weights(
        self, recipe: Recipe, a: Architecture, levels: int, draft: Architecture | None
    ) -> list[Component]:
        d, dt = one_layer(a, draft), recipe.model.dtype
        n = draft_params(a, d, self.draft_vocab(recipe))
        return [Component("eagle3 draft (one module, every level)", n, dt, n * DTYPE_BYTES[dt])]

    def paged_kv_per_token(
        self, recipe: Recipe, a: Architecture, levels: int, draft: Architecture | None, kv_bytes: int
    ) -> int:
        d = one_layer(a, draft)  # one layer's KV, whatever the depth
        return 2 * math.ceil(d.num_kv_heads / recipe.parallelism.tp) * d.dim_per_head * kv_bytes

    # --- own engines ------------------------------------------------------------------------------------------
    def fused_weights(self, recipe: Recipe, a: Architecture, lay: Layout) -> list[Component]:
        """fc, folded into every target step graph."""
        return [act_component("eagle3 fc (in the target graph)", 3 * a.hidden_size * a.hidden_size, lay)]

    def draft_graph_weights(self, recipe: Recipe, a: Architecture, lay: Layout) -> list[Component]:
        """The midlayer and norms, its own LM head over Vd, the embedding table, its RoPE tables."""
        tp, c, v = recipe.parallelism.tp, a.hidden_size, a.vocab_size
        vd = self.draft_vocab(recipe)
        rest = draft_params(a, one_layer(a, None), vd) - 3 * c * c  # fc sits in the target graph
        return [
            act_component("eagle3_draft (midlayer, norms, lm_head over Vd)", rest // tp, lay),
            act_component("eagle3 embed_tokens", v * c // tp, lay),
            act_component("eagle3 rope tables", lay.draft_capacity * a.dim_per_head, lay),
        ]

    def draft_graph_scratch(
        self, recipe: Recipe, a: Architecture, lay: Layout, profile: str, rows: int, per_row: int
    ) -> int:
        act, vd = GRAPH_BYTES[lay.act], math.ceil(self.draft_vocab(recipe) / recipe.parallelism.tp)
        t = max(rows, lay.draft_capacity - recipe.build.max_seq_len) if profile == STEP else rows
        return lay.slots * t * (per_row + lay.draft_capacity * act + vd * (act + 8) + 2 * a.hidden_size * act)

    def draft_kv_per_token(self, recipe: Recipe, a: Architecture, lay: Layout) -> int:
        return kv_per_token(a, lay.act, 1, recipe.parallelism.tp)


MEMORY = Eagle3Memory()
