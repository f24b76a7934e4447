"""TorchEngine (the reference engine) against HF transformers: tree steps, verification, commits, batches.

The oracle is HF `LlamaForCausalLM` run causally from scratch over each root-to-node path: its argmax
is the greedy token the engine must report at every node, its greedy verification of the tree is what
the engine must accept and emit, and its hidden states are what the engine returns for the chain.
fp32 equality of tokens is the rule; a mismatch is tolerated only at a demonstrated near-tie, and
hidden states are judged against HF run in float64 (`tests/unit/numerics.py`).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from builder.engines.torch_engine import TorchEngine
from builder.speculative.protocols import Draft, SamplingBatch, root_only
from tests.unit.engine_cases import draft_from, greedy_tree_draft, path_to
from tests.unit.model_utils import TINY, hf_float64, hf_model, save_checkpoint, torch_threads
from tests.unit.numerics import assert_close_to_float64, assert_near_tie


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    with torch_threads(1):
        yield


class Oracle:
    """HF in fp32 and in float64 over the same weights: causal passes from scratch."""

    def __init__(self, model) -> None:
        self.model, self.model64 = model, hf_float64(model)

    def __call__(self, ids: list[int]) -> tuple[torch.Tensor, ...]:
        """Last position's (logits fp32, logits f64, hidden fp32, hidden f64)."""
        with torch.no_grad():
            a = self.model(torch.tensor([ids]), output_hidden_states=True)
            b = self.model64(torch.tensor([ids]), output_hidden_states=True)
        return a.logits[0, -1], b.logits[0, -1], a.hidden_states[-1][0, -1], b.hidden_states[-1][0, -1]

    def greedy(self, ids: list[int]) -> int:
        return int(self(ids)[0].argmax())


@pytest.fixture(scope="module")
def hf_and_path(tmp_path_factory):
    model = hf_model(seed=7, **TINY["gqa_llama3_untied_headdim"])
    return Oracle(model), save_checkpoint(model, tmp_path_factory.mktemp("ckpt"))


@pytest.fixture(scope="module")
def engine(hf_and_path) -> TorchEngine:
    return TorchEngine.from_pretrained(hf_and_path[1], max_seq_len=128, max_batch_size=4)


def assert_same_token(got: int, logits: torch.Tensor, logits64: torch.Tensor, what: str) -> None:
    want = int(logits.argmax())
    if got != want:
        assert_near_tie(got, want, logits, logits64, what=what)


def greedy(sampling_rows: int, width: int = 16) -> SamplingBatch:
    return SamplingBatch.all_greedy(sampling_rows, width)


def check_step_against_hf(oracle: Oracle, prefix: list[int], draft: Draft, out, row: int) -> list[int]:
    """node_argmax, verification and chain hidden of one row vs HF; returns the accepted tokens."""
    parents = [-1] + [int(np.flatnonzero(draft.mask[i])[-2]) for i in range(1, draft.num_nodes)]
    tokens = draft.tokens.tolist()
    hidden = {}
    for node in range(draft.num_nodes):
        chain = path_to(parents, node)
        lg, lg64, hd, hd64 = oracle(prefix + [tokens[c] for c in chain])
        hidden[node] = (hd, hd64)
        assert_same_token(int(out.node_argmax[row, node]), lg, lg64, f"node {node}")
    got_chain = out.accepted_chain(row)
    for k in range(1, len(got_chain)):  # every accepted node is the greedy token at its parent
        assert tokens[got_chain[k]] == int(out.node_argmax[row, got_chain[k - 1]])
    best = max(
        (len(c) for c in ([0] + _accepted_prefix(p, tokens, out.node_argmax[row]) for p in draft.paths.tolist()))
    )
    assert len(got_chain) == best  # the longest accepted prefix over all paths
    emitted = out.emitted(row)
    assert emitted[:-1] == [tokens[c] for c in got_chain[1:]]
    assert emitted[-1] == int(out.node_argmax[row, got_chain[-1]])  # the bonus token
    for k, node in enumerate(got_chain):
        assert_close_to_float64(torch.from_numpy(out.hidden[row, k]), *hidden[node], what=f"hidden of node {node}")
    return [tokens[c] for c in got_chain]


def _accepted_prefix(path: list[int], tokens: list[int], argmax: np.ndarray) -> list[int]:
    chain = []
    prev = 0
    for node in path[1:]:
        if node < 0 or tokens[node] != int(argmax[prev]):
            break
        chain.append(node)
        prev = node
    return chain


def test_tree_steps_and_commits_match_hf(hf_and_path, engine) -> None:
    oracle, _ = hf_and_path
    rng = np.random.default_rng(0)
    for trial in range(6):
        prompt = [int(t) for t in rng.integers(0, engine.vocab_size, int(rng.integers(1, 30)))]
        (seq,), pre = engine.start([prompt], greedy(1, 1))
        assert_same_token(int(pre.tokens[0]), *oracle(prompt)[:2], "first token")
        text = prompt + [int(pre.tokens[0])]
        for _ in range(4):
            follow = lambda extra: oracle.greedy(text + extra)  # noqa: E731
            draft = greedy_tree_draft(rng, int(rng.integers(1, 12)), engine.vocab_size, text[-1], follow)
            out = engine.step([seq], [draft], greedy(1))
            accepted = check_step_against_hf(oracle, text[:-1], draft, out, 0)
            assert engine.committed_len(seq) == len(text) - 1 + len(accepted)  # + the root and the accepted nodes
            text = text + accepted[1:] + [out.emitted(0)[-1]]
        engine.release(seq)


def test_compaction_of_a_chain_numbered_out_of_order(hf_and_path, engine) -> None:
    """Chain [0, 2, 4] with node 1 and 3 rejected: nodes move to slots committed+1, +2."""
    oracle, _ = hf_and_path
    prompt = [5, 9, 3]
    (seq,), pre = engine.start([prompt], greedy(1, 1))
    text = prompt + [int(pre.tokens[0])]
    g1 = oracle.greedy(text)
    g2 = oracle.greedy(text + [g1])
    wrong = lambda g: (g + 1) % engine.vocab_size  # noqa: E731
    parents = [-1, 0, 0, 1, 2]
    draft = draft_from(parents, [text[-1], wrong(g1), g1, 7, g2])
    out = engine.step([seq], [draft], greedy(1))
    assert out.accepted_chain(0) == [0, 2, 4]
    text = text + [g1, g2, out.emitted(0)[-1]]
    out = engine.step([seq], [root_only(text[-1])], greedy(1))
    lg, lg64, hd, hd64 = oracle(text)
    assert_same_token(int(out.node_argmax[0, 0]), lg, lg64, "after compaction")
    assert_close_to_float64(torch.from_numpy(out.hidden[0, 0]), hd, hd64, what="hidden after compaction")
    engine.release(seq)


def test_batched_sequences_equal_single_sequences(hf_and_path, engine) -> None:
    """Four sequences of different lengths in one engine give bit-identical results to one at a time."""
    rng = np.random.default_rng(3)
    prompts = [[int(t) for t in rng.integers(0, engine.vocab_size, n)] for n in (3, 17, 1, 9)]
    seqs, pre = engine.start(prompts, greedy(4, 1))
    drafts = [greedy_tree_draft(rng, n, engine.vocab_size, int(t), None) for n, t in zip((5, 1, 9, 3), pre.tokens)]
    batched = engine.step(seqs, drafts, greedy(4))
    for s in seqs:
        engine.release(s)
    for i, p in enumerate(prompts):
        (s,), one = engine.start([p], greedy(1, 1))
        assert one.tokens[0] == pre.tokens[i] and np.array_equal(one.hidden[0], pre.hidden[i])
        single = engine.step([s], [drafts[i]], greedy(1))
        n = drafts[i].num_nodes
        assert np.array_equal(single.node_argmax[0, :n], batched.node_argmax[i, :n])
        assert single.emitted(0) == batched.emitted(i)
        k = int(single.accepted_len[0])
        assert np.array_equal(single.hidden[0, :k], batched.hidden[i, :k])
        engine.release(s)


def test_misuse_raises(engine) -> None:
    (seq,), _ = engine.start([[1, 2, 3]], greedy(1, 1))
    parents = [-1, 0, 0, 1]
    good = draft_from(parents, [4, 5, 6, 7])
    upper = Draft(good.tokens, good.mask | np.triu(np.ones((4, 4), bool), 1), good.depth, good.paths)
    with pytest.raises(ValueError, match="attend earlier nodes only"):
        engine.step([seq], [upper], greedy(1))
    with pytest.raises(ValueError, match="token ids must lie in"):
        engine.step([seq], [draft_from(parents, [4, 5, 6, 1000])], greedy(1))
    with pytest.raises(ValueError, match="one draft per distinct sequence"):
        engine.step([seq, seq], [good, good], greedy(2))
    with pytest.raises(ValueError, match="exceed the batch capacity"):
        engine.start([[1]] * 4, greedy(4, 1))
    engine.release(seq)
    with pytest.raises(KeyError):
        engine.release(seq)
