"""Recipe section `draft_training`: how `trtspec train-draft` trains the recipe's draft for its target.

The draft trained is the recipe's `speculative` method (EAGLE-3 with NVIDIA modelopt's speculative module,
`builder.train.eagle3`); its folder is `speculative.checkpoint` unless `--out` names another. Every number here goes
into the run's key: a finished draft whose key matches is left alone, a checkpoint of another key is not resumed.
"""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from builder.section import Section

BUILTIN_SOURCES = ("builtin:stdlib", "builtin:humaneval")


class DraftTraining(Section):
    """Training data, schedule and draft vocabulary of `trtspec train-draft`."""

    source: str = Field(
        "builtin:stdlib",
        max_length=4096,
        description="Training text. builtin:stdlib: this interpreter's standard-library source (the tiny fixture's "
        "training text, held-out files excluded); builtin:humaneval: HumanEval prompts and solutions (the whole "
        "file — held-out evaluation then reads text the draft saw); or a .jsonl path (relative to the recipe) "
        "whose lines carry 'text', or 'prompt' (+ optional 'response'), or 'messages' / 'conversations' (lists "
        "of {role|from, content|value}, rendered as 'role: content' lines).",
    )
    num_samples: int = Field(1024, gt=0, le=10_000_000, description="Training sequences.")
    seq_len: int = Field(256, ge=8, le=131_072, description="Tokens per training sequence (prompt + response).")
    generate_responses: bool = Field(
        False,
        description="The target writes the text it is trained on: each sequence is a prompt of seq_len - "
        "response_tokens tokens from the source (a jsonl 'prompt' / the conversation up to its last turn; a window "
        "of the text otherwise) and the target's greedy continuation of response_tokens tokens — exactly what a "
        "greedy target accepts. False: windows of the source text as they are.",
    )
    response_tokens: int = Field(
        128, gt=0, le=131_072, description="Tokens the target generates per prompt (generate_responses)."
    )
    steps: int = Field(1000, gt=0, le=10_000_000, description="Optimizer steps.")
    batch: int = Field(8, gt=0, le=4096, description="Sequences per step.")
    lr: float = Field(
        1e-4,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="Peak learning rate (AdamW, β = (0.9, 0.95); linear warmup over steps/20, cosine to 10 %).",
    )
    grad_clip: float = Field(
        0.5, gt=0, le=1e6, allow_inf_nan=False, description="Gradient-norm clip (SafeAILab's ds_config: 0.5)."
    )
    seed: int = Field(0, ge=0, le=2**31 - 1, description="Seeds the draft's initial weights and the data order.")
    ttt_steps: int = Field(
        3,
        gt=0,
        le=16,
        description="Training-time-test steps: the draft is unrolled this many levels on its own outputs "
        "(modelopt's eagle_ttt_steps; SafeAILab unrolls 7).",
    )
    loss_decay: float = Field(
        0.9,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="Weight of TTT step k's loss: loss_decay**k (modelopt's eagle_loss_decay_factor; SafeAILab 0.8).",
    )
    draft_vocab_size: int | None = Field(
        None,
        gt=0,
        le=1 << 20,
        description="Rows of the draft's own LM head: the tokens most frequent in the training sequences (stop tokens "
        "always kept, ascending ids; d2t maps them back). Null: the whole vocabulary. Llama 3 8B's published "
        "EAGLE-3 draft: 32000 of 128256.",
    )
    rope_theta: float = Field(
        10000.0,
        gt=0,
        le=1e12,
        allow_inf_nan=False,
        description="The draft's own RoPE base (upstream's EAGLE-3 drafts and modelopt's default: 10000).",
    )
    checkpoint_every: int = Field(
        100, gt=0, le=10_000_000, description="Steps between checkpoints (written whole, then renamed into place)."
    )
    generation_batch: int = Field(
        32, gt=0, le=4096, description="Prompts the target continues at once (generate_responses)."
    )

    @field_validator("source")
    @classmethod
    def _source(cls, v: str) -> str:
        if v.startswith("builtin:") and v not in BUILTIN_SOURCES:
            raise ValueError(f"unknown builtin source {v!r} (allowed: {', '.join(BUILTIN_SOURCES)}, a .jsonl path)")
        if not v.startswith("builtin:") and not v.endswith(".jsonl"):
            raise ValueError(f"{v!r} is neither a builtin source nor a .jsonl path")
        return v

    @model_validator(mode="after")
    def _lengths(self) -> DraftTraining:
        if self.generate_responses and self.response_tokens >= self.seq_len:
            raise ValueError(
                f"response_tokens ({self.response_tokens}) must be below seq_len ({self.seq_len}): the prompt takes "
                "the rest"
            )
        return self

    @property
    def prompt_tokens(self) -> int:
        """Tokens of source text per sequence (the whole sequence without generate_responses)."""
        return self.seq_len - self.response_tokens if self.generate_responses else self.seq_len
