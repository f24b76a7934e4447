"""An opened engine folder, whichever backend built it: the engine, a drafter factory, the tokenizer (backend
neutral, so the TensorRT package need not import the ONNX Runtime one). `builder.engines.folder.open_engine`
opens a folder of either backend (ONNX Runtime: `builder.engines.ort.load`, TensorRT:
`builder.engines.tensorrt.folder`); both return an `Opened`.

`drafter_for` picks the drafter an engine folder runs (the folder's own, or an override: a zero-weight method,
or the folder's own method), re-validates it by its method's config class and checks it against what the engines
hold — room for its draft nodes, fused heads (a FUSED_HEADS method). engine.json keys read: drafter, capacity,
max_seq_len, medusa. A DRAFT_GRAPH method also needs the folder's draft graph ("eagle"), which the backend's
`open_engine` opens; `target_hidden` says how wide the target graphs' `hidden` is (EAGLE-3's fc folded in).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from builder.speculative import registry
from builder.speculative.budget import BudgetRule
from builder.speculative.method import DRAFT_GRAPH, FUSED_HEADS, DrafterFactory
from builder.speculative.protocols import EagleNet, Engine


def target_hidden(meta: dict[str, Any]) -> int:
    """Width of the target graphs' `hidden` output: the model's, or — EAGLE-3, engine.json's eagle.aux_layers — the
    draft's, whose fc the target graphs apply to those layers' outputs (`builder.export.target.Features`)."""
    e = meta.get("eagle")
    return int(e["hidden"]) if e is not None and e.get("aux_layers") else int(meta["model"]["hidden"])


def budget_rule(meta: dict[str, Any]) -> BudgetRule | None:
    """A fresh `BudgetRule` from engine.json's measured "draft_budget" (its own online state: one per decoding loop),
    or None where the folder has none (no drafter, or a backend that did not measure one)."""
    table = meta.get("draft_budget")
    return None if not table else BudgetRule.from_json(table)


@dataclass
class Opened:
    engine: Engine
    make_drafter: DrafterFactory
    label: str
    drafter: Any  # the drafter config in use (its method's config, `builder.speculative.registry`)
    tokenizer_path: Path
    stop_ids: list[int]
    meta: dict[str, Any]  # engine.json


def drafter_for(meta: dict[str, Any], drafter: Any = None) -> Any:
    """The drafter config to run (`drafter`: a config or its dict, else the folder's own), validated by its method and
    checked against what the engine holds."""
    config = registry.drafter_config(meta["drafter"] if drafter is None else drafter)
    method = registry.of(config)
    config = method.resolved(config)  # (a static tree given by preset name)
    facts = method.facts(config)
    room = meta["capacity"] - meta["max_seq_len"]
    if facts.max_nodes > room:
        raise ValueError(f"{facts.label} needs {facts.max_nodes} nodes per step; this engine has room for {room}")
    if method.exports == FUSED_HEADS and (meta["medusa"] is None or facts.top_k > meta["medusa"]["top_k"]):
        raise ValueError("this engine has no fused Medusa heads for that tree")
    return config


def opened(
    folder: Path, meta: dict[str, Any], config: Any, engine: Engine, draft_net: Callable[[dict[str, Any]], EagleNet]
) -> Opened:
    """The `Opened` of an engine folder whose target `engine` a backend has opened: the drafter config's method makes
    its drafter, over the draft graph `draft_net` opens from engine.json's "eagle" entry for a DRAFT_GRAPH method."""
    method = registry.of(config)
    net = None
    if method.exports == DRAFT_GRAPH:
        if meta["eagle"] is None:
            raise ValueError("this engine folder has no EAGLE draft graph")
        net = draft_net(meta["eagle"])
    label = method.facts(config).label
    return Opened(
        engine,
        method.make_drafter(config, net),
        label,
        config,
        folder / meta["tokenizer"],
        list(meta["stop_ids"]),
        meta,
    )
