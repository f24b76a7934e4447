"""The measured side of `trtspec tune`: plain, the recipe's current setting and the pick, decoded on this host.

Three rows on the recipes' ONNX Runtime engines (built through the cached stages; `threads` per session):
plain (the recipe's engine, no drafter), current (the recipe as written) and tuned (the overlay, its draft
schedule applied, as the served loop applies it). Prompts: the first HumanEval problems (`heldout_prompts`),
held out from the calibration prompts. Batch 1, stop tokens off so every row emits exactly max_new tokens
per prompt (as `scripts/bench_decode.py`), one untimed warm-up prompt per row, then the prompts with the
rows' order rotated per prompt (alternating, so drift on a shared machine hits every row alike), in one
run. Tokens/s ratios to plain are the measured speedups; every row's tokens must equal plain's (greedy is
lossless) — `tokens_equal` says whether they did.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from builder.errors import UserError
from builder.recipe.loader import LoadedRecipe
from builder.timing import rotated, timed


def _rows(loaded: LoadedRecipe, tuned: LoadedRecipe, cache: Path, threads: int) -> list[tuple[str, Any, Any]]:
    """(label, Decoder, DraftSchedule) for plain, current and tuned."""
    from builder.speculative.decoding import DraftSchedule
    from builder.stages.decoders import build_decoder

    def row(label: str, rec: LoadedRecipe, method: str | None) -> tuple[str, Any, Any]:
        dec = build_decoder(rec, method, engine="onnxruntime", threads=threads, cache=cache)
        return label, dec, DraftSchedule(rec.recipe.triton.draft_schedule if method is None else ())

    return [row("plain", loaded, "none"), row("current", loaded, None), row("tuned", tuned, None)]


def _decode(dec: Any, sched: Any, ids: list[int], max_new: int) -> tuple[list[int], int, float]:
    from builder.speculative.decoding import Decoder as Loop
    from builder.speculative.decoding import Request

    seconds, (g,) = timed(lambda: Loop(dec.engine, dec.make_drafter(), sched).run([Request(tuple(ids), max_new)]))
    return g.token_ids, g.steps, seconds


def measure(
    loaded: LoadedRecipe,
    tuned: LoadedRecipe,
    num_prompts: int,
    max_new: int,
    cache: Path,
    threads: int = 1,
    say: Callable[[str], None] = lambda _m: None,
) -> dict[str, Any]:
    """tokens/s, τ and the speedup over plain of each row (module docstring)."""
    from builder.data.humaneval import heldout_prompts

    rows = _rows(loaded, tuned, cache, threads)
    tok = rows[0][1].tokenizer
    prompts = [tok.encode(p).ids for p in heldout_prompts(num_prompts + 1)]
    room = rows[0][1].engine.max_seq_len
    if any(len(p) + max_new > room for p in prompts):
        raise UserError(
            f"a HumanEval prompt + {max_new} new tokens exceeds build.max_seq_len {room}", field="--max-new-tokens"
        )
    for _, dec, sched in rows:
        _decode(dec, sched, prompts[0], max_new)  # warm-up, untimed
    totals = {label: {"tokens": 0, "steps": 0, "seconds": 0.0} for label, _, _ in rows}
    equal = True
    for i, ids in enumerate(prompts[1:]):
        say(f"measured: prompt {i + 1}/{num_prompts}")
        outputs = {}
        for label, dec, sched in rotated(rows, i):
            out, steps, secs = _decode(dec, sched, ids, max_new)
            outputs[label] = out
            t = totals[label]
            t["tokens"], t["steps"], t["seconds"] = t["tokens"] + len(out), t["steps"] + steps, t["seconds"] + secs
        equal = equal and outputs["current"] == outputs["plain"] == outputs["tuned"]
    base = totals["plain"]["tokens"] / totals["plain"]["seconds"]
    out_rows = []
    for label, dec, _ in rows:
        t = totals[label]
        tps = t["tokens"] / t["seconds"]
        out_rows.append(
            {
                "row": label,
                "label": dec.label,
                "tokens_per_s": round(tps, 2),
                "speedup": round(tps / base, 3),
                "tau": round((t["tokens"] - num_prompts) / max(t["steps"], 1), 4),
            }
        )
    return {
        "prompts": f"HumanEval, first {num_prompts} after one warm-up",
        "max_new_tokens": max_new,
        "threads": threads,
        "rows": out_rows,
        "tokens_equal": equal,
    }
