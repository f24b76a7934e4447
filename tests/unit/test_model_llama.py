"""The torch reference against HF transformers' LlamaForCausalLM (the oracle), same weights.

Activations are judged against a float64 run of HF (`hf_float64`): ours may be at most a few times as
far from it as HF's own fp32 result is (`tests/unit/numerics.py`); no tolerance is picked from a run.
"""

from __future__ import annotations

import copy

import pytest
import torch
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from builder.model.config import LlamaConfig
from builder.model.kv_cache import KVCache
from builder.model.llama import Llama, causal_mask, rope_inv_freq
from builder.model.loader import load_model
from tests.unit.model_utils import TINY, hf_float64, hf_logits, hf_model, save_checkpoint, torch_threads
from tests.unit.numerics import assert_close_to_float64, assert_near_tie


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    with torch_threads(1):
        yield


class Cached:
    """Our reference Llama with a batch-1 KV cache: causal chunks appended after what is cached."""

    def __init__(self, model: Llama, capacity: int = 128) -> None:
        cfg = model.cfg
        self.model, self.vocab_size = model, cfg.vocab_size
        self.cache = KVCache(cfg.num_hidden_layers, 1, cfg.num_key_value_heads, cfg.head_dim, capacity, model.dtype)

    def reset(self) -> None:
        self.cache.reset()

    @torch.no_grad()
    def run(self, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:  # -> logits [n, V], hidden [n, C] fp32
        n = len(ids)
        start = self.cache.reserve(n)
        logits, hidden = self.model(
            torch.tensor([ids]), torch.arange(start, start + n)[None], causal_mask(n, past=start), self.cache, start
        )
        self.cache.commit_all()
        return logits[0].float(), hidden[0].float()


@pytest.fixture(scope="module", params=sorted(TINY))
def pair(request, tmp_path_factory):
    """(HF model, our reference model loaded from its save_pretrained checkpoint, with a cache)."""
    model = hf_model(seed=sorted(TINY).index(request.param), **TINY[request.param])
    path = save_checkpoint(model, tmp_path_factory.mktemp(request.param))
    return model, Cached(load_model(path))


@pytest.fixture(scope="module")
def hf64(pair):
    """HF's model for the same shape, computing in float64 throughout: the reference."""
    return hf_float64(pair[0])


def test_rope_inv_freq_matches_hf(pair) -> None:
    model, engine = pair
    ours = rope_inv_freq(engine.model.cfg)
    rope_type = model.config.rope_parameters["rope_type"]
    plain = model.model.rotary_emb.compute_default_rope_parameters(model.config)[0]
    theirs = plain if rope_type == "default" else ROPE_INIT_FUNCTIONS[rope_type](model.config, None)[0]
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    if rope_type == "llama3":  # the tiny config must hit all three bands, or the test proves little
        kept, divided = theirs == plain, theirs == plain / 8.0
        assert kept.any() and divided.any() and (~kept & ~divided).any()


def test_prefill_logits_and_hidden_match_hf(pair, hf64) -> None:
    model, engine = pair
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, engine.vocab_size, (70,), generator=gen).tolist()  # past orig. ctx 32
    engine.reset()
    logits, hidden = engine.run(ids)
    with torch.no_grad():
        hf = model(torch.tensor([ids]), output_hidden_states=True)
        ref = hf64(torch.tensor([ids]), output_hidden_states=True)
    assert logits.shape == (70, engine.vocab_size) and logits.dtype == torch.float32
    assert_close_to_float64(logits, hf.logits[0], ref.logits[0], what="prefill logits")
    assert_close_to_float64(hidden, hf.hidden_states[-1][0], ref.hidden_states[-1][0], what="prefill hidden")


def test_reference_model_in_float64_is_the_same_math(pair, hf64) -> None:
    """In float64, ours equals HF's math to ~1e-10 of the scale: the formulas agree, rounding aside."""
    _, engine = pair
    ids = torch.randint(0, engine.vocab_size, (70,), generator=torch.Generator().manual_seed(1))
    ours64 = copy.deepcopy(engine.model).double()
    with torch.no_grad():
        logits, _ = ours64(ids[None], torch.arange(70)[None], causal_mask(70))
        ref = hf64(ids[None]).logits
    assert float((logits - ref).abs().max()) <= 1e-10 * float(ref.abs().max())


def test_chunked_prefill_and_single_token_steps_match_hf(pair, hf64) -> None:
    model, engine = pair
    gen = torch.Generator().manual_seed(2)
    ids = torch.randint(0, engine.vocab_size, (24,), generator=gen).tolist()
    engine.reset()
    parts = [engine.run(ids[:10])[0], engine.run(ids[10:16])[0]] + [engine.run([i])[0] for i in ids[16:24]]
    assert_close_to_float64(torch.cat(parts), hf_logits(model, ids), hf_logits(hf64, ids), what="chunked + steps")
    assert engine.cache.committed == 24


def greedy(engine: Cached, prompt: list[int], n: int) -> list[int]:
    """Plain greedy decoding with the KV cache: the prompt, then one token per pass."""
    engine.reset()
    out = [int(engine.run(prompt)[0][-1].argmax())]
    while len(out) < n:
        out.append(int(engine.run([out[-1]])[0][0].argmax()))
    return out


def test_greedy_decode_matches_hf_generate(pair, hf64) -> None:
    """Token-for-token equality with HF greedy generate; a divergence is allowed only at a near-tie."""
    model, engine = pair
    gen = torch.Generator().manual_seed(3)
    for length in (1, 5, 17):
        prompt = torch.randint(0, engine.vocab_size, (length,), generator=gen).tolist()
        with torch.no_grad():
            ref = model.generate(
                torch.tensor([prompt]),
                attention_mask=torch.ones(1, length, dtype=torch.long),
                max_new_tokens=32,
                min_new_tokens=32,
                do_sample=False,
            )[0, length:].tolist()
        assert len(set(ref)) > 8, "degenerate reference (a one-token loop) would prove little"
        ours = greedy(engine, prompt, 32)
        if ours != ref:
            k = next(i for i, (a, b) in enumerate(zip(ours, ref)) if a != b)
            seen = prompt + ref[:k]
            assert_near_tie(
                ours[k],
                ref[k],
                hf_logits(model, seen)[-1],
                hf_logits(hf64, seen)[-1],
                what=f"greedy, prompt length {length}, new token {k}",
            )


def test_bf16_engine_is_as_close_as_hf_bf16(pair, hf64, tmp_path) -> None:
    """The same rule as fp32 with bf16's unit roundoff: ours in bf16 errs no more than HF in bf16."""
    model, _ = pair
    path = save_checkpoint(model, tmp_path / "ckpt")
    bf16 = Cached(load_model(path, torch.bfloat16), capacity=64)
    assert bf16.model.embed_tokens.weight.dtype == torch.bfloat16
    ids = torch.arange(20)
    logits, hidden = bf16.run(ids.tolist())
    with torch.no_grad():
        hf = copy.deepcopy(model).to(torch.bfloat16)(ids[None], output_hidden_states=True)
        ref = hf64(ids[None], output_hidden_states=True)
    assert_close_to_float64(logits, hf.logits[0], ref.logits[0], what="bf16 logits", dtype=torch.bfloat16)
    assert_close_to_float64(
        hidden, hf.hidden_states[-1][0], ref.hidden_states[-1][0], what="bf16 hidden", dtype=torch.bfloat16
    )


def test_config_of_saved_checkpoint(pair) -> None:
    model, engine = pair
    cfg: LlamaConfig = engine.model.cfg
    assert cfg.head_dim == model.config.head_dim
    assert cfg.num_key_value_heads == model.config.num_key_value_heads
    assert cfg.tie_word_embeddings == model.config.tie_word_embeddings
    if cfg.tie_word_embeddings:
        assert engine.model.lm_head.weight is engine.model.embed_tokens.weight


def test_batched_forward_with_cache_matches_hf(pair, hf64) -> None:
    """The model itself batches (B=2) over a shared cache; two causal chunks equal HF per row."""
    model, engine = pair
    cfg = engine.model.cfg
    gen = torch.Generator().manual_seed(4)
    ids = torch.randint(0, cfg.vocab_size, (2, 30), generator=gen)  # (B, T)
    cache = KVCache(cfg.num_hidden_layers, 2, cfg.num_key_value_heads, cfg.head_dim, 32, dtype=torch.float32)
    positions = torch.arange(30).expand(2, 30)  # (B, T)
    with torch.no_grad():
        first, _ = engine.model(ids[:, :18], positions[:, :18], causal_mask(18, batch=2), cache, start=0)
        second, _ = engine.model(ids[:, 18:], positions[:, 18:], causal_mask(12, past=18, batch=2), cache, start=18)
        hf, ref = model(ids).logits, hf64(ids).logits
    assert_close_to_float64(torch.cat((first, second), dim=1), hf, ref, what="batched logits")
