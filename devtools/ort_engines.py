"""ONNX Runtime engines straight from in-memory modules (tests, benchmarks).

Recipes go through the cached build stages instead (`builder.stages`); these helpers export into a
given folder (`<graph>-<variant>-<settings>-<exporter digest>/`, reused when present: folders appear
by atomic rename only) and open the engine. The graph variant follows the stages' rule
(`builder.engines.ort.build.pick_variant`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Callable

from builder.engines.ort.build import pick_variant
from builder.engines.ort.eagle import OrtEagleNet
from builder.engines.ort.target import OrtEngine, TargetSpec
from builder.export.contract import CPU


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


def target_engine(
    model,
    base: Path,
    *,
    max_seq_len: int,
    max_nodes: int,
    max_batch_size: int = 1,
    medusa=None,
    medusa_topk: int | None = None,
    variant: str | None = None,
    threads: int = 1,
    medusa_nbits: int | None = None,
) -> OrtEngine:
    """An OrtEngine over `model` (+ fused Medusa heads, block-quantized to `medusa_nbits` bits where given),
    exporting into `base` unless already there.

    The KV capacity is max_seq_len + max_nodes (a step's nodes are written after the committed tokens).
    """
    from builder.export.target import export_target

    variant, cfg, cap = pick_variant(variant, model.cfg.head_dim, CPU), model.cfg, max_seq_len + max_nodes
    med = (
        "" if medusa is None else f"-medusa{medusa.num_heads}x{medusa_topk}{f'q{medusa_nbits}' if medusa_nbits else ''}"
    )
    paths = {}
    for mode in ("greedy", "rejection"):
        folder = base / f"target-{variant}-{mode}-cap{cap}{med}-{exporter_digest()}"
        paths[mode] = (
            _cached(
                folder,
                lambda out, mode=mode: export_target(
                    model,
                    out,
                    variant=variant,
                    mode=mode,
                    max_seq_len=cap,
                    medusa=medusa,
                    medusa_topk=medusa_topk,
                    medusa_nbits=medusa_nbits,
                ),
            )
            / "target.ort.onnx"
        )
    spec = TargetSpec(
        paths["greedy"],
        paths["rejection"],
        cfg.num_hidden_layers,
        cfg.num_key_value_heads,
        cfg.head_dim,
        cfg.hidden_size,
        cfg.vocab_size,
        cap,
        None if medusa is None else (medusa.num_heads, medusa_topk),
    )
    return OrtEngine(spec, max_seq_len, max_batch_size, threads)


def eagle_net(
    draft,
    lm_head_weight,
    base: Path,
    *,
    top_k: int,
    capacity: int,
    max_batch_size: int = 1,
    variant: str | None = None,
    threads: int = 1,
    nbits: int | None = None,
) -> OrtEagleNet:
    """An OrtEagleNet over an EagleDraft (its weights block-quantized to `nbits` bits where given), exporting into
    `base` unless already there."""
    from builder.export.eagle import export_eagle

    variant = pick_variant(variant, draft.cfg.head_dim, CPU)
    ids = draft.vocab_ids
    vocab = "" if ids is None else f"-v{len(ids)}.{hashlib.sha256(ids.numpy().tobytes()).hexdigest()[:12]}"
    q = f"-q{nbits}" if nbits else ""
    folder = base / f"eagle-{variant}-k{top_k}-cap{capacity}{vocab}{q}-{exporter_digest()}"
    graph = (
        _cached(
            folder,
            lambda out: export_eagle(
                draft, lm_head_weight, out, variant=variant, top_k=top_k, max_seq_len=capacity, nbits=nbits
            ),
        )
        / "eagle.ort.onnx"
    )
    c = draft.cfg
    return OrtEagleNet(
        graph,
        layers=c.num_hidden_layers,
        kv_heads=c.num_key_value_heads,
        head_dim=c.head_dim,
        hidden_size=c.hidden_size,
        top_k=top_k,
        capacity=capacity,
        max_batch_size=max_batch_size,
        threads=threads,
    )
