"""n-gram (prompt lookup) as a method: zero weights, drafts copied from the sequence's own text (`config`)."""

# trtllm: the method's TensorRT-LLM mapping (method.Trtllm: not served by the engine flow)

from __future__ import annotations

from builder.speculative.method import TRTLLM_ENGINE_LINE, Checks, Facts, Method, NotServed, PytorchFlow, Trtllm
from builder.speculative.ngram.config import NgramConfig


def facts(c: NgramConfig) -> Facts:
    label = (
        f"ngram(K={c.max_draft},M={c.max_match},m={c.min_match},C={c.candidates}"
        f"{'' if c.adaptive else ',fixed'}{',shared' if c.shared_pool else ''})"
    )
    return Facts(nodes=c.draft_len, levels=c.max_draft, label=label, chains_only=c.candidates == 1)


def check(c: NgramConfig, checks: Checks) -> None:
    if c.min_match > c.max_match:
        checks.add(
            ("speculative", "min_match"),
            f"min_match={c.min_match} exceeds max_match={c.max_match}",
            allowed=f"1..{c.max_match}",
        )


def make_drafter(config: NgramConfig, _net):
    from builder.speculative.ngram.drafter import NgramFactory

    return NgramFactory(config)  # validates now


METHOD = Method(
    name="ngram",
    config=NgramConfig,
    summary="n-gram (prompt lookup): drafts copied from the sequence's own text, no weights",
    facts=facts,
    make_drafter=make_drafter,
    check=check,
    tune="builder.tune.ngram:TUNER",
    trtllm=Trtllm(
        engine=NotServed(
            f"{TRTLLM_ENGINE_LINE}'s engine path has no n-gram (prompt-lookup) drafter in its Triton "
            "backend (inflight_batcher_llm's decoding_mode: top_k, top_p, top_k_top_p, beam_search, medusa, "
            "redrafter, lookahead, eagle; NGram drafting belongs to the PyTorch flow, not the engine path). "
            "Use lookahead (zero weights too) with the trtllm backend, or ngram with trtspec's own engines"
        ),
        # tensorrt_llm/llmapi/llm_args.py NGramDecodingConfig (decoding_type "NGram"); the PyTorch flow's drafter
        pytorch=PytorchFlow(decoding_type="NGram"),
    ),
)
