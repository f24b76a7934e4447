"""A reduced draft vocabulary for EAGLE: the draft's LM head keeps the most frequent tokens only.

On a Llama 3 target the draft's LM head is most of what a draft level reads (8B: 128256 × 4096 of a
~775 M-parameter level; the decoder layer and fc are the rest), and EAGLE-3 / FR-Spec cut it to the
frequent part of the vocabulary (EAGLE-3's `d2t` maps a 32 K draft vocabulary back to the target's).
Lossless as any draft: the target verifies every drafted token; a token outside the set just can never
be drafted. Greedy outputs are concentrated — on the tiny fixture the 1024 tokens most frequent in its
training text cover 98.9 % of HumanEval greedy output tokens (the full vocabulary is 4096).

`frequent_tokens(tokenizer, texts, size, keep)`: the `size` token ids most frequent in the texts (counted
over at most `COUNT_TOKENS` tokens, `DOC_TOKENS` per document), ties to the lower id, every id of `keep`
(the stop tokens) included, sorted ascending — the draft row r of the LM head is target token ids[r].
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

COUNT_TOKENS = 1 << 19  # tokens counted at most
DOC_TOKENS = 4096  # tokens counted per document at most (so many documents contribute)
CHARS_PER_TOKEN = 8  # a document is cut to DOC_TOKENS * 8 characters before tokenizing


def frequent_tokens(
    tokenizer, texts: Iterable[str], size: int, vocab_size: int, keep: Sequence[int] = ()
) -> np.ndarray:
    """[size] int64, ascending: the draft vocabulary (see the module docstring). `tokenizer.encode(text).ids`."""
    if not 1 <= size <= vocab_size:
        raise ValueError(f"size must lie in 1..{vocab_size}, got {size}")
    keep = sorted({int(t) for t in keep if 0 <= int(t) < vocab_size})[:size]
    counts = np.zeros(vocab_size, np.int64)
    seen = 0
    for text in texts:
        ids = np.asarray(tokenizer.encode(text[: DOC_TOKENS * CHARS_PER_TOKEN]).ids[:DOC_TOKENS], np.int64)
        ids = ids[: COUNT_TOKENS - seen]
        counts += np.bincount(ids[ids < vocab_size], minlength=vocab_size)
        seen += len(ids)
        if seen >= COUNT_TOKENS:
            break
    order = np.lexsort((np.arange(vocab_size), -counts))  # most frequent first, ties to the lower id
    rest = order[~np.isin(order, keep)][: size - len(keep)]
    return np.sort(np.concatenate([np.asarray(keep, np.int64), rest.astype(np.int64)]))
