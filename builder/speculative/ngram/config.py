"""Recipe section for n-gram speculation (prompt lookup: no draft weights, no extra draft nodes when nothing matches).

The drafter looks the sequence's newest `max_match` … `min_match` tokens up in its own text (prompt and output),
longest first, and proposes the `max_draft` tokens that followed their most recent occurrences: up to
`candidates` distinct continuations, verified as one tree. A step with no match is a plain step (T = 1). The
same idea as ONNX Runtime GenAI's n-gram speculation, vLLM's `ngram` method and TensorRT-LLM's PyTorch-flow NGram
drafter; TensorRT-LLM's engine path (the `trtllm` backend) has none in its Triton backend.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from builder.section import VERIFICATION_DOC, Section


def ngram_nodes(max_draft: int, candidates: int) -> int:
    """Tree nodes of the largest n-gram step, root included."""
    return 1 + max_draft * candidates


# The defaults below (max_draft 23, max_match 5, min_match 1, candidates 1, adaptive, no shared pool) are also
# `--method ngram` on a recipe of another method (24 nodes at most: the room every engine is exported with). One chain beat
# two candidates (scripts/bench_decode.py, interleaved rows). Length and match lengths were chosen by replaying
# greedy decodes (the drafts of any setting and their acceptance follow from the target's greedy output alone)
# against the engines' measured chain step-cost curves, on the second half of HumanEval, and checked on the first
# 20 prompts (the benchmark's): max_draft 23, suffixes 5..1 and the adaptive steps +8 / -2 from 2 gave 1.09x /
# 1.11x the tokens per unit of step cost of 16, 4..2 and +4 / -1 from 4 on the tiny fixture's curve (1.11x /
# 1.13x on the regime fixture's); on a curve twice as steep (c(T) = 1 + 0.2 (T - 1)) they are even. Then, on the
# AVX2-only AMD EPYC, whose tiny curve is that steep (c(24) = 4.1-5.2 c(1)), falling to the accepted drafts + 2
# after a partial acceptance instead of -2 gave 1.029x / 1.019x (second half / first 20) on its measured curve,
# 1.018x / 1.012x on a flat one (c(T) = 1 + 0.09 (T - 1)), 0.99x / 1.00x on a made-up memory-bound one; measured
# interleaved on that machine: tiny 1.006x / 1.020x / 1.030x, regime 1.003x / 1.007x the tokens/s of the -2 rule.
# Tried by the same replay on 2026-12-03 and not kept (first 20 prompts, out of sample): a length from the matched
# occurrence's true match length (up to 64 tokens back; it predicts acceptance well: >= 12 tokens -> 15-21 accepted
# on average) on its own or with the adaptive length, a per-bucket length table fitted on the second half, and
# picking the occurrence with the longest match or the most frequent next token: 0.96-1.00x. A perfect length
# oracle would give 1.14-1.16x. The pool (`shared_pool`, pool.py) drafts the third of steps that have no match.
# shared_pool (the last): off by default (`pool.py` says why and what it gave); recipes/methods/ngram.yaml turns it on.
class NgramConfig(Section):
    method: Literal["ngram"] = Field(description="N-gram (prompt-lookup) speculation: no draft weights.")
    max_draft: int = Field(23, gt=0, le=64, description="Tokens proposed per continuation (tree depth).")
    max_match: int = Field(5, gt=0, le=16, description="Longest suffix of the text looked up (tokens).")
    min_match: int = Field(1, gt=0, le=16, description="Shortest suffix looked up; no match this long: a plain step.")
    candidates: int = Field(1, gt=0, le=16, description="Distinct continuations verified per step (one tree).")
    adaptive: bool = Field(
        True,
        description="Draft length per sequence: from 2, +8 after a draft "
        "accepted in full, its accepted drafts + 2 after one that was not, within 2..max_draft; "
        "false: always max_draft.",
    )
    shared_pool: bool = Field(
        False,
        description="Where a sequence's own text has no match, draft up to "
        "4 tokens from the texts of earlier finished requests (TensorRT-LLM's is_public_pool). "
        "Faster on related requests; one request's output then changes another's speed, "
        "never its tokens.",
    )
    verification: Literal["greedy", "rejection"] = Field("rejection", description=VERIFICATION_DOC)

    @property
    def draft_len(self) -> int:
        return self.max_draft * self.candidates
