"""The checks `trtspec ci` runs on what a recipe built: lossless, acceptance and speed, FP8 quality.

One decode pass per engine feeds the first two. Each held-out HumanEval prompt (`builder.data.humaneval`)
is decoded greedily twice on the built engine — plain (no drafter) and with the recipe's drafter — in
alternating order (plain first on even prompts, the method first on odd ones), after one untimed
warm-up decode of each, with no stop tokens (every decode emits `max_new_tokens`):

* lossless — the greedy tokens (plain and with the drafter) must equal the oracle's, token for token
  (STYLE §5; no tolerance: a mismatch fails and is reported with its prompt, position, both tokens and,
  for the torch oracle, the reference's top-2 logit gap there, so a near-tie can be told from a bug). For
  unquantized recipes the oracle is the torch reference model (`builder.model.llama`, the recipe's
  checkpoint and dtype) decoding greedily by recomputing the whole sequence for every token — no KV
  cache, no engine code — computed once per run for recipes sharing a target. For FP8 recipes, whose
  engine computes other numbers than the unquantized reference, it is the same engine decoding plainly
  (speculation must not change its tokens; FP8 against fp32 is the quality report).
* acceptance and speed — τ (tokens emitted per target step) of plain decoding and of the recipe's
  method, and tokens/s of each from this process's CPU time (`time.process_time`: the engines run on one
  thread, so other jobs on a shared runner change it less than wall time; wall time is recorded too).
  `speed_ratio` = method tokens/s ÷ plain tokens/s, the quantity the speed gate compares.
* FP8 quality — the export stage's quality.json (`builder.quantize.quality`): perplexity fp32 → FP8
  (Δppl), greedy agreement FP8 vs fp32.

Engines: ONNX Runtime folders here; TensorRT folders where TensorRT imports (a GPU host). TensorRT-LLM
engines have no decoder in trtspec: scripts/gpu_check.sh compares them with ONNX Runtime.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from builder.ci.matrix import Checks
from builder.recipe.loader import LoadedRecipe
from builder.timing import rotated

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
MAX_MISMATCHES = 5  # reported per check


@dataclass
class CheckResult:
    status: str  # passed | failed | skipped
    reason: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "seconds": round(self.seconds, 3), **self.data}


@dataclass
class Role:
    """One way of decoding (plain or the recipe's method) summed over the prompts."""

    tokens: int = 0
    steps: int = 0  # target steps after prefill
    accepted: int = 0  # draft tokens accepted (bonus tokens excluded)
    cpu_s: float = 0.0
    wall_s: float = 0.0
    outputs: list[list[int]] = field(default_factory=list)

    @property
    def tau(self) -> float:
        return (self.accepted + self.steps) / self.steps if self.steps else 0.0

    def as_json(self, label: str) -> dict[str, Any]:
        return {
            "method": label,
            "tau": round(self.tau, 4),
            "tokens": self.tokens,
            "target_steps": self.steps,
            "tokens_per_cpu_s": round(self.tokens / self.cpu_s, 2) if self.cpu_s else None,
            "tokens_per_s": round(self.tokens / self.wall_s, 2) if self.wall_s else None,
        }


def _decode(engine: Any, drafter: Any, ids: Sequence[int], max_new: int, role: Role | None) -> list[int]:
    from builder.speculative.decoding import Decoder, Request

    c0, t0 = time.process_time(), time.perf_counter()
    g = Decoder(engine, drafter).run([Request(tuple(ids), max_new)])[0]
    if role is not None:
        role.cpu_s += time.process_time() - c0
        role.wall_s += time.perf_counter() - t0
        role.tokens, role.steps = role.tokens + len(g.token_ids), role.steps + g.steps
        role.accepted += sum(g.accepted_per_step)
        role.outputs.append(list(g.token_ids))
    return list(g.token_ids)


def measure(engine: Any, make_drafter: Callable[[], Any], prompts: list[list[int]], max_new: int) -> dict[str, Role]:
    """Decode every prompt plainly and with the drafter (module docstring); roles "plain" and "method"."""
    makers: dict[str, Callable[[], Any]] = {"plain": lambda: None}
    if make_drafter() is not None:
        makers["method"] = make_drafter
    for make in makers.values():  # warm-up: session allocations, first shapes
        _decode(engine, make(), prompts[0], max_new, None)
    roles = {name: Role() for name in makers}
    for i, ids in enumerate(prompts):
        for name in rotated(list(makers), i):
            _decode(engine, makers[name](), ids, max_new, roles[name])
    return roles


def open_decodable(folder: Path) -> Any:
    """The engine folder's `Opened` (`builder.engines.folder.open_engine`: engine, drafter factory, label,
    tokenizer); None for backends trtspec does not decode (TensorRT-LLM: its C++ runtime decodes)."""
    path = folder / "engine.json"
    meta = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    if meta.get("backend") not in ("onnxruntime", "tensorrt"):
        return None
    from builder.engines.folder import open_engine

    return open_engine(folder)


def engine_checks(
    loaded: LoadedRecipe, folder: Path, quantized: bool, checks: Checks, memo: dict[str, Any] | None = None
) -> dict[str, CheckResult]:
    """lossless and acceptance of the engine in `folder` (one decode pass feeds both). `memo` keeps the torch
    oracle's tokens for the run: recipes on the same target checkpoint share them."""
    from builder.data.humaneval import heldout_prompts
    from builder.stages.decoders import load_tokenizer

    t0 = time.perf_counter()
    opened = open_decodable(folder)
    if opened is None:
        why = "trtspec decodes ONNX Runtime and TensorRT engines; scripts/gpu_check.sh checks TensorRT-LLM engines"
        return {"lossless": CheckResult(SKIPPED, why), "acceptance": CheckResult(SKIPPED, why)}
    tok = load_tokenizer(opened.tokenizer_path)
    prompts = [tok.encode(p).ids for p in heldout_prompts(checks.prompts)]
    room = opened.engine.max_seq_len
    too_long = [i for i, p in enumerate(prompts) if len(p) + checks.max_new_tokens > room]
    if too_long:
        why = f"prompts {too_long} + {checks.max_new_tokens} new tokens exceed build.max_seq_len {room}"
        return {"lossless": CheckResult(FAILED, why), "acceptance": CheckResult(FAILED, why)}
    roles = measure(opened.engine, opened.make_drafter, prompts, checks.max_new_tokens)
    decode_s = time.perf_counter() - t0
    acceptance = _acceptance(roles, opened.label)
    acceptance.seconds = decode_s
    t1 = time.perf_counter()
    lossless = lossless_check(
        loaded, quantized, prompts, checks.max_new_tokens, roles, opened.label, {} if memo is None else memo
    )
    lossless.seconds = time.perf_counter() - t1
    return {"lossless": lossless, "acceptance": acceptance}


def _acceptance(roles: dict[str, Role], label: str) -> CheckResult:
    plain = roles["plain"]
    method = roles.get("method", plain)
    rows = {"plain": plain.as_json("none"), "method": method.as_json(label if "method" in roles else "none")}
    ratio = (method.tokens / method.cpu_s) / (plain.tokens / plain.cpu_s) if method.cpu_s and plain.cpu_s else None
    wall = (method.tokens / method.wall_s) / (plain.tokens / plain.wall_s) if method.wall_s and plain.wall_s else None
    data = {
        "method": rows["method"]["method"],
        "tau": rows["method"]["tau"],
        "rows": rows,
        "speed_ratio": None if ratio is None else round(ratio, 4),
        "speed_ratio_wall": None if wall is None else round(wall, 4),
    }
    if plain.tau != 1.0:  # plain decoding emits one token per step by definition: a broken loop otherwise
        return CheckResult(FAILED, f"plain decoding gave τ = {plain.tau:.4f}, not 1", data)
    return CheckResult(PASSED, "", data)


def torch_oracle(
    loaded: LoadedRecipe, prompts: list[list[int]], max_new: int, memo: dict[str, Any]
) -> tuple[list[list[int]], list[list[tuple[float, float]]]]:
    """Plain greedy tokens of the torch reference model, each token from a forward pass over the whole
    sequence (no KV cache: greedy decoding in its simplest form), with the top-2 logit gap and max |logit|
    at every position; remembered per target checkpoint, dtype and prompts."""
    import torch

    from builder.stages.inputs import checkpoint_identity
    from builder.stages.parts import Parts

    r = loaded.recipe
    key = json.dumps(
        [
            checkpoint_identity(r.model.checkpoint, loaded.dir_of(("model", "checkpoint"))),
            r.model.dtype,
            prompts,
            max_new,
        ],
        sort_keys=True,
        default=str,
    )
    if key not in memo:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # small models: more threads only fight other jobs on a shared runner
        try:
            memo[key] = _greedy_by_recomputation(Parts(loaded, "none").model(), prompts, max_new)
        finally:
            torch.set_num_threads(threads)
    return memo[key]


def _greedy_by_recomputation(
    model: Any, prompts: list[list[int]], max_new: int
) -> tuple[list[list[int]], list[list[tuple[float, float]]]]:
    import torch

    from builder.model.llama import causal_mask

    outs, gaps = [], []
    with torch.no_grad():
        for p in prompts:
            ids, gap = list(p), []
            for _ in range(max_new):
                T = len(ids)
                logits, _ = model(torch.tensor([ids]), torch.arange(T)[None], causal_mask(T))  # (1, T, V)
                last = logits[0, -1].double()  # (V,)
                top = torch.topk(last, 2).values
                gap.append((float(top[0] - top[1]), float(last.abs().max())))
                ids.append(int(last.argmax()))
            outs.append(ids[len(p) :])
            gaps.append(gap)
    return outs, gaps


def lossless_check(
    loaded: LoadedRecipe,
    quantized: bool,
    prompts: list[list[int]],
    max_new: int,
    roles: dict[str, Role],
    label: str,
    memo: dict[str, Any],
) -> CheckResult:
    gaps: list[list[tuple[float, float]]] = []
    if quantized:
        oracle = "the same engine, plain greedy (FP8: quality.json compares it with fp32)"
        want, compared = roles["plain"].outputs, {label: roles["method"].outputs} if "method" in roles else {}
        if not compared:
            return CheckResult(SKIPPED, "an FP8 recipe without a drafter: plain decoding is its own oracle")
    else:
        oracle = "torch reference model, plain greedy by full recomputation"
        want, gaps = torch_oracle(loaded, prompts, max_new, memo)
        compared = {"none": roles["plain"].outputs, **({label: roles["method"].outputs} if "method" in roles else {})}
    mismatches = []
    for name, outs in compared.items():
        for i, (a, b) in enumerate(zip(want, outs)):
            pos = next((j for j in range(max(len(a), len(b))) if j >= len(a) or j >= len(b) or a[j] != b[j]), None)
            if pos is None:
                continue
            row = {
                "decoding": name,
                "prompt": i,
                "position": pos,
                "expected": a[pos] if pos < len(a) else None,
                "got": b[pos] if pos < len(b) else None,
            }
            if gaps and pos < len(gaps[i]):
                row.update(top2_gap=gaps[i][pos][0], max_abs_logit=gaps[i][pos][1])
            mismatches.append(row)
    data = {
        "oracle": oracle,
        "prompts": len(prompts),
        "max_new_tokens": max_new,
        "compared": sorted(compared),
        "mismatching": len(mismatches),
        "mismatches": mismatches[:MAX_MISMATCHES],
    }
    if not mismatches:
        return CheckResult(PASSED, "", data)
    m = mismatches[0]
    gap = (
        f", reference top-2 logit gap {m['top2_gap']:.3g} of max |logit| {m['max_abs_logit']:.3g}"
        if "top2_gap" in m
        else ""
    )
    return CheckResult(
        FAILED,
        f"{len(mismatches)} decodes differ from the oracle ({oracle}); first: {m['decoding']}, "
        f"prompt {m['prompt']}, token {m['position']}: expected {m['expected']}, got {m['got']}{gap}",
        data,
    )


def fp8_quality(export_folder: Path) -> CheckResult:
    """The FP8 quality report the export stage measured (quality.json), as gate-able numbers."""
    from builder.stages.export import QUALITY_JSON

    path = export_folder / QUALITY_JSON
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
        ppl, greedy = report["perplexity"], report["greedy"]
        data = {
            "perplexity_fp32": ppl["fp32"],
            "perplexity_fp8": ppl["fp8"],
            "delta_ppl": round(ppl["fp8"] - ppl["fp32"], 4),
            "perplexity_ratio": report["perplexity_ratio"],
            "token_agreement": greedy["token_agreement"],
            "identical_prompts": greedy["identical_prompts"],
            "num_prompts": report["num_prompts"],
            "report": str(path),
        }
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return CheckResult(FAILED, f"no readable FP8 quality report at {path}: {exc}")
    return CheckResult(PASSED, "", data)
