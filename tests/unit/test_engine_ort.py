"""The ONNX Runtime engine against the torch reference engine (the oracle), both graph variants.

Random scenarios: sequences of different prompt lengths join and leave; every step gives each
sequence a random tree (some rows idle, node counts padded to a common T), partly following the
reference's greedy choices so that chains of different lengths are accepted and compacted. Tokens,
accepted chains and greedy tokens per node must be equal (a difference only at a float64 near-tie);
hidden states are judged against our reference model run in float64 (tests/unit/numerics.py).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from builder.engines.torch_engine import TorchEngine
from builder.model.llama import causal_mask
from builder.model.loader import load_model
from builder.speculative.protocols import SamplingBatch
from devtools.ort_engines import target_engine
from tests.unit.engine_cases import greedy_tree_draft
from tests.unit.model_utils import TINY, hf_model, save_checkpoint, torch_threads
from tests.unit.numerics import assert_close_to_float64, assert_near_tie

MAX_SEQ, NODES, BATCH = 96, 12, 4


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A tiny random Llama 3 with head_dim 16 (GroupQueryAttention's CPU kernel needs a multiple of 16)."""
    hf = hf_model(seed=11, **{**TINY["gqa_llama3_untied_headdim"], "head_dim": 16})
    return load_model(save_checkpoint(hf, tmp_path_factory.mktemp("ckpt")))


class Float64:
    """Our reference model in float64 over whole sequences: logits and hidden at every position."""

    def __init__(self, model) -> None:
        import copy

        self.model = copy.deepcopy(model).double()

    @torch.no_grad()
    def __call__(self, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        n = len(ids)
        logits, hidden = self.model(torch.tensor([ids]), torch.arange(n)[None], causal_mask(n))
        return logits[0], hidden[0]


def greedy(b: int, w: int = 16) -> SamplingBatch:
    return SamplingBatch.all_greedy(b, w)


@pytest.mark.parametrize("variant", ["ort", "standard"])
def test_random_batched_scenario_matches_the_reference(model, tmp_path, variant):
    ref = TorchEngine(model, max_seq_len=MAX_SEQ, max_batch_size=BATCH)
    ort = target_engine(model, tmp_path, max_seq_len=MAX_SEQ, max_nodes=NODES, max_batch_size=BATCH, variant=variant)
    f64 = Float64(model)
    rng = np.random.default_rng(5)
    texts: dict[int, tuple[int, list[int]]] = {}  # ort seq -> (ref seq, text incl. the newest token)

    def join(n: int) -> None:
        prompts = [[int(t) for t in rng.integers(0, model.cfg.vocab_size, int(rng.integers(1, 20)))] for _ in range(n)]
        ids_r, pre_r = ref.start(prompts, greedy(n, 1))
        ids_o, pre_o = ort.start(prompts, greedy(n, 1))
        for i, p in enumerate(prompts):
            same_token(int(pre_o.tokens[i]), int(pre_r.tokens[i]), f64, p, "first token")
            texts[ids_o[i]] = (ids_r[i], p + [int(pre_r.tokens[i])])
            assert_close_to_float64(
                torch.from_numpy(pre_o.hidden[i]), torch.from_numpy(pre_r.hidden[i]), f64(p)[1], what="prefill hidden"
            )

    join(3)
    for step in range(12):
        if step in (4, 8):  # one leaves, others join: rows move
            gone = list(texts)[1]
            ref.release(texts[gone][0])
            ort.release(gone)
            del texts[gone]
            join(min(2, BATCH - len(texts)))
        seqs = [s for s in texts if rng.random() < 0.85] or list(texts)[:1]  # some rows idle this step
        drafts = []
        for s in seqs:
            text = texts[s][1]

            def follow(extra, text=text):
                return int(f64(text + extra)[0][-1].argmax())

            drafts.append(
                greedy_tree_draft(rng, int(rng.integers(1, NODES + 1)), model.cfg.vocab_size, text[-1], follow)
            )
        out_r = ref.step([texts[s][0] for s in seqs], drafts, greedy(len(seqs)))
        out_o = ort.step(seqs, drafts, greedy(len(seqs)))
        for row, (s, d) in enumerate(zip(seqs, drafts)):
            compare_rows(out_o, out_r, row, d, texts[s][1], f64, f"step {step} seq {s}")
            assert ort.committed_len(s) == ref.committed_len(texts[s][0])
            texts[s] = (texts[s][0], texts[s][1] + out_r.emitted(row))


def same_token(got: int, want: int, f64: Float64, ids: list[int], what: str) -> None:
    if got != want:
        logits64 = f64(ids)[0][-1]
        assert_near_tie(got, want, logits64.float(), logits64, what=what)


def compare_rows(out_o, out_r, row: int, draft, text: list[int], f64: Float64, what: str) -> None:
    n = draft.num_nodes
    if not np.array_equal(out_o.node_argmax[row, :n], out_r.node_argmax[row, :n]):
        bad = int(np.flatnonzero(out_o.node_argmax[row, :n] != out_r.node_argmax[row, :n])[0])
        raise AssertionError(f"{what}: greedy token differs at node {bad}")  # ties are astronomically rare here
    assert out_o.accepted_chain(row) == out_r.accepted_chain(row), what
    assert out_o.emitted(row) == out_r.emitted(row), what
    k = int(out_r.accepted_len[row])
    accepted = text + out_r.emitted(row)[:-1]  # everything up to the last accepted node
    ref64 = f64(accepted)[1][len(accepted) - k :]  # hidden at the chain's nodes
    assert_close_to_float64(
        torch.from_numpy(out_o.hidden[row, :k]), torch.from_numpy(out_r.hidden[row, :k]), ref64, what=f"{what} hidden"
    )


def test_capacity_and_misuse(model, tmp_path):
    ort = target_engine(model, tmp_path, max_seq_len=16, max_nodes=4, max_batch_size=2)
    with pytest.raises(ValueError, match="need 1..16"):
        ort.start([list(range(17))], greedy(1, 1))
    (s,), _ = ort.start([[1, 2, 3]], greedy(1, 1))
    with pytest.raises(ValueError, match="exceed the batch capacity"):
        ort.start([[1], [2]], greedy(2, 1))
    with pytest.raises(ValueError, match="one draft per distinct sequence"):
        ort.step([s, s], [greedy_tree_draft(np.random.default_rng(0), 2, 10, 1, None)] * 2, greedy(2))
    with pytest.raises(ValueError, match="greedy decoding only|no room"):
        ort.step([s], [greedy_tree_draft(np.random.default_rng(0), 30, 10, 1, None)], greedy(1))
    ort.release(s)
    with pytest.raises(KeyError):
        ort.release(s)
