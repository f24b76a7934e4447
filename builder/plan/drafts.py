"""A speculative method's share of the memory plans: what its draft adds to TensorRT-LLM's paged plan
(`builder.plan.memory`) and to the plan of trtspec's own engines (`builder.plan.own_engines`).

A method names its share by a dotted path (`Method.memory`, e.g. "builder.plan.eagle:MEMORY"): a `DraftMemory`.
The base class adds nothing, and is the share of every method without one (`memory=None`: none, lookahead, ngram,
an installed method without weights of its own): its drafter lives on the host and the target graphs' room for
its step tree is the plans' own (`registry.default_room`, build.max_draft_len).

    paged_*        TensorRT-LLM, per rank on the last pipeline stage: the draft's weights, and the bytes its layers
                   add to each token of the shared paged KV pool
    fused_*        own engines: what the method fuses into every target step graph (FUSED_HEADS: weights, their
                   scratch per profile, the graph's Hm heads)
    draft_graph_*  own engines: the separate draft graph (DRAFT_GRAPH, the EAGLE graph contract): its KV room beyond
                   max_seq_len (0: no draft graph), weights, scratch per profile and KV bytes per token
    io_top_k       own engines: the K the I/O slots of the top-k outputs are sized for
    architecture   the draft network's shape from its checkpoint's config.json (None: the share assumes one)
"""

from __future__ import annotations

from typing import Any

from builder.plan.sizes import Component, Layout
from builder.recipe.loader import LoadedRecipe
from builder.recipe.schema import Architecture, Recipe
from builder.speculative import registry
from builder.speculative.method import resolve

IO_TOP_K = 10  # K of the top-k outputs' I/O slots when the tree does not fix it (static trees, Medusa heads)


class DraftMemory:
    """A method's share of the memory plans (module docstring); this base adds nothing."""

    def architecture(self, loaded: LoadedRecipe) -> Architecture | None:
        """The draft network's shape from its local checkpoint's config.json (None: not read, or no network)."""
        return None

    # --- TensorRT-LLM's paged plan, per rank ---------------------------------------------------------------------
    def paged_weights(
        self, recipe: Recipe, a: Architecture, levels: int, draft: Architecture | None
    ) -> list[Component]:
        """The draft's own weights on the last pipeline stage (`levels`: tree levels drafted per step)."""
        return []

    def paged_kv_per_token(
        self, recipe: Recipe, a: Architecture, levels: int, draft: Architecture | None, kv_bytes: int
    ) -> int:
        """Bytes the draft's own layers add to each token of the paged KV pool (`kv_bytes`: per cache element)."""
        return 0

    # --- trtspec's own engines -----------------------------------------------------------------------------------
    def fused_weights(self, recipe: Recipe, a: Architecture, lay: Layout) -> list[Component]:
        """Weights fused into every target step engine (per rank)."""
        return []

    def fused_scratch(self, recipe: Recipe, a: Architecture, lay: Layout) -> int:
        """Scratch bytes the fused weights add to every profile of a target step engine."""
        return 0

    def fused_heads(self, recipe: Recipe) -> int:
        """Hm: the heads fused into the target step graph (its `medusa_topk` output; 0: none)."""
        return 0

    def io_top_k(self, recipe: Recipe) -> int:
        """K of the top-k outputs (the fused heads' and the draft graph's) the I/O slots are sized for."""
        return IO_TOP_K

    def draft_graph_room(self, recipe: Recipe, draft_len: int) -> int:
        """CAP_e − max_seq_len: the draft graph's KV slots beyond the sequence (0: no draft graph)."""
        return 0

    def draft_graph_weights(self, recipe: Recipe, a: Architecture, lay: Layout) -> list[Component]:
        """The draft graph's weights (per rank)."""
        return []

    def draft_graph_scratch(
        self, recipe: Recipe, a: Architecture, lay: Layout, profile: str, rows: int, per_row: int
    ) -> int:
        """Scratch bytes of one draft graph profile ("step" / "prefill", `rows` the target's rows per slot there;
        `per_row`: the residual stream, its norm and the largest working set of one row)."""
        return 0

    def draft_kv_per_token(self, recipe: Recipe, a: Architecture, lay: Layout) -> int:
        """Bytes of the draft graph's keys and values per token (per rank)."""
        return 0


NO_DRAFT = DraftMemory()


def draft_memory(config: Any) -> DraftMemory:
    """The share of the method whose config (a recipe's `speculative` section) is `config`."""
    m = registry.of(config)
    if m.memory is None:
        return NO_DRAFT
    share = resolve(m.memory)
    if not isinstance(share, DraftMemory):
        raise registry.MethodError(
            f"the speculative method {m.name!r}: its memory {m.memory} is a {type(share).__name__}, "
            "not a builder.plan.drafts.DraftMemory"
        )
    return share
