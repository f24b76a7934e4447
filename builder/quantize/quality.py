"""The quality report of an FP8 build: FP8 against the unquantized model, on held-out prompts.

* perplexity — teacher-forced over HumanEval prompts [0, n) (`builder.data.humaneval`; calibration never
  reads them: `builder.quantize.calibration.HELDOUT`), the fp32 reference model against the FP8 reference
  (`builder.quantize.reference`: the numerics the exported Q/DQ graph is tested to follow);
* greedy agreement — plain greedy decoding (no drafter) through the ONNX Runtime engines, FP8 against
  fp32: the share of generated positions holding the same token, and per prompt the first position where
  the two differ (None: identical);
* τ per method — acceptance length (tokens per target step) of each method through the ORT engines, FP8
  against fp32, with the target's ms per step.

`measure` takes the engines as `Side`s (built by the export stage), so this module knows no file layout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from builder.export.qdq import Fp8Spec
from builder.model.llama import Llama, causal_mask
from builder.quantize.reference import Fp8KVCache, fake_quant_model
from builder.speculative.decoding import Decoder, Request
from builder.timing import markdown_table

NUM_PROMPTS = 20
MAX_NEW = 48


@dataclass
class Side:
    """One precision's engine and drafter factories, by method label."""

    engine: Any  # an Engine (builder.speculative.protocols)
    drafters: dict[str, Callable[[], Any]]  # label -> () -> Drafter | None


def nll(model: Llama, ids: Sequence[int], spec: Fp8Spec | None = None) -> tuple[float, int]:
    """Summed negative log-likelihood of ids[1:] given the prefix, and the token count (one causal pass)."""
    T = len(ids)
    tokens = torch.tensor([list(ids)], dtype=torch.int64)  # (1, T)
    pos = torch.arange(T)[None]  # (1, T)
    cfg = model.cfg
    cache_args = (cfg.num_hidden_layers, 1, cfg.num_key_value_heads, cfg.head_dim, T, model.dtype)
    cache = Fp8KVCache(spec, *cache_args) if spec is not None else None
    with torch.no_grad():
        logits, _ = model(tokens, pos, causal_mask(T), cache=cache)  # (1, T, V)
    logp = torch.log_softmax(logits[0, :-1].double(), dim=-1)  # (T-1, V)
    return float(-logp.gather(1, tokens[0, 1:, None]).sum()), T - 1


def perplexity(model: Llama, prompts: Sequence[Sequence[int]], spec: Fp8Spec | None = None) -> float:
    """exp(mean NLL) over every predicted prompt token; `spec` runs the FP8 reference of `model`."""
    ref = model if spec is None else fake_quant_model(model, spec)
    total, count = 0.0, 0
    for ids in prompts:
        s, n = nll(ref, ids, spec)
        total, count = total + s, count + n
    return math.exp(total / count)


def _generate(
    engine: Any, make: Callable[[], Any], prompts: Sequence[Sequence[int]], max_new: int, stop_ids: Sequence[int]
) -> tuple[list[list[int]], dict[str, float]]:
    outs, steps, accepted, target_s = [], 0, 0, 0.0
    for ids in prompts:
        loop = Decoder(engine, make())
        gen = loop.run([Request(tuple(ids), max_new, stop_ids=tuple(stop_ids))])[0]
        outs.append(gen.token_ids)
        steps, accepted = steps + gen.steps, accepted + sum(gen.accepted_per_step)
        target_s += loop.timing.target
    tau = (accepted + steps) / steps if steps else 0.0
    return outs, {"tau": round(tau, 4), "target_ms_per_step": round(1e3 * target_s / max(steps, 1), 4), "steps": steps}


def agreement(ref: list[list[int]], got: list[list[int]]) -> dict[str, Any]:
    """Token-level agreement of two greedy generations per prompt, and first-divergence positions."""
    same = total = 0
    first: list[int | None] = []
    for a, b in zip(ref, got):
        n = max(len(a), len(b))
        hits = [i < len(a) and i < len(b) and a[i] == b[i] for i in range(n)]
        same, total = same + sum(hits), total + n
        first.append(next((i for i, h in enumerate(hits) if not h), None))
    diverged = [f for f in first if f is not None]
    return {
        "token_agreement": round(same / total, 4) if total else 1.0,
        "positions": total,
        "identical_prompts": sum(f is None for f in first),
        "first_divergence": first,
        "median_first_divergence": sorted(diverged)[len(diverged) // 2] if diverged else None,
    }


def measure(
    fp32_model: Llama,
    fp8_model: Llama,
    spec: Fp8Spec,
    fp32: Side,
    fp8: Side,
    prompts: Sequence[Sequence[int]],
    stop_ids: Sequence[int],
    max_new: int = MAX_NEW,
    say: Callable[[str], None] = lambda _m: None,
) -> dict[str, Any]:
    """The report (module docstring) as plain data."""
    say("quality: perplexity (torch references)")
    ppl = {"fp32": round(perplexity(fp32_model, prompts), 4), "fp8": round(perplexity(fp8_model, prompts, spec), 4)}
    methods: dict[str, dict[str, Any]] = {}
    greedy: dict[str, list[list[int]]] = {}
    for label in fp32.drafters:
        say(f"quality: τ of {label}, fp32 and FP8 (ONNX Runtime)")
        row = {}
        for name, side in (("fp32", fp32), ("fp8", fp8)):
            outs, stats = _generate(side.engine, side.drafters[label], prompts, max_new, stop_ids)
            row[name] = stats
            if label == "none":
                greedy[name] = outs
        methods[label] = row
    return {
        "prompts": f"HumanEval prompts 0..{len(prompts) - 1} (never calibrated on)",
        "num_prompts": len(prompts),
        "max_new_tokens": max_new,
        "perplexity": ppl,
        "perplexity_ratio": round(ppl["fp8"] / ppl["fp32"], 4),
        "greedy": agreement(greedy["fp32"], greedy["fp8"]),
        "methods": methods,
    }


def markdown(report: dict[str, Any]) -> str:
    g, p = report["greedy"], report["perplexity"]
    lines = [
        f"# FP8 quality ({report['prompts']}, {report['max_new_tokens']} new tokens)",
        "",
        f"Perplexity: fp32 {p['fp32']:.4f}, FP8 {p['fp8']:.4f} (×{report['perplexity_ratio']:.4f}).",
        "",
        f"Greedy agreement (FP8 vs fp32, ONNX Runtime): {100 * g['token_agreement']:.1f} % of "
        f"{g['positions']} positions; {g['identical_prompts']}/{report['num_prompts']} prompts identical; "
        f"first divergence per prompt: {g['first_divergence']}.",
        "",
    ]
    header = ("method", "τ fp32", "τ FP8", "target ms/step fp32", "target ms/step FP8")
    rows = [
        (label, *(f"{side[k]:.3f}" for k in ("tau", "target_ms_per_step") for side in (row["fp32"], row["fp8"])))
        for label, row in report["methods"].items()
    ]
    return "\n".join(lines + markdown_table(header, rows)) + "\n"
