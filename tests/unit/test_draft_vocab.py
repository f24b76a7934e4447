"""EAGLE's draft vocabulary (`builder.speculative.eagle.vocab`, `speculative.draft_vocab`).

`frequent_tokens` against a brute force over the fixture's real tokenizer and stdlib text (collections.Counter,
sorted by count then id); the recipe path (`Parts.draft_vocab`) against the same brute force over the recipe's
calibration documents; `EagleDraft.draft_topk` against a masked full-vocabulary log-softmax.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from builder.speculative.eagle.vocab import CHARS_PER_TOKEN, DOC_TOKENS, frequent_tokens

REPO = Path(__file__).resolve().parents[2]
TOKENIZER = REPO / "tests" / "fixtures" / "tiny-llama3" / "base" / "tokenizer.json"


def _tokenizer():
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(TOKENIZER))


def _brute(tok, texts, size: int, vocab: int, keep=(), budget: int = 1 << 19) -> list[int]:
    counts: Counter[int] = Counter()
    seen = 0
    for text in texts:
        ids = tok.encode(text[: DOC_TOKENS * CHARS_PER_TOKEN]).ids[:DOC_TOKENS][: budget - seen]
        counts.update(ids)
        seen += len(ids)
        if seen >= budget:
            break
    ranked = sorted(range(vocab), key=lambda t: (-counts[t], t))
    chosen = list(dict.fromkeys([*sorted(keep), *ranked]))[:size]
    return sorted(chosen)


def _texts(n: int) -> list[str]:
    from builder.data.corpus import load_corpus

    return [f.text for f in load_corpus().train[:n]]


@pytest.mark.parametrize("size,keep", [(64, ()), (300, (1, 4095)), (4096, (0,))])
def test_frequent_tokens_equal_a_brute_force_count(size, keep):
    tok, texts = _tokenizer(), _texts(40)
    got = frequent_tokens(tok, texts, size, 4096, keep=keep)
    assert got.dtype == np.int64 and got.tolist() == _brute(tok, texts, size, 4096, keep)
    assert set(keep) <= set(got.tolist())


def test_rare_kept_token_and_the_budget():
    """A stop token that never occurs is still drafted; only the first tokens up to the budget are counted."""
    tok = _tokenizer()
    texts = ["def f(x):\n    return x + 1\n" * 50, "while True:\n    pass\n" * 400]
    ids = tok.encode(texts[1]).ids
    rare = next(t for t in range(4095, 0, -1) if t not in set(ids) | set(tok.encode(texts[0]).ids))
    budget = len(tok.encode(texts[0]).ids) + 3
    import builder.speculative.eagle.vocab as vocab_mod

    old = vocab_mod.COUNT_TOKENS
    vocab_mod.COUNT_TOKENS = budget
    try:
        got = frequent_tokens(tok, texts, 12, 4096, keep=[rare])
    finally:
        vocab_mod.COUNT_TOKENS = old
    assert got.tolist() == _brute(tok, texts, 12, 4096, [rare], budget)
    assert rare in got
    with pytest.raises(ValueError, match="1..4096"):
        frequent_tokens(tok, texts, 0, 4096)


def test_recipe_draft_vocab_counts_its_calibration_documents():
    from builder.quantize.calibration import documents
    from builder.recipe.loader import load_recipe
    from builder.stages.parts import Parts, stop_ids

    loaded = load_recipe(REPO / "recipes" / "tiny-llama3-eagle1.yaml")
    parts = Parts(loaded, "eagle")
    size = loaded.recipe.speculative.draft_vocab
    assert size == 1024
    got = parts.draft_vocab(4096)
    texts = documents("builtin:stdlib", REPO / "recipes", 256)
    assert got.tolist() == _brute(_tokenizer(), texts, size, 4096, stop_ids(parts.base_dir()))


def test_draft_topk_is_the_masked_full_vocabulary_topk():
    from builder.model.config import LlamaConfig
    from builder.speculative.eagle.draft_model import EagleDraft
    from tests.unit.model_utils import hf_config

    cfg = LlamaConfig.from_hf_dict(hf_config(num_hidden_layers=1).to_dict())
    torch.manual_seed(0)
    draft = EagleDraft(cfg).eval()
    draft.set_lm_head(torch.randn(cfg.vocab_size, cfg.hidden_size))
    h = torch.randn(3, 2, cfg.hidden_size, dtype=torch.float64)
    draft.double()
    ids = torch.from_numpy(np.sort(np.random.default_rng(1).choice(cfg.vocab_size, 40, replace=False)))
    draft.set_draft_vocab(ids)
    values, tokens = draft.draft_topk(h, 5)
    full = draft.logits(h)
    masked = torch.full_like(full, float("-inf"))
    masked[..., ids] = full[..., ids]
    ref = torch.log_softmax(masked, dim=-1).topk(5, dim=-1)
    assert torch.equal(tokens, ref.indices)
    torch.testing.assert_close(values, ref.values.float())
    draft.set_draft_vocab(None)
    assert torch.equal(draft.draft_topk(h, 5)[1], torch.log_softmax(full, -1).topk(5, -1).indices)
