"""A drafter factory from a drafter described as plain data (as engine.json stores it).

    {"method": "none"}
    {"method": "lookahead", "window": W, "ngram": N, "verification_set": G}
    {"method": "ngram", "max_draft": K, "max_match": M, "min_match": m, "candidates": C, "adaptive": bool,
     "shared_pool": bool}  (shared_pool absent in engine folders built before it: false)
    {"method": "medusa", "choices": [[0], [0, 0], …]}
    {"method": "eagle", "version": 1, "choices": […]}  |  {"method": "eagle", "version": 2, "dynamic": {depth, top_k, total_nodes}}
      (+ "draft_vocab": N where the net drafts over N tokens: baked into its graph, only named here)
    (medusa and eagle: + "draft_weights": "int8" | "int4" where the draft's weights are block-quantized in the graph
     ONNX Runtime runs, `speculative.draft_weights`: likewise only named here)

EAGLE needs the draft network (`EagleNet`) the engine opened; Medusa needs an engine with fused heads.
"""

from __future__ import annotations

from typing import Any, Callable

from builder.speculative.lookahead.config import lookahead_draft_len
from builder.speculative.ngram.config import ngram_nodes
from builder.speculative.protocols import Drafter, EagleNet

DrafterFactory = Callable[[], "Drafter | None"]


def drafter_factory(config: dict[str, Any], eagle_net: EagleNet | None = None) -> DrafterFactory:
    method = config["method"]
    if method == "none":
        return lambda: None
    if method == "lookahead":
        from builder.speculative.lookahead.drafter import LookaheadDrafter

        w, n, g = config["window"], config["ngram"], config["verification_set"]
        LookaheadDrafter(w, n, g)  # validate now
        return lambda: LookaheadDrafter(w, n, g)
    if method == "ngram":
        from builder.speculative.ngram.drafter import NgramFactory

        return NgramFactory(ngram_settings(config))  # validates now
    if method == "medusa":
        from builder.speculative.medusa.drafter import MedusaDrafter
        from builder.speculative.tree import tree_from_choices

        tree = tree_from_choices(config["choices"])
        return lambda: MedusaDrafter(tree)
    if method == "eagle":
        from builder.speculative.eagle.drafter import DynamicSpec, EagleDrafter
        from builder.speculative.eagle_tree import static_tree

        if eagle_net is None:
            raise ValueError("EAGLE needs its draft network")
        shape = DynamicSpec(**config["dynamic"]) if "dynamic" in config else static_tree(config["choices"])
        net = eagle_net
        return lambda: EagleDrafter(net, shape)
    raise ValueError(f"unknown drafter method {method!r}")


def drafter_shape(config: dict[str, Any]) -> dict[str, int]:
    """Nodes per step (max_nodes), top-k the heads / draft net must return, tentative draft slots."""
    m = config["method"]
    if m == "lookahead":
        return {
            "max_nodes": 1 + lookahead_draft_len(config["window"], config["ngram"], config["verification_set"]),
            "top_k": 0,
            "tentative": 0,
        }
    if m == "none":
        return {"max_nodes": 1, "top_k": 0, "tentative": 0}
    if m == "ngram":
        return {"max_nodes": ngram_nodes(config["max_draft"], config["candidates"]), "top_k": 0, "tentative": 0}
    if "dynamic" in config:
        d = config["dynamic"]
        return {"max_nodes": d["total_nodes"] + 1, "top_k": d["top_k"], "tentative": d["depth"] * d["top_k"]}
    choices = config["choices"]
    top_k = 1 + max((c[-1] for c in choices), default=0)
    return {"max_nodes": len(choices) + 1, "top_k": top_k, "tentative": len(choices) + 1}


def chains_only(config: dict[str, Any]) -> bool:
    """Whether every draft of this drafter is a chain (root-only included): method none, n-gram with one
    candidate. An ONNX Runtime engine then runs its plain-steps graph (`builder.export.verify.plain_twin`)."""
    return config["method"] == "none" or (config["method"] == "ngram" and config["candidates"] == 1)


def label(config: dict[str, Any]) -> str:
    m = config["method"]
    if m == "lookahead":
        return f"lookahead(W={config['window']},N={config['ngram']},G={config['verification_set']})"
    if m == "ngram":
        k, big, small, c, adaptive, shared = ngram_settings(config)
        return f"ngram(K={k},M={big},m={small},C={c}{'' if adaptive else ',fixed'}{',shared' if shared else ''})"
    # a draft vocabulary (`speculative.draft_vocab`) and quantized draft weights (`speculative.draft_weights`) are
    # part of the graphs, named for the reader
    about = ([f"V={config['draft_vocab']}"] if config.get("draft_vocab") else []) + (
        [config["draft_weights"]] if config.get("draft_weights") else []
    )
    name = f"eagle-{config['version']}" if m == "eagle" else m
    return name + (f"({','.join(about)})" if about else "")


NGRAM_KEYS = ("max_draft", "max_match", "min_match", "candidates", "adaptive", "shared_pool")


def ngram_settings(config: dict[str, Any]) -> tuple[int, int, int, int, bool, bool]:
    """(max_draft, max_match, min_match, candidates, adaptive, shared_pool) of an n-gram drafter config (a config
    without shared_pool, as engine folders built before it store: false)."""
    k, big, small, c, adaptive = (config[key] for key in NGRAM_KEYS[:5])
    return k, big, small, c, adaptive, bool(config.get("shared_pool", False))
