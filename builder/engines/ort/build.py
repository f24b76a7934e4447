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


def ort_parts(parts: Any, variant: str | None = None, threads: int = 1) -> tuple[OrtEngine, Callable, str]:
    """(engine, drafter factory, label) for `parts` (builder.engines.factory._Parts)."""
    from builder.export.target import export_target

    variant = variant or os.environ.get("TRTSPEC_ORT_VARIANT", DEFAULT_VARIANT)
    if variant not in VARIANTS:
        raise ValueError(f"unknown ONNX Runtime graph variant {variant!r} (allowed: {', '.join(VARIANTS)})")
    model = parts.model()
    cfg = model.cfg
    make, max_nodes, medusa = _drafter(parts, model, variant, threads)
    cap = parts.max_seq_len + max_nodes
    base, digest = export_dir(parts), exporter_digest()
    med = "" if medusa is None else f"-medusa{medusa[0].num_heads}x{medusa[1]}"
    paths = {}
    for mode in ("greedy", "rejection"):
        folder = base / f"target-{variant}-{mode}-cap{cap}{med}-{digest}"
        paths[mode] = _cached(folder, lambda out, mode=mode: export_target(
            model, out, variant=variant, mode=mode, max_seq_len=cap, medusa=None if medusa is None else medusa[0],
            medusa_topk=None if medusa is None else medusa[1])) / "target.ort.onnx"  # fmt: skip
    spec = TargetSpec(paths["greedy"], paths["rejection"], cfg.num_hidden_layers, cfg.num_key_value_heads,
                      cfg.head_dim, cfg.hidden_size, cfg.vocab_size, cap,
                      None if medusa is None else (medusa[0].num_heads, medusa[1]))  # fmt: skip
    engine = OrtEngine(spec, parts.max_seq_len, parts.max_batch_size, threads)
    return engine, make, parts.label()


def _drafter(parts: Any, model, variant: str, threads: int):
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


def _eagle(parts: Any, model, variant: str, threads: int):
    from builder.export.eagle import export_eagle
    from builder.speculative.eagle.drafter import EagleDrafter

    draft, tree, top_k, tentative = parts.eagle(model)
    cap = parts.max_seq_len + tentative + 1
    folder = export_dir(parts) / f"eagle-{variant}-k{top_k}-cap{cap}-{exporter_digest()}"
    graph = _cached(folder, lambda out: export_eagle(draft, model.lm_head.weight, out, variant=variant, top_k=top_k,
                                                     max_seq_len=cap)) / "eagle.ort.onnx"  # fmt: skip
    c = draft.cfg
    net = OrtEagleNet(graph, layers=c.num_hidden_layers, kv_heads=c.num_key_value_heads, head_dim=c.head_dim,
                      hidden_size=c.hidden_size, top_k=top_k, capacity=cap, max_batch_size=parts.max_batch_size,
                      threads=threads)  # fmt: skip
    max_nodes = tree.total_nodes + 1 if hasattr(tree, "total_nodes") else tree.num_nodes
    return (lambda: EagleDrafter(net, tree)), max_nodes, None
