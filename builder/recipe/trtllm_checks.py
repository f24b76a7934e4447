"""Cross-field rules for `target.backend: trtllm`, each naming the TensorRT-LLM limit it enforces.

Only what TensorRT-LLM 1.2.x itself refuses (or silently mishandles) is checked here; the rules every
backend shares (tp | heads, FP8 on sm89+, tp × pp = gpus, trees, max_draft_len formulas) live in
`checks` and `spec_checks`. Sources are cited per rule (NVIDIA/TensorRT-LLM, release/1.2 line).
"""

from __future__ import annotations

from builder.recipe.findings import Findings

UPSTREAM = "TensorRT-LLM 1.2"


def kv_heads_rule(kv_heads: int, tp: int) -> str | None:
    """None when TensorRT-LLM can shard `kv_heads` over `tp` ranks, else why not.

    tensorrt_llm/models/llama/convert.py (`split_qkv_tp`, `dup_kv_weight`): with fewer KV heads than ranks
    each KV head is duplicated tp / kv_heads times, which needs tp % kv_heads == 0; otherwise the heads
    are split evenly, which needs kv_heads % tp == 0.
    """
    if kv_heads >= tp:
        return None if kv_heads % tp == 0 else f"tp={tp} does not divide num_kv_heads={kv_heads}"
    if tp % kv_heads == 0:
        return None
    return (f"num_kv_heads={kv_heads} < tp={tp} and tp is not a multiple of it: {UPSTREAM} duplicates each KV "
            f"head tp / kv_heads times (tensorrt_llm/models/llama/convert.py dup_kv_weight)")


def check_trtllm(c: Findings) -> None:
    """The trtllm backend's own rules (called only when target.backend is trtllm)."""
    r = c.recipe
    t, spec, q = r.trtllm, r.speculative, r.quantization
    if r.target.device == "cpu":
        return  # `checks.target` already says trtllm needs a GPU target
    if r.triton.draft_schedule:
        c.add(("triton", "draft_schedule"), "the trtllm backend's C++ runtime decides the draft per step; "
              "draft_schedule drives trtspec's own spec_decoder only", allowed="[] (empty)")
    if spec.method != "none" and spec.verification != "greedy":
        c.add(("speculative", "verification"), f"{UPSTREAM} verifies {spec.method} drafts greedily (top-1 "
              "acceptance); tree rejection sampling is trtspec's own engine only", allowed="greedy")
    fp8 = q.mode == "fp8"
    if t.gemm_plugin == "fp8" and not fp8:
        c.add(("trtllm", "gemm_plugin"), "gemm_plugin fp8 needs FP8 weights (quantization.mode: fp8)",
              allowed="auto, bfloat16, float16")
    if t.use_fp8_context_fmha:
        if q.kv_cache != "fp8":
            c.add(("trtllm", "use_fp8_context_fmha"), "FP8 context FMHA needs an FP8 KV cache "
                  "(quantization.kv_cache: fp8; tensorrt_llm/commands/build.py)", allowed="false, null")
        if not t.use_paged_context_fmha:
            c.add(("trtllm", "use_fp8_context_fmha"), "FP8 context FMHA needs paged context FMHA "
                  "(trtllm.use_paged_context_fmha: true; tensorrt_llm/commands/build.py)", allowed="false, null")
    if t.workers is not None and t.workers > r.target.gpus:
        c.add(("trtllm", "workers"), f"workers={t.workers} exceeds the {r.target.gpus} rank(s) to build",
              allowed=f"1..{r.target.gpus}")
