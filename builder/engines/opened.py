"""An opened engine folder, whichever backend built it: the engine, a drafter factory, the tokenizer (backend
neutral, so the TensorRT package need not import the ONNX Runtime one). `builder.engines.folder.open_engine`
opens a folder of either backend (ONNX Runtime: `builder.engines.ort.load`, TensorRT:
`builder.engines.tensorrt.folder`); both return an `Opened`.

`drafter_for` picks the drafter an engine folder runs (the folder's own, or an override: none / lookahead,
or the folder's own method) and checks it against what the engines hold — room for its draft nodes, the
fused Medusa heads, an EAGLE draft graph. engine.json keys read: drafter, capacity, max_seq_len, medusa.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.speculative.drafters import DrafterFactory, drafter_shape, label
from builder.speculative.protocols import Engine


@dataclass
class Opened:
    engine: Engine
    make_drafter: DrafterFactory
    label: str
    drafter: dict[str, Any]  # the drafter config in use
    tokenizer_path: Path
    stop_ids: list[int]
    meta: dict[str, Any]  # engine.json


def drafter_for(meta: dict[str, Any], drafter: dict[str, Any] | None) -> dict[str, Any]:
    """The drafter config to run (`drafter` or the folder's own), checked against what the engine holds."""
    config = drafter or meta["drafter"]
    shape = drafter_shape(config)
    room = meta["capacity"] - meta["max_seq_len"]
    if shape["max_nodes"] > room:
        raise ValueError(f"{label(config)} needs {shape['max_nodes']} nodes per step; this engine has room for {room}")
    if config["method"] == "medusa" and (meta["medusa"] is None or shape["top_k"] > meta["medusa"]["top_k"]):
        raise ValueError("this engine has no fused Medusa heads for that tree")
    return config
