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

from __future__ import annotations

from builder.errors import UserError
from builder.recipe.findings import Findings
from builder.recipe.resolve import tree_choices_spec, tree_field, tree_size
from builder.speculative.choices import load_choices

UPSTREAM = "TensorRT-LLM 1.2"
MAX_CHOICE_DEPTH = 16  # speculativeChoicesUtils.cpp: 64-bit prefix of 4-bit chunks
MAX_CHOICE_RANK = 15  # a 4-bit chunk holds 0..15
EAGLE_MAX_BATCH = 512  # tensorrt_llm/builder.py asserts
EAGLE_MAX_DRAFT = 256


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
    """The trtllm backend's own rules (called only when target.backend is trtllm)."""
    r = c.recipe
    if r.target.device == "cpu":
        return  # `checks.target` already says trtllm needs a GPU target
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
    r, spec = c.recipe, c.recipe.speculative
    if spec.method == "none":
        return
    if spec.method == "ngram":
        c.add(
            ("speculative", "method"),
            f"{UPSTREAM}'s engine path has no n-gram (prompt-lookup) drafter in its Triton "
            "backend (inflight_batcher_llm's decoding_mode: top_k, top_p, top_k_top_p, beam_search, medusa, "
            "redrafter, lookahead, eagle; NGram drafting belongs to the PyTorch flow, not the engine path). "
            "Use lookahead (zero weights too) with the trtllm backend, or ngram with trtspec's own engines",
            allowed="none, medusa, eagle, lookahead",
        )
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
    if spec.method == "eagle":
        if spec.draft_vocab is not None:
            c.add(
                ("speculative", "draft_vocab"),
                f"{UPSTREAM}'s engine-path EAGLE drafts through the target's whole "
                "LM head (no draft-to-target token map; EAGLE-3's d2t belongs to the PyTorch flow): a reduced draft "
                "vocabulary is trtspec's own engines only",
                allowed="null (the whole vocabulary)",
            )
        if spec.tree.type == "dynamic":
            c.add(
                ("speculative", "tree", "type"),
                f"{UPSTREAM}'s Triton inflight_batcher_llm backend builds EAGLE "
                "from eagle_choices only (model_instance_state.cc: EagleConfig(eagleChoices), useDynamicTree "
                "false): EAGLE-2 dynamic trees are not served through Triton",
                allowed="static (speculative.version: 1)",
            )
        b = r.build
        if b.max_batch_size > EAGLE_MAX_BATCH:
            c.add(
                ("build", "max_batch_size"),
                f"max_batch_size={b.max_batch_size}: {UPSTREAM} builds EAGLE for at "
                f"most {EAGLE_MAX_BATCH} sequences (tensorrt_llm/builder.py)",
                allowed=f"1..{EAGLE_MAX_BATCH}",
            )
        if r.quantization.mode == "fp8":
            c.add(
                ("quantization", "mode"),
                f"FP8 is not in {UPSTREAM}'s EAGLE support matrix (examples/eagle/"
                "README.md lists FP16/BF16); no code check refuses it — verify on a GPU host "
                "(scripts/gpu_check.sh)",
                warn=True,
            )
    if spec.method == "lookahead" and spec.ngram == 1 and (spec.window != 1 or spec.verification_set != 0):
        c.add(
            ("speculative", "ngram"),
            "ngram=1 requires window=1 and verification_set=0 (decodingConfig.cpp)",
            allowed="ngram >= 2, or window 1 with verification_set 0",
        )


def _tree(c: Findings) -> None:
    """Static trees in the backend's choices encoding: depth ≤ 16, ranks 0..15; EAGLE draft ≤ 256."""
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
    if r.speculative.method == "eagle" and r.speculative.tree.type == "static":
        size = r.build.max_draft_len or tree_size(r, c.loaded.dir_of(field))
        if size > EAGLE_MAX_DRAFT:
            c.add(
                field,
                f"{size} draft tokens: {UPSTREAM} builds EAGLE for at most {EAGLE_MAX_DRAFT} (tensorrt_llm/builder.py)",
                allowed=f"trees of 1..{EAGLE_MAX_DRAFT} nodes",
            )


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
