"""Open an ONNX Runtime engine folder (the `engine` stage's output; also what a Triton repository ships).

engine.json (written by `builder.stages.engine`; its model `builder.handoffs.OrtEngineJson`):

    format, backend ("onnxruntime"), variant ("ort" | "standard"), label, capacity, max_seq_len,
    max_batch_size, model {layers, kv_heads, head_dim, hidden, vocab},
    target {greedy, rejection, greedy_plain}: ONNX files (relative; greedy_plain: the greedy graph for plain
    steps only, opened for a drafter that drafts nothing), medusa {heads, top_k} | null,
    eagle {graph, layers, kv_heads, head_dim, hidden, top_k, capacity, draft_vocab, aux_layers} | null (aux_layers:
    EAGLE-3's target features, whose fc the target graphs' `hidden` is: `hidden` wide),
    drafter: the drafter's config (its method's recipe section, static tree inline: `builder.handoffs.checked_drafter`),
    tokenizer, stop_ids, versions

The folder is self-contained: nothing here reads the recipe or the checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from builder.engines.opened import Opened, drafter_for, opened, target_hidden
from builder.engines.ort.eagle import OrtEagleNet
from builder.engines.ort.target import OrtEngine, TargetSpec
from builder.handoffs import OrtEngineJson
from builder.speculative import registry
from builder.speculative.method import DRAFT_GRAPH

ENGINE_JSON = OrtEngineJson.FILE


def read_ort_meta(folder: Path) -> dict[str, Any]:
    """engine.json of an ONNX Runtime folder, checked against `OrtEngineJson` (`OtherFormat`, a ValueError, naming
    the file, both formats and the rebuild command otherwise)."""
    path = Path(folder) / ENGINE_JSON
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not an ONNX Runtime engine folder ({exc})") from None
    backend = meta.get("backend") if isinstance(meta, dict) else None
    if backend != "onnxruntime":
        raise ValueError(f"{path}: not an ONNX Runtime engine folder (backend {backend!r})")
    OrtEngineJson.validate_file(meta, path, meta.get("recipe") if isinstance(meta.get("recipe"), str) else None)
    return meta


def open_ort_engine(
    folder: str | Path,
    drafter: dict[str, Any] | None = None,
    max_batch_size: int = 1,
    threads: int = 1,
    trees: bool | None = None,
) -> Opened:
    """The engine and a drafter factory; `drafter` (a config, or its dict) overrides the folder's (a zero-weight
    method, or the folder's own method): a FUSED_HEADS method needs the fused heads, a DRAFT_GRAPH one the draft graph. `trees`: whether
    greedy steps may hold trees other than chains (None: unless the drafter drafts chains only, `chains_only`;
    False runs the folder's plain-steps graph where it has one, `builder.export.verify.plain_twin`)."""
    folder = Path(folder)
    meta = read_ort_meta(folder)
    config = drafter_for(meta, drafter)
    m = meta["model"]
    t = meta["target"]
    medusa = None if meta["medusa"] is None else (meta["medusa"]["heads"], meta["medusa"]["top_k"])
    plain = folder / t["greedy_plain"] if t.get("greedy_plain") else None
    spec = TargetSpec(
        folder / t["greedy"],
        folder / t["rejection"] if t.get("rejection") else None,
        m["layers"],
        m["kv_heads"],
        m["head_dim"],
        target_hidden(meta),  # (EAGLE-3: the draft's width, its fc folded into the target graphs)
        m["vocab"],
        meta["capacity"],
        medusa,
        plain,
    )
    method = registry.of(config)
    facts = method.facts(config)
    if trees is None:
        trees = not facts.chains_only
    if not trees and method.exports == DRAFT_GRAPH and plain is not None:
        raise ValueError(
            "EAGLE reads the target's hidden states, which the plain-steps graph does not return: "
            "open the engine with trees=True (or None)"
        )
    engine = OrtEngine(spec, meta["max_seq_len"], max_batch_size, threads, plain_only=not trees)

    def draft_net(e: dict[str, Any]) -> OrtEagleNet:
        return OrtEagleNet(
            folder / e["graph"],
            layers=e["layers"],
            kv_heads=e["kv_heads"],
            head_dim=e["head_dim"],
            hidden_size=e["hidden"],
            top_k=e["top_k"],
            capacity=e["capacity"],
            max_batch_size=max_batch_size,
            threads=threads,
        )

    return opened(folder, meta, config, engine, draft_net)
