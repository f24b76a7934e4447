"""Cross-field rules for `target.backend: trtllm`, each naming the TensorRT-LLM 1.2 limit it enforces.

Only what TensorRT-LLM's engine path (trtllm-build + the Triton C++ `inflight_batcher_llm` backend) itself
refuses, or silently mishandles, is checked here; the rules every backend shares (tp | heads, FP8 on
sm89+, tp × pp = gpus, tree shape, the Lookahead draft-length formula) live in `checks` and
`spec_checks`. Sources (NVIDIA/TensorRT-LLM, 1.x line; file @ commit where the index gave one):

- triton_backend/inflight_batcher_llm/src/model_instance_state.cc @0c8de69a (`getExecutorConfigFromParams`):
  EAGLE gets `executor::EagleConfig(eagleChoices)` only — `useDynamicTree` stays false, so EAGLE-2
  dynamic trees are not served through Triton; utils.cc @19290813 never sets a per-request EagleConfig.
- cpp/tensorrt_llm/layers/medusaDecodingLayer.cpp @015884d6 (top-k 1 target sampling, drafts accepted by
  exact id match), lookaheadDecodingLayer.cpp @05cc2c11 (`maxTopK = 1`, "Beam width must be 1"),
  EagleConfig's `greedySampling = true` default: all three verify greedily.
- cpp/tensorrt_llm/runtime/utils/speculativeChoicesUtils.cpp: choices ≤ max_draft_len, no depth gaps, 4-bit
  prefix chunks (`PREFIX_CHUNK_SIZE_BITS = 4`: depth ≤ 16, ranks 0..15); missing parents are NOT detected
  (trtspec's own prefix check in `spec_checks` covers that).
- tensorrt_llm/builder.py: EAGLE `max_batch_size <= 512`, `max_draft_len <= 256`; examples/eagle/README.md:
  "All EAGLE choices have to have exactly the same depth as num_eagle_layers" (trtspec sets num_eagle_layers
  to the tree's depth), "Pipeline parallelism is not supported"; Medusa and Lookahead support matrices list
  tensor parallelism only.
- cpp/tensorrt_llm/executor/decodingConfig.cpp @97e36d0b: Lookahead "ngramSize=1 requires windowSize=1" and
  "… verificationSetSize=0".
- trtGptModelInflightBatching.cpp: "Chunked context requires context FMHA, paged kv_cache and paged context
  FMHA all enabled at the same time."
- tensorrt_llm/models/llama/convert.py (`dup_kv_weight`, `split_qkv_tp`): kv heads < tp are duplicated, which
  needs tp % kv_heads == 0; otherwise kv_heads % tp == 0.
"""

# trtllm: the rules of the recipe's trtllm section (the recipe layer cannot import the backend's)

from __future__ import annotations

from builder.errors import UserError
from builder.recipe.findings import Findings
from builder.recipe.llmapi_checks import check_llmapi
from builder.recipe.resolve import tree_choices_spec, tree_field
from builder.recipe.trtllm import RELEASES, engine_line_problem
from builder.speculative import registry
from builder.speculative.choices import load_choices
from builder.speculative.method import TRTLLM_ENGINE_LINE as UPSTREAM
from builder.speculative.method import Checks, EngineFlow, NotServed

MAX_CHOICE_DEPTH = 16  # speculativeChoicesUtils.cpp: 64-bit prefix of 4-bit chunks
MAX_CHOICE_RANK = 15  # a 4-bit chunk holds 0..15


def kv_heads_rule(kv_heads: int, tp: int) -> str | None:
    """None when TensorRT-LLM can shard `kv_heads` over `tp` ranks, else why not."""
    if kv_heads >= tp:
        return None if kv_heads % tp == 0 else f"tp={tp} does not divide num_kv_heads={kv_heads}"
    if tp % kv_heads == 0:
        return None
    return (
        f"num_kv_heads={kv_heads} < tp={tp} and tp is not a multiple of it: {UPSTREAM} duplicates each KV "
        f"head tp / kv_heads times (tensorrt_llm/models/llama/convert.py dup_kv_weight)"
    )


def check_trtllm(c: Findings) -> None:
    """The trtllm backends' own rules (called only when target.backend is trtllm or trtllm-llmapi)."""
    r = c.recipe
    if r.target.engine_backend == "trtllm-llmapi":
        check_llmapi(c)
        return
    if r.target.device == "cpu":
        return  # `checks.target` already says trtllm needs a GPU target
    problem = engine_line_problem(r.trtllm.version)
    if problem is not None:  # a release of the PyTorch flow's table only
        c.add(("trtllm", "version"), problem, allowed=", ".join(RELEASES))
        return
    if r.triton.draft_schedule:
        c.add(
            ("triton", "draft_schedule"),
            "the trtllm backend's C++ runtime decides the draft per step; "
            "draft_schedule drives trtspec's own spec_decoder only",
            allowed="[] (empty)",
        )
    _method(c)
    _tree(c)
    _switches(c)


def _method(c: Findings) -> None:
    """The method as TensorRT-LLM 1.2's engine flow serves it (its `Method.trtllm.engine`)."""
    r, spec = c.recipe, c.recipe.speculative
    method = registry.of(spec)
    flow = method.trtllm.engine
    if isinstance(flow, NotServed):
        served = [name for name, m in registry.methods().items() if isinstance(m.trtllm.engine, EngineFlow)]
        c.add(("speculative", "method"), flow.reason, allowed=", ".join(served))
        return
    if not method.drafts:
        return
    if spec.verification != "greedy":
        c.add(
            ("speculative", "verification"),
            f"{UPSTREAM} verifies {spec.method} drafts greedily (top-1 target "
            "token, drafts accepted by exact match; medusaDecodingLayer.cpp, lookaheadDecodingLayer.cpp, "
            "EagleConfig greedySampling); tree rejection sampling is trtspec's own engine only",
            allowed="greedy",
        )
    if r.parallelism.pp != 1:
        c.add(
            ("parallelism", "pp"),
            f"{UPSTREAM} runs {spec.method} with tensor parallelism only (its support "
            "matrices list no pipeline parallelism; examples/eagle/README.md: 'Pipeline parallelism is not "
            "supported')",
            allowed="1 (use parallelism.tp)",
        )
    if flow.check is not None:
        flow.check(spec, Checks(r, c.add))


def _tree(c: Findings) -> None:
    """Static trees in the backend's choices encoding: depth ≤ 16, ranks 0..15; then the method's own tree rules."""
    r = c.recipe
    spec_text = tree_choices_spec(r)
    field = tree_field(r)
    if spec_text is not None:
        try:
            choices = load_choices(spec_text, c.loaded.dir_of(field))
        except (UserError, UnicodeDecodeError, RecursionError):
            return  # the shared tree rules (spec_checks) report unreadable trees
        deep = next((ch for ch in choices if len(ch) > MAX_CHOICE_DEPTH), None)
        if deep is not None:
            c.add(
                field,
                f"choice {list(deep)} has depth {len(deep)}: {UPSTREAM} packs a path into 4-bit chunks "
                "(speculativeChoicesUtils.cpp)",
                allowed=f"depth 1..{MAX_CHOICE_DEPTH}",
            )
        big = next((ch for ch in choices if any(i > MAX_CHOICE_RANK for i in ch)), None)
        if big is not None:
            c.add(
                field,
                f"choice {list(big)} has a top-k rank above {MAX_CHOICE_RANK}: {UPSTREAM} packs each rank "
                "into 4 bits (speculativeChoicesUtils.cpp)",
                allowed=f"ranks 0..{MAX_CHOICE_RANK}",
            )
    flow = registry.of(r.speculative).trtllm.engine
    if isinstance(flow, EngineFlow) and flow.check_tree is not None:
        spec = r.speculative
        m = registry.of(spec)
        resolved = m.resolved(spec, c.loaded.dir_of(field))
        flow.check_tree(resolved, m.facts(resolved), Checks(r, c.add))


def _switches(c: Findings) -> None:
    r = c.recipe
    t, q = r.trtllm, r.quantization
    if t.gemm_plugin == "fp8" and q.mode != "fp8":
        c.add(
            ("trtllm", "gemm_plugin"),
            "gemm_plugin fp8 needs FP8 weights (quantization.mode: fp8)",
            allowed="auto, bfloat16, float16",
        )
    if t.use_fp8_context_fmha:
        if q.mode != "fp8" or q.kv_cache != "fp8":
            c.add(
                ("trtllm", "use_fp8_context_fmha"),
                "FP8 context FMHA needs FP8 weights and an FP8 KV cache "
                "(tensorrt_llm/builder.py disables it otherwise)",
                allowed="false, null",
            )
        if not t.use_paged_context_fmha:
            c.add(
                ("trtllm", "use_fp8_context_fmha"),
                "FP8 context FMHA needs paged context FMHA (trtllm.use_paged_context_fmha: true)",
                allowed="false, null",
            )
    if t.enable_chunked_context and not t.use_paged_context_fmha:
        c.add(
            ("trtllm", "enable_chunked_context"),
            "chunked context requires paged context FMHA (trtGptModelInflightBatching.cpp)",
            allowed="false, or trtllm.use_paged_context_fmha: true",
        )
    if t.workers is not None and t.workers > r.target.gpus:
        c.add(
            ("trtllm", "workers"),
            f"workers={t.workers} exceeds the {r.target.gpus} rank(s) to build",
            allowed=f"1..{r.target.gpus}",
        )
