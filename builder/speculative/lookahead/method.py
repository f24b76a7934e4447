"""Lookahead as a method: zero weights, a Jacobi window and an n-gram pool (`config`, `drafter`)."""

# trtllm: the method's TensorRT-LLM mapping (method.Trtllm)

from __future__ import annotations

from builder.speculative.lookahead.config import LookaheadConfig, lookahead_draft_len
from builder.speculative.method import (
    TRTLLM_ENGINE_LINE,
    Checks,
    EngineFlow,
    Facts,
    Method,
    NotServed,
    Trtllm,
)


def facts(c: LookaheadConfig) -> Facts:
    return Facts(
        nodes=c.draft_len,
        levels=max(c.ngram - 1, 1),
        label=f"lookahead(W={c.window},N={c.ngram},G={c.verification_set})",
        per_request=(c.window, c.ngram, c.verification_set),
    )


def check_draft(c: LookaheadConfig, _facts: Facts, checks: Checks) -> None:
    """build.max_draft_len, when given, must be the formula's (TensorRT-LLM's rule; our engines size by it too)."""
    given = checks.recipe.build.max_draft_len
    want = lookahead_draft_len(c.window, c.ngram, c.verification_set)
    if given is not None and given != want:
        checks.add(
            ("build", "max_draft_len"),
            f"max_draft_len={given} but lookahead W={c.window}, "
            f"N={c.ngram}, G={c.verification_set} drafts (N-2) + (W-1+G)(N-1) = {want}",
            allowed=str(want),
        )


def make_drafter(c: LookaheadConfig, _net):
    from builder.speculative.lookahead.drafter import LookaheadDrafter

    w, n, g = c.window, c.ngram, c.verification_set
    LookaheadDrafter(w, n, g)  # validate now
    return lambda: LookaheadDrafter(w, n, g)


def check_trtllm(c: LookaheadConfig, checks: Checks) -> None:
    """cpp/tensorrt_llm/executor/decodingConfig.cpp @97e36d0b: "ngramSize=1 requires windowSize=1" and
    "… verificationSetSize=0"."""
    if c.ngram == 1 and (c.window != 1 or c.verification_set != 0):
        checks.add(
            ("speculative", "ngram"),
            "ngram=1 requires window=1 and verification_set=0 (decodingConfig.cpp)",
            allowed="ngram >= 2, or window 1 with verification_set 0",
        )


def refuse_build(c: LookaheadConfig, _recipe, draft_len: int, tree_nodes: int) -> None:
    from builder.errors import UserError

    if draft_len != tree_nodes:
        raise UserError(
            f"max_draft_len={draft_len} but Lookahead W={c.window}, N={c.ngram}, "
            f"G={c.verification_set} needs exactly {tree_nodes} (examples/lookahead/README.md: the "
            "engine's max_draft_len must equal the runtime's)",
            field="build.max_draft_len",
            allowed=str(tree_nodes),
        )
    if draft_len == 0:
        raise UserError(
            "Lookahead with W=1, N=1, G=0 drafts nothing; TensorRT-LLM asserts max_draft_len > 0",
            field="speculative.ngram",
            allowed=">= 2",
        )


METHOD = Method(
    name="lookahead",
    config=LookaheadConfig,
    summary="Lookahead decoding: a Jacobi window and an n-gram pool, no weights",
    facts=facts,
    make_drafter=make_drafter,
    check_draft=check_draft,
    exact_draft_len=True,
    tune="builder.tune.lookahead:TUNER",
    trtllm=Trtllm(
        # tensorrt_llm/commands/build.py: --speculative_decoding_mode lookahead_decoding; the C++ backend's
        # decoding_mode lookahead with lookahead_window_size / _ngram_size / _verification_set_size
        engine=EngineFlow(
            build_mode="lookahead_decoding",
            decoding_mode="lookahead",
            repo_parameter="lookahead",
            repo_value=lambda c: (c.window, c.ngram, c.verification_set),
            exact_draft_len=True,
            check=check_trtllm,
            refuse_build=refuse_build,
            draft_len_source=lambda c: (
                f"derived: (0 if N == 1 else N-2) + (W-1+G)(N-1) with W={c.window}, N={c.ngram}, "
                f"G={c.verification_set} (speculative.window/ngram/verification_set)"
            ),
        ),
        pytorch=NotServed(
            f"LookaheadDecodingConfig refuses the PyTorch backend (supports_backend, tensorrt_llm/llmapi/llm_args.py): "
            f"Lookahead is served by {TRTLLM_ENGINE_LINE}'s engine flow only"
        ),
    ),
)
