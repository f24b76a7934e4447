"""ONNX Runtime engines straight from in-memory modules (tests, benchmarks), and the graph variant rule.

Recipes go through the cached build stages instead (`builder.stages`); these helpers export into a
given folder (`<graph>-<variant>-<settings>-<exporter digest>/`, reused when present: folders appear
by atomic rename only) and open the engine.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Callable

from builder.engines.ort.eagle import OrtEagleNet
from builder.engines.ort.target import OrtEngine, TargetSpec

VARIANTS = ("ort", "standard")
# Standard ops by default: as fast as GroupQueryAttention on the fixture (scripts/bench_export_variants.py:
# 0.26 vs 0.27 ms at T=1, 0.77 vs 0.79 at T=13, 0.46 vs 0.53 at B=4), any head_dim, and the graph the
# TensorRT path rewrites. `ort` (GroupQueryAttention, head_dim % 16 == 0) stays selectable.
DEFAULT_VARIANT = "standard"


def exporter_digest() -> str:
    """sha256 over the exporter's and the TreeVerify decomposition's source files."""
    import builder.export
    import plugins.tree_verify

    h = hashlib.sha256()
    for pkg in (builder.export, plugins.tree_verify):
        for f in sorted(Path(pkg.__file__).parent.glob("*.py")):
            h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()[:12]


def _cached(folder: Path, produce: Callable[[Path], Any]) -> Path:
    if not (folder / "export.json").is_file():
        produce(folder)
    return folder


def pick_variant(variant: str | None, head_dim: int) -> str:
    """The graph variant: as asked (or TRTSPEC_ORT_VARIANT), else the default; `ort` only where
    GroupQueryAttention runs (head_dim a multiple of 16, ORT's CPU kernel's rule)."""
    asked = variant or os.environ.get("TRTSPEC_ORT_VARIANT")
    if asked is not None and asked not in VARIANTS:
        raise ValueError(f"unknown ONNX Runtime graph variant {asked!r} (allowed: {', '.join(VARIANTS)})")
    fits = head_dim % 16 == 0
    if asked == "ort" and not fits:
        raise ValueError(f"the `ort` variant (GroupQueryAttention) needs head_dim % 16 == 0, got {head_dim}")
    return asked or (DEFAULT_VARIANT if fits or DEFAULT_VARIANT == "standard" else "standard")


def target_engine(model, base: Path, *, max_seq_len: int, max_nodes: int, max_batch_size: int = 1,
                  medusa=None, medusa_topk: int | None = None, variant: str | None = None,
                  threads: int = 1) -> OrtEngine:  # fmt: skip
    """An OrtEngine over `model` (+ fused Medusa heads), exporting into `base` unless already there.

    The KV capacity is max_seq_len + max_nodes (a step's nodes are written after the committed tokens).
    """
    from builder.export.target import export_target

    variant, cfg, cap = pick_variant(variant, model.cfg.head_dim), model.cfg, max_seq_len + max_nodes
    med = "" if medusa is None else f"-medusa{medusa.num_heads}x{medusa_topk}"
    paths = {}
    for mode in ("greedy", "rejection"):
        folder = base / f"target-{variant}-{mode}-cap{cap}{med}-{exporter_digest()}"
        paths[mode] = _cached(folder, lambda out, mode=mode: export_target(
            model, out, variant=variant, mode=mode, max_seq_len=cap, medusa=medusa,
            medusa_topk=medusa_topk)) / "target.ort.onnx"  # fmt: skip
    spec = TargetSpec(paths["greedy"], paths["rejection"], cfg.num_hidden_layers, cfg.num_key_value_heads,
                      cfg.head_dim, cfg.hidden_size, cfg.vocab_size, cap,
                      None if medusa is None else (medusa.num_heads, medusa_topk))  # fmt: skip
    return OrtEngine(spec, max_seq_len, max_batch_size, threads)


def eagle_net(draft, lm_head_weight, base: Path, *, top_k: int, capacity: int, max_batch_size: int = 1,
              variant: str | None = None, threads: int = 1) -> OrtEagleNet:  # fmt: skip
    """An OrtEagleNet over an EagleDraft, exporting into `base` unless already there."""
    from builder.export.eagle import export_eagle

    variant = pick_variant(variant, draft.cfg.head_dim)
    folder = base / f"eagle-{variant}-k{top_k}-cap{capacity}-{exporter_digest()}"
    graph = _cached(folder, lambda out: export_eagle(draft, lm_head_weight, out, variant=variant, top_k=top_k,
                                                     max_seq_len=capacity)) / "eagle.ort.onnx"  # fmt: skip
    c = draft.cfg
    return OrtEagleNet(graph, layers=c.num_hidden_layers, kv_heads=c.num_key_value_heads, head_dim=c.head_dim,
                       hidden_size=c.hidden_size, top_k=top_k, capacity=capacity, max_batch_size=max_batch_size,
                       threads=threads)  # fmt: skip
