"""export: the ONNX step graphs the engines run (builder.export), for the recipe's method.

Folders: `target-greedy/`, `target-rejection/` (Medusa heads fused in when the recipe uses Medusa),
`eagle/` for EAGLE recipes, and `export.json` with what the engine stage needs. The KV capacity
leaves room for the recipe's draft and for Lookahead's default window (`--method lookahead`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from builder.speculative.drafters import drafter_shape
from builder.stages.context import StageContext
from builder.stages.parts import DEFAULT_LOOKAHEAD, Parts

EXPORT_INFO = "export.json"


def capacity(max_seq_len: int, config: dict[str, Any]) -> int:
    w, n, g = DEFAULT_LOOKAHEAD
    default = drafter_shape({"method": "lookahead", "window": w, "ngram": n, "verification_set": g})["max_nodes"]
    return max_seq_len + max(drafter_shape(config)["max_nodes"], default)


def run(ctx: StageContext, out: Path) -> None:
    from builder.engines.ort.build import pick_variant
    from builder.export.target import export_target

    parts = Parts(ctx.loaded, ctx.loaded.recipe.speculative.method)
    ctx.say("loading the target")
    model = parts.model()
    config = parts.drafter_config()
    shape = drafter_shape(config)
    cap = capacity(parts.max_seq_len, config)
    variant = pick_variant(None, model.cfg.head_dim)
    medusa = parts.medusa(model) if parts.method == "medusa" else None
    k = shape["top_k"] if medusa is not None else None
    for mode in ("greedy", "rejection"):
        ctx.say(f"exporting the target step graph ({mode}, {variant})")
        export_target(model, out / f"target-{mode}", variant=variant, mode=mode, max_seq_len=cap, medusa=medusa,
                      medusa_topk=k)  # fmt: skip
    info: dict[str, Any] = {"variant": variant, "capacity": cap, "max_seq_len": parts.max_seq_len, "drafter": config,
                            "medusa": None if medusa is None else {"heads": medusa.num_heads, "top_k": k},
                            "eagle": None}  # fmt: skip
    if parts.method == "eagle":
        info["eagle"] = _eagle(ctx, parts, model, out, variant, shape)
    (out / EXPORT_INFO).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    ctx.info.update(variant=variant, capacity=cap)


def _eagle(ctx: StageContext, parts: Parts, model, out: Path, variant: str, shape: dict[str, int]) -> dict[str, Any]:
    from builder.export.eagle import export_eagle

    draft = parts.eagle(model)
    cap = parts.max_seq_len + shape["tentative"] + 1
    ctx.say(f"exporting the EAGLE draft graph ({variant})")
    export_eagle(draft, model.lm_head.weight, out / "eagle", variant=variant, top_k=shape["top_k"], max_seq_len=cap)
    c = draft.cfg
    return {"layers": c.num_hidden_layers, "kv_heads": c.num_key_value_heads, "head_dim": c.head_dim,
            "hidden": c.hidden_size, "top_k": shape["top_k"], "capacity": cap}  # fmt: skip
