"""TorchEngine tree steps and commits against causal passes from scratch (HF and fresh engines)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from builder.errors import UserError
from builder.model.engine import TorchEngine
from builder.model.kv_cache import KVCacheFull
from tests.unit.model_utils import TINY, hf_logits, hf_model, path_to, random_tree, save_checkpoint, tree_mask_depth, torch_threads

ATOL = 1e-5  # fp32


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def hf_and_path(tmp_path_factory):
    model = hf_model(seed=7, **TINY["gqa_llama3_untied_headdim"])
    return model, save_checkpoint(model, tmp_path_factory.mktemp("ckpt"))


@pytest.fixture(scope="module")
def engine(hf_and_path) -> TorchEngine:
    return TorchEngine.from_pretrained(hf_and_path[1], max_seq_len=128)


def leaves(parents: list[int]) -> list[int]:
    return [i for i in range(len(parents)) if i not in parents]


@settings(max_examples=30, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**31 - 1), n_nodes=st.integers(1, 16), prompt_len=st.integers(1, 40))
def test_tree_step_equals_each_path_run_causally(hf_and_path, engine, seed, n_nodes, prompt_len) -> None:
    """Node i's logits equal HF's logits after prompt + tokens on the root-to-i path, from scratch."""
    model, _ = hf_and_path
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, engine.vocab_size, (prompt_len,), generator=gen).tolist()
    parents = random_tree(gen, n_nodes)
    tokens = torch.randint(0, engine.vocab_size, (n_nodes,), generator=gen)
    mask, depth = tree_mask_depth(parents)
    engine.reset()
    engine.prefill(prompt)
    out = engine.step(tokens, mask, depth)
    engine.commit([0])
    assert out.logits.shape == (n_nodes, engine.vocab_size) and out.hidden.shape == (n_nodes, engine.hidden_size)
    for leaf in leaves(parents):  # one HF pass per leaf covers every node on its path
        path = path_to(parents, leaf)
        ref = hf_logits(model, prompt + tokens[path].tolist())[prompt_len:]  # [len(path), V]
        torch.testing.assert_close(out.logits[path], ref, rtol=0, atol=ATOL)


def test_commit_rounds_equal_fresh_prefill_of_accepted_sequence(hf_and_path, engine) -> None:
    """After step + commit(path), the next step equals a fresh engine that prefilled everything accepted."""
    gen = torch.Generator().manual_seed(11)
    fresh = TorchEngine.from_pretrained(hf_and_path[1], max_seq_len=128)
    accepted = torch.randint(0, engine.vocab_size, (9,), generator=gen).tolist()  # the prompt
    engine.reset()
    engine.prefill(accepted)
    for round_ in range(10):
        n_nodes = int(torch.randint(1, 12, (1,), generator=gen))
        parents = random_tree(gen, n_nodes)
        tokens = torch.randint(0, engine.vocab_size, (n_nodes,), generator=gen)
        mask, depth = tree_mask_depth(parents)
        out = engine.step(tokens, mask, depth)
        fresh.reset()
        fresh.prefill(accepted)
        ref = fresh.step(tokens, mask, depth)
        fresh.commit([])
        torch.testing.assert_close(out.logits, ref.logits, rtol=0, atol=ATOL, msg=f"round {round_}")
        torch.testing.assert_close(out.hidden, ref.hidden, rtol=0, atol=ATOL, msg=f"round {round_}")
        ends = leaves(parents) if round_ % 2 else list(range(n_nodes))  # leaves give long paths
        path = path_to(parents, ends[int(torch.randint(0, len(ends), (1,), generator=gen))])
        engine.commit(path)
        accepted += tokens[path].tolist()
        assert engine.committed_len == len(accepted)


def test_commit_compacts_nodes_numbered_out_of_order(hf_and_path, engine) -> None:
    """Path [0, 3, 1]: slot 1 receives node 3 before node 1 moves to slot 2 (overlapping moves)."""
    model, _ = hf_and_path
    parents = [-1, 3, 0, 0, 1]  # 0 -> 3 -> 1 -> 4, and 0 -> 2
    mask, depth = tree_mask_depth(parents)
    tokens = torch.tensor([10, 11, 12, 13, 14])
    engine.reset()
    engine.prefill([1, 2, 3])
    engine.step(tokens, mask, depth)
    engine.commit([0, 3, 1])
    out = engine.step(torch.tensor([20, 21]), torch.ones(2, 2, dtype=torch.bool).tril(), torch.arange(2))
    engine.commit([0, 1])
    ref = hf_logits(model, [1, 2, 3, 10, 13, 11, 20, 21])[-2:]
    torch.testing.assert_close(out.logits, ref, rtol=0, atol=ATOL)


def test_commit_empty_drops_every_node(hf_and_path, engine) -> None:
    model, _ = hf_and_path
    engine.reset()
    engine.prefill([5, 6, 7])
    mask, depth = tree_mask_depth([-1, 0, 0])
    engine.step(torch.tensor([1, 2, 3]), mask, depth)
    engine.commit([])
    assert engine.committed_len == 3
    out = engine.step(torch.tensor([8]), torch.ones(1, 1, dtype=torch.bool), torch.zeros(1, dtype=torch.int64))
    torch.testing.assert_close(out.logits[0], hf_logits(model, [5, 6, 7, 8])[-1], rtol=0, atol=ATOL)


def test_non_tree_mask_matches_hf_custom_4d_mask(hf_and_path, engine) -> None:
    """Lookahead-style masks are not trees: compare with HF given the same 4-D mask and positions."""
    model, _ = hf_and_path
    gen = torch.Generator().manual_seed(5)
    P, T = 12, 10
    prompt = torch.randint(0, engine.vocab_size, (P,), generator=gen).tolist()
    tokens = torch.randint(0, engine.vocab_size, (T,), generator=gen)
    mask = (torch.rand(T, T, generator=gen) < 0.4) | torch.eye(T, dtype=torch.bool)
    depth = torch.randint(0, 6, (T,), generator=gen)
    engine.reset()
    engine.prefill(prompt)
    out = engine.step(tokens, mask, depth)
    engine.commit([])
    full = torch.zeros(P + T, P + T, dtype=torch.bool)
    full[:P, :P] = torch.ones(P, P, dtype=torch.bool).tril()
    full[P:, :P] = True
    full[P:, P:] = mask
    positions = torch.cat((torch.arange(P), P + depth))
    with torch.no_grad():
        ref = model(torch.tensor([prompt + tokens.tolist()]), attention_mask=full[None, None],
                    position_ids=positions[None]).logits[0, P:]
    torch.testing.assert_close(out.logits, ref, rtol=0, atol=ATOL)


def test_capacity_overflow_is_a_clear_error(hf_and_path) -> None:
    small = TorchEngine.from_pretrained(hf_and_path[1], max_seq_len=8)
    with pytest.raises(KVCacheFull, match="capacity of 8"):
        small.prefill(list(range(9)))
    small.prefill(list(range(6)))
    mask, depth = tree_mask_depth([-1, 0, 1])
    with pytest.raises(UserError, match="6 committed \\+ 3 new tokens exceed the capacity of 8"):
        small.step(torch.tensor([1, 2, 3]), mask, depth)
    assert small.committed_len == 6  # the failed step left the cache as it was
    small.step(torch.tensor([1, 2]), mask[:2, :2], depth[:2])
    small.commit([0, 1])
    assert small.committed_len == 8
    with pytest.raises(UserError, match="max_seq_len 500 must be in 1..max_position_embeddings"):
        TorchEngine.from_pretrained(hf_and_path[1], max_seq_len=500)


def test_misuse_raises(engine) -> None:
    engine.reset()
    engine.prefill([1, 2, 3])
    mask, depth = tree_mask_depth([-1, 0, 0, 1])
    tokens = torch.tensor([4, 5, 6, 7])
    with pytest.raises(RuntimeError, match="commit without a preceding step"):
        engine.commit([0])
    with pytest.raises(ValueError, match="diagonal"):
        engine.step(tokens, mask & ~torch.eye(4, dtype=torch.bool), depth)
    with pytest.raises(ValueError, match="token ids must lie in"):
        engine.step(torch.tensor([4, 5, 6, 1000]), mask, depth)
    engine.step(tokens, mask, depth)
    with pytest.raises(RuntimeError, match="without commit"):
        engine.step(tokens, mask, depth)
    with pytest.raises(RuntimeError, match="without commit"):
        engine.prefill([1])
    with pytest.raises(ValueError, match="node 2 has depth 1 but is at chain position 2"):
        engine.commit([0, 1, 2])  # 2 is a sibling of 1, not its child
    with pytest.raises(ValueError, match="node 3 has depth 2 but is at chain position 1"):
        engine.commit([0, 3])  # skips 3's parent
    engine.commit([0, 1, 3])
    assert engine.committed_len == 6
