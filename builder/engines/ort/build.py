"""The ONNX Runtime graph variant rule: which graph the export stage writes for a recipe (`pick_variant`).

Engines straight from in-memory modules (tests, benchmarks) are development tooling: `devtools.ort_engines`.
"""

from __future__ import annotations

import os

from builder.export.contract import CPU, Precision

VARIANTS = ("ort", "standard")
# The lean `ort` graph by default for what ONNX Runtime runs in the CPU form (builder.export.ort_variant). One
# plain step under ORT's profiler (scripts/profile_step.py: 1 thread, past 300), kernel ms against `standard`:
# tiny fixture 0.445 vs 0.742, regime fixture 6.42 vs 6.95 (ONNX Runtime GenAI's graph: 0.385, 6.77); 61 / 151
# nodes against 175 / 382. `standard` where GroupQueryAttention cannot run (head_dim % 16) and for the GPU form,
# which the TensorRT path rewrites.
DEFAULT_VARIANT = "ort"


def pick_variant(variant: str | None, head_dim: int, precision: Precision | None = None) -> str:
    """The graph variant: as asked (or TRTSPEC_ORT_VARIANT); else `ort` for graphs in the CPU form
    (`precision` CPU) where GroupQueryAttention runs (head_dim a multiple of 16, ORT's CPU kernel's rule),
    `standard` otherwise — and for callers that do not say the precision (a GPU form must be `standard`)."""
    asked = variant or os.environ.get("TRTSPEC_ORT_VARIANT")
    if asked is not None and asked not in VARIANTS:
        raise ValueError(f"unknown ONNX Runtime graph variant {asked!r} (allowed: {', '.join(VARIANTS)})")
    fits = head_dim % 16 == 0
    if asked == "ort" and not fits:
        raise ValueError(f"the `ort` variant (GroupQueryAttention) needs head_dim % 16 == 0, got {head_dim}")
    return asked or (DEFAULT_VARIANT if fits and precision == CPU else "standard")
