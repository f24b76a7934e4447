"""The engine stages' last step, whichever backend built the folder: the draft budget table, measured on the host that
built it (`builder.engines.draft_budget`) over the recipe's calibration prompts, written into engine.json as
"draft_budget" — the rule the decoding loop applies per step (`builder.speculative.budget`) unless the recipe pins
`triton.draft_schedule`. The ONNX Runtime stage (`builder.stages.engine`) measures it on this CPU; the TensorRT stage
(`builder.stages.tensorrt_engine`) on the GPU it built the engines on, through the same `Engine` / drafter
protocols (the engine folder opened as serving opens it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builder.stages.stage import StageContext

BUDGET_PROMPTS, BUDGET_PROMPT_LEN = 16, 128  # calibration prompts for the table (tokens each, at most)


def calibration_prompts(ctx: StageContext, tokenizer: Path) -> list[list[int]]:
    """Up to BUDGET_PROMPTS prompts of BUDGET_PROMPT_LEN tokens from the recipe's calibration source (shorter
    documents than half that are skipped)."""
    from builder.quantize.calibration import FIELD, documents
    from builder.stages.parts import load_tokenizer

    tok = load_tokenizer(tokenizer)
    prompts: list[list[int]] = []
    src = ctx.loaded.recipe.quantization.calibration.source
    for text in documents(src, ctx.loaded.dir_of(tuple(FIELD.split("."))), BUDGET_PROMPTS):
        ids = tok.encode(text[: BUDGET_PROMPT_LEN * 8]).ids[:BUDGET_PROMPT_LEN]
        if len(ids) >= BUDGET_PROMPT_LEN // 2:
            prompts.append(ids)
        if len(prompts) == BUDGET_PROMPTS:
            break
    return prompts


def measure_into(ctx: StageContext, out: Path, opened: Any, threads: int = 1) -> dict[str, Any] | None:
    """Measure the table of the engine folder `out` (opened as `opened`, `builder.engines.opened.Opened`, with room for
    its max_batch_size sequences), write it into out/engine.json (its backend's model, `builder.handoffs`: checked,
    temp + rename) and return the stage manifest's
    summary; None for an engine without a drafter or whose drafter takes no budget (`Budgeted`)."""
    from builder.engines.draft_budget import BUDGET_S, measure_table
    from builder.handoffs import ENGINE_JSONS, read_engine_json
    from builder.speculative import registry
    from builder.speculative.protocols import Budgeted, implements

    meta = opened.meta
    facts = registry.facts(opened.drafter)
    if facts.max_nodes <= 1 or not implements(opened.make_drafter(), Budgeted):
        return None  # (no draft, or a drafter that takes no budget — a method of another distribution may not)
    ctx.say("measuring the draft budget table on this host (tokens per ms per draft budget and batch size)")
    vocab = opened.engine.vocab_size  # (a tokenizer larger than the model's vocabulary: its ids would index past it)
    prompts = [p for p in calibration_prompts(ctx, out / meta["tokenizer"]) if p and max(p) < vocab]
    if not prompts:
        ctx.say("no calibration prompt fits this engine (length, vocabulary): no draft budget table, the whole draft")
        return None
    batch = int(meta["max_batch_size"])
    rule = measure_table(opened.engine, opened.make_drafter, prompts, facts.max_nodes, batch, BUDGET_S, threads=threads)
    table = rule.to_json()
    data = read_engine_json(out)  # the folder's engine.json, checked against its backend's model, with the table
    ENGINE_JSONS[data["backend"]].model_validate({**data, "draft_budget": table}).write(out)
    return {"picks": {str(b): n for b, n in rule.picks(sorted(rule.cost)).items()}, "tau": table["tau"]}
