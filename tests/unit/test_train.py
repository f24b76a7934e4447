"""builder.train: the draft-training loops (the tiny fixture's factory runs them; `trtspec train-draft` will).

Oracles: HF `generate` (greedy tokens) and one teacher-forced pass (hidden states) for the self-distillation data;
a brute-force count for `rank_of`; per-anchor loops written from the definition (head k at anchor t predicts token
t + k + 2) for `medusa_ranks`; the chain mask written out by hand; reproducibility (same settings, same seed:
the same bytes, what the committed fixture's README promises) and a loss below the untrained drafter's on the
data it was trained on. The whole factory, end to end, is tests/unit/test_fixture.py's quick run.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from builder.model.config import LlamaConfig  # noqa: E402
from builder.speculative.medusa.heads import MedusaHeads  # noqa: E402
from builder.train.distill import Sequences, greedy_with_hidden  # noqa: E402
from builder.train.eagle import EagleTraining, chain_mask, eagle_ranks, train_eagle, unroll  # noqa: E402
from builder.train.medusa import MedusaTraining, medusa_ranks, rank_of, train_medusa  # noqa: E402
from builder.train.schedule import cosine_lr  # noqa: E402
from tests.unit.model_utils import hf_greedy_continuations, hf_model  # noqa: E402


def test_cosine_schedule_by_hand():
    assert cosine_lr(0, 100, 1.0, warmup=4) == pytest.approx(0.25)  # linear warmup
    assert cosine_lr(3, 100, 1.0, warmup=4) == pytest.approx(1.0)
    assert cosine_lr(4, 100, 1.0, warmup=4) == pytest.approx(1.0)  # the peak, then down
    assert cosine_lr(52, 100, 1.0, warmup=4) == pytest.approx(0.55)  # halfway: (0.1 + 1.0) / 2
    assert cosine_lr(100, 100, 1.0, warmup=4) == pytest.approx(0.1)  # ends at 10 % of the peak


def test_rank_of_equals_a_brute_force_count():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randint(0, 5, (7, 3, 11), generator=gen).float()  # small integers: many ties
    labels = torch.randint(-1, 11, (7, 3), generator=gen)
    got = rank_of(logits, labels)
    for i in range(7):
        for j in range(3):
            lab = int(labels[i, j])
            want = 11 if lab < 0 else sum(float(x) > float(logits[i, j, lab]) for x in logits[i, j])
            assert int(got[i, j]) == want  # ties count for the label


def test_chain_mask_by_hand():
    m = chain_mask(3, 2, batch=2)
    assert m.shape == (2, 3, 6)
    want = [
        [1, 0, 0, 1, 0, 0],  # anchor 0: pair 0, its own step-2 node
        [1, 1, 0, 0, 1, 0],
        [1, 1, 1, 0, 0, 1],
    ]
    assert m[1].int().tolist() == want
    assert chain_mask(2, 1, batch=1)[0].int().tolist() == [[1, 0], [1, 1]]  # step 1: EAGLE-1's causal mask


@pytest.fixture(scope="module")
def model():
    return hf_model(seed=3)


def test_self_distillation_is_greedy_and_keeps_the_final_hidden_states(model):
    prompts = [[1, 5, 9, 2], [7, 3], [4, 4, 8, 1, 6, 2]]  # different lengths: left-padded batches
    news = [6, 3, 5]
    data = greedy_with_hidden(model, prompts, news, batch=2, pad_id=0)
    want = [hf_greedy_continuations(model, [p], n)[0] for p, n in zip(prompts, news)]
    assert [t.tolist() for t in data.tokens] == [p + w for p, w in zip(prompts, want)]
    assert data.prompt_len == [len(p) for p in prompts]
    for tok, hid in zip(data.tokens, data.hidden):
        with torch.no_grad():
            ref = model.model(input_ids=tok[None]).last_hidden_state[0]  # one teacher-forced pass
        assert hid.shape == ref.shape
        # fp32 through 2 layers of width 64 with O(1) activations: summation order (padded batch, KV cache) moves
        # the last bits only
        torch.testing.assert_close(hid, ref, rtol=1e-4, atol=1e-5)


def _data(model, n: int = 6, length: int = 12) -> Sequences:
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, 96, (4,), generator=gen).tolist() for _ in range(n)]
    return greedy_with_hidden(model, prompts, length - 4, batch=n, pad_id=0)


def test_medusa_ranks_follow_the_definition(model):
    data = _data(model, n=2)
    torch.manual_seed(0)
    heads = MedusaHeads(3, 1, 64, 96).eval()
    got = medusa_ranks(heads, data)
    for tok, hid, P, ranks in zip(data.tokens, data.hidden, data.prompt_len, got):
        L = len(tok)
        anchors = list(range(P - 1, L - 2))
        assert ranks.shape == (len(anchors), 3)
        with torch.no_grad():
            logits = heads(hid)  # (K, L, V)
        for a, t in enumerate(anchors):
            for k in range(3):
                pos = t + k + 2  # head k at anchor t predicts token t + k + 2
                want = 96 if pos >= L else int((logits[k, t] > logits[k, t, tok[pos]]).sum())
                assert int(ranks[a, k]) == want


def test_medusa_training_is_reproducible_and_learns(model):
    data, lm_head = _data(model), model.lm_head.weight.detach()
    run = MedusaTraining(heads=2, layers=1, steps=30, batch=3, lr=5e-3, seed=3)
    lines: list[str] = []
    torch.manual_seed(0)
    heads, loss = train_medusa(run, data, lm_head, lines.append)
    torch.manual_seed(0)
    again, loss2 = train_medusa(run, data, lm_head, lambda _m: None)
    assert loss == loss2 and all(
        torch.equal(a, b) for a, b in zip(heads.state_dict().values(), again.state_dict().values())
    )
    assert lines[0].startswith("medusa step 1/30 loss") and lines[-1].startswith("medusa step 30/30 loss")
    untrained = MedusaHeads(2, 1, 64, 96)
    untrained.init_from_lm_head(lm_head)
    mean_rank = lambda h: float(torch.cat(medusa_ranks(h.eval(), data)).float().mean())  # noqa: E731
    assert mean_rank(heads) < mean_rank(untrained)


def _draft_config() -> LlamaConfig:
    return LlamaConfig(
        vocab_size=96,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        rope_scaling=None,
        tie_word_embeddings=False,
        max_position_embeddings=64,
    )


def test_eagle_training_is_reproducible_and_learns(model):
    data = _data(model)
    embed, lm_head = model.model.embed_tokens.weight.detach(), model.lm_head.weight.detach()
    run = EagleTraining(steps=30, batch=3, lr=5e-3, unroll=2, noise=0.2, p_w=0.1, seed=4)
    torch.manual_seed(0)
    draft, loss = train_eagle(run, _draft_config(), data, embed, lm_head, lambda _m: None)
    torch.manual_seed(0)
    again, loss2 = train_eagle(run, _draft_config(), data, embed, lm_head, lambda _m: None)
    assert loss == loss2 and all(
        torch.equal(a, b) for a, b in zip(draft.state_dict().values(), again.state_dict().values())
    )
    torch.manual_seed(0)
    untrained, _ = train_eagle(
        EagleTraining(0, 3, 5e-3, 2, 0.2, 0.1, 4), _draft_config(), data, embed, lm_head, lambda _m: None
    )
    tokens, hidden = torch.stack(data.tokens), torch.stack(data.hidden)

    @torch.no_grad()
    def error(d) -> float:  # step 1 at anchor i predicts the target's hidden state at i + 1
        return float((unroll(d.eval(), tokens, hidden, 1)[0] - hidden[:, 1:]).abs().mean())

    assert error(draft) < error(untrained)
    ranks = eagle_ranks(draft, data, 2)
    assert [r.shape for r in ranks] == [(len(t) - 2 - (p - 1), 2) for t, p in zip(data.tokens, data.prompt_len)]
