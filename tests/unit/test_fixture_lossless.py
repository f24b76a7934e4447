"""On the trained tiny fixture, through the shipped recipes: every method == plain greedy == HF.

20 held-out HumanEval prompts × 64 new tokens. Mismatches are allowed only at demonstrated near-ties
(see test_lossless.assert_lossless). Also checks that trained drafts really accept (τ > 1).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from builder.data.humaneval import heldout_prompts
from builder.recipe.loader import load_recipe
from builder.speculative.decoding import generate
from builder.stages.decoders import build_decoder
from tests.unit.model_utils import hf_float64
from tests.unit.test_lossless import assert_lossless

ENGINE = "onnxruntime"  # the default CPU engine; tests/unit/test_lossless.py covers both engines

REPO = Path(__file__).resolve().parents[2]
NEW, PROMPTS = 64, 20
RECIPES = {
    "medusa": "tiny-llama3-medusa.yaml",
    "eagle-1": "tiny-llama3-eagle1.yaml",
    "eagle-2": "tiny-llama3-eagle2.yaml",
    "lookahead": "tiny-llama3-lookahead.yaml",
    "ngram": "tiny-llama3-ngram.yaml",
}


@pytest.fixture(scope="module")
def hf_pair():
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(
        REPO / "tests/fixtures/tiny-llama3/base", torch_dtype=torch.float32, attn_implementation="sdpa"
    ).eval()
    return model, hf_float64(model)


@pytest.fixture(scope="module")
def plain():
    dec = build_decoder(load_recipe(REPO / "recipes" / "tiny-llama3-none.yaml"), engine=ENGINE)
    prompts = [dec.tokenizer.encode(p).ids for p in heldout_prompts(PROMPTS)]
    outs = [generate(dec.engine, p, NEW).token_ids for p in prompts]
    return dec, prompts, outs


def test_plain_equals_hf_on_the_fixture(plain, hf_pair):
    dec, prompts, outs = plain
    model = hf_pair[0]
    model.generation_config.eos_token_id = None
    for p, ours in zip(prompts, outs):
        x = torch.tensor([p])
        ref = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=NEW, do_sample=False)[0, len(p) :]
        assert_lossless(hf_pair, p, ref.tolist(), ours, "fixture plain vs HF")


@pytest.mark.parametrize("method", list(RECIPES))
def test_method_is_lossless_and_accepts(plain, hf_pair, method):
    _, prompts, outs = plain
    dec = build_decoder(load_recipe(REPO / "recipes" / RECIPES[method]), engine=ENGINE)
    steps = tokens = 0
    for p, ref in zip(prompts, outs):
        g = generate(dec.engine, p, NEW, dec.make_drafter())  # no stop ids: same as `plain`
        assert_lossless(hf_pair, p, ref, g.token_ids, f"fixture {method}")
        steps, tokens = steps + g.steps, tokens + len(g.token_ids) - 1
    assert tokens / steps > 1.2, f"{method}: τ = {tokens / steps:.2f}, the trained draft barely accepts"
