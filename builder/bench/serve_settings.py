"""What a `trtspec bench` run is asked to do and the names its modules share.

`BenchSettings` (the recipe's bench section and the command line's overrides), the two modes measured on one engine
(`MODES`: mode -> the per-request input `speculate`) and their alternating order per level (`order`), the
request parameters every request carries (`REQUEST_PARAMETERS`: `ignore_eos`, so each request generates exactly
`output_len` tokens), the prompts (`Prompts`) and `BenchError`. Used by `serve_bench` (the run),
`perf_analyzer` (one perf_analyzer run per level and mode) and `serve_genai` (the genai-perf sweep).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from builder.timing import rotated

MODES: dict[str, bool] = {"speculative": True, "baseline": False}  # mode -> the `speculate` input
REQUEST_PARAMETERS = {"ignore_eos": True}
PROMPT_BUFFER = 8  # tokens kept free below max_input_len's edge when padding prompts


class BenchError(RuntimeError):
    """The benchmark could not run or a run failed (message: what and the tool's output tail)."""


@dataclass(frozen=True)
class BenchSettings:
    concurrency: tuple[int, ...]
    input_len: int
    output_len: int
    prompt_source: str = "builtin:humaneval"
    window_ms: int = 5000
    stability_percentage: float = 1000.0  # perf_analyzer's; 1000 accepts the first max_trials (>= 3) windows
    max_trials: int = 3
    num_prompts: int = 32
    probes: int = 3
    genai_perf: bool = False
    repeats: int = 1  # runs per level and mode (alternating order); throughputs averaged
    base_dir: str = "."  # where a relative JSONL prompt_source is found (the recipe's folder)


@dataclass
class Prompts:
    texts: list[str]
    tokens: list[int] = field(default_factory=list)  # each prompt's length as the server tokenizes it (BOS included)


def order(index: int) -> list[str]:
    """The modes' order at the index-th level: alternating, so neither mode always runs first."""
    return rotated(list(MODES), index)
