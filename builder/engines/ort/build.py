"""Export (cached) and assemble the ONNX Runtime engine and drafter for a recipe.

Exports live under the cache directory (`TRTSPEC_CACHE_DIR`, default `.trtspec-cache`) in
`export/<export stage key>/<graph>-<variant>-<digest>/`: the key is the one `trtspec plan` computes
for the export stage (recipe fields, checkpoint identity, trtspec version); the folder name adds the
graph's own settings and a digest of the exporter's source, so a changed exporter never reuses a stale
graph. A present folder is a cache hit (folders appear by atomic rename only).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Callable

from builder.engines.ort.eagle import OrtEagleNet
from builder.engines.ort.target import OrtEngine, TargetSpec

VARIANTS = ("ort", "standard")
DEFAULT_VARIANT = "ort"  # GroupQueryAttention: measured fastest on the CPU (scripts/bench_export_variants.py)


def cache_root() -> Path:
    return Path(os.environ.get("TRTSPEC_CACHE_DIR", ".trtspec-cache"))


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


def export_dir(parts: Any) -> Path:
    from builder.plan.stages import plan_stages

    key = next(s.key for s in plan_stages(parts.loaded) if s.name == "export")
    return cache_root() / "export" / key


def pick_variant(variant: str | None, head_dim: int) -> str:
    """The graph variant: as asked (or TRTSPEC_ORT_VARIANT), else `ort` where GroupQueryAttention runs
    (head_dim a multiple of 16, ORT's CPU kernel's rule), else `standard`."""
    asked = variant or os.environ.get("TRTSPEC_ORT_VARIANT")
    if asked is not None and asked not in VARIANTS:
        raise ValueError(f"unknown ONNX Runtime graph variant {asked!r} (allowed: {', '.join(VARIANTS)})")
    fits = head_dim % 16 == 0
    if asked == "ort" and not fits:
        raise ValueError(f"the `ort` variant (GroupQueryAttention) needs head_dim % 16 == 0, got {head_dim}")
    return asked or (DEFAULT_VARIANT if fits else "standard")


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


def ort_parts(parts: Any, variant: str | None = None, threads: int = 1) -> tuple[OrtEngine, Callable, str]:
    """(engine, drafter factory, label) for `parts` (builder.engines.factory._Parts)."""
    model = parts.model()
    make, max_nodes, medusa = _drafter(parts, model, variant, threads)
    engine = target_engine(model, export_dir(parts), max_seq_len=parts.max_seq_len, max_nodes=max_nodes,
                           max_batch_size=parts.max_batch_size, medusa=None if medusa is None else medusa[0],
                           medusa_topk=None if medusa is None else medusa[1], variant=variant, threads=threads)  # fmt: skip
    return engine, make, parts.label()


def _drafter(parts: Any, model, variant: str | None, threads: int):
    """(drafter factory, max nodes per step, (Medusa heads, top-k) or None)."""
    method = parts.method
    if method == "none":
        return (lambda: None), 1, None
    if method == "lookahead":
        from builder.speculative.lookahead.drafter import LookaheadDrafter

        w, n, g = parts.lookahead()
        probe = LookaheadDrafter(w, n, g)
        return (lambda: LookaheadDrafter(w, n, g)), probe.max_nodes, None
    if method == "medusa":
        from builder.speculative.medusa.drafter import MedusaDrafter
        from builder.speculative.tree import tree_from_choices

        heads = parts.medusa(model)  # first: checks that the recipe configures Medusa
        tree = tree_from_choices(parts.choices())
        return (lambda: MedusaDrafter(tree)), tree.num_nodes, (heads, int(tree.rank.max()) + 1)
    return _eagle(parts, model, variant, threads)


def _eagle(parts: Any, model, variant: str | None, threads: int):
    from builder.speculative.eagle.drafter import EagleDrafter

    draft, tree, top_k, tentative = parts.eagle(model)
    net = eagle_net(draft, model.lm_head.weight, export_dir(parts), top_k=top_k,
                    capacity=parts.max_seq_len + tentative + 1, max_batch_size=parts.max_batch_size, variant=variant,
                    threads=threads)  # fmt: skip
    max_nodes = tree.total_nodes + 1 if hasattr(tree, "total_nodes") else tree.num_nodes
    return (lambda: EagleDrafter(net, tree)), max_nodes, None
