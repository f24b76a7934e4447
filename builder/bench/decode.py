"""Decode benchmark: HF greedy, HF prompt-lookup, our engine without speculation, every method.

All rows run in one process on the same held-out prompts, so ratios are comparable on a noisy
machine. HF rows use `transformers.LlamaForCausalLM.generate` on the same checkpoint.
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from builder.bench.acceptance import decoders, run_method
from builder.data.humaneval import heldout_prompts
from builder.engines.factory import local_dir
from builder.recipe.loader import LoadedRecipe


def _hf_rows(loaded: LoadedRecipe, prompts: list[list[int]], max_new: int, lookup: int) -> list[dict[str, Any]]:
    from transformers import LlamaForCausalLM

    path = local_dir(loaded, ("model", "checkpoint"), loaded.recipe.model.checkpoint)
    model = LlamaForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()
    rows = []
    for label, extra in (("hf-greedy", {}), (f"hf-prompt-lookup({lookup})", {"prompt_lookup_num_tokens": lookup})):
        tokens, t0 = 0, time.perf_counter()
        for ids in tqdm(prompts, desc=label, leave=False, disable=None):
            x = torch.tensor([ids])
            with torch.no_grad():
                out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=max_new,
                                     do_sample=False, **extra)
            tokens += out.shape[1] - len(ids)
        seconds = time.perf_counter() - t0
        rows.append({"method": label, "prompts": len(prompts), "tokens": tokens, "tau": None,
                     "seconds": round(seconds, 3), "tokens_per_s": round(tokens / seconds, 2)})
    return rows


def bench_decode(loaded: list[LoadedRecipe], num_prompts: int, max_new: int, lookup: int = 10) -> dict[str, Any]:
    decs = decoders(loaded)
    prompts = [decs[0].tokenizer.encode(p).ids for p in heldout_prompts(num_prompts)]
    rows = _hf_rows(loaded[0], prompts, max_new, lookup)
    rows += [run_method(d, prompts, max_new) for d in decs]
    base = rows[0]["tokens_per_s"]
    for r in rows:
        r["vs_hf_greedy"] = round(r["tokens_per_s"] / base, 3)
    return {
        "benchmark": "decode", "recipe": str(loaded[0].path), "prompts": f"HumanEval first {num_prompts}",
        "max_new_tokens": max_new, "torch_threads": torch.get_num_threads(), "machine": platform.platform(),
        "rows": rows,
    }


def table(report: dict[str, Any]) -> str:
    out = [f"decode benchmark — {report['prompts']} prompts × {report['max_new_tokens']} new tokens, "
           f"{report['torch_threads']} torch threads", "",
           "| method | tokens/s | vs HF greedy | τ | tokens | seconds |", "|---|---|---|---|---|---|"]
    for r in report["rows"]:
        tau = "–" if r["tau"] is None else f"{r['tau']:.2f}"
        out.append(f"| {r['method']} | {r['tokens_per_s']:.1f} | {r['vs_hf_greedy']:.2f}× | {tau} | "
                   f"{r['tokens']} | {r['seconds']:.1f} |")
    return "\n".join(out)


def write(report: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
