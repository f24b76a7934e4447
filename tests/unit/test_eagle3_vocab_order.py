"""EAGLE-3 drafts whose d2t lists the draft vocabulary in any order (modelopt's `calibrate_frequent_vocab` writes the
most frequent token first; SafeAILab sorts): loaded, and renumbered ascending with the LM head rows.

Oracle: the same draft written twice, once as written (ascending) and once with its draft vocabulary permuted (the
rows of lm_head and the entries of d2t permuted together, t2d unchanged: the same membership). The target-token
distribution each checkpoint defines is computed by brute force from the stored tensors (the draft's logits scattered
into the whole vocabulary at draft id + d2t, as vLLM's `compute_logits` does) and must be what our torch reference
(`load_eagle3` → `Eagle3Draft.draft_topk`) returns for both, with the same greedy / top-k target ids.
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from builder.errors import UserError
from builder.speculative.eagle3.checkpoint import check_folder_header, read_shape
from builder.speculative.eagle3.draft_model import Eagle3Draft, load_eagle3, random_draft
from builder.speculative.eagle3.vocab_map import in_target_order
from tests.unit.test_eagle3_checkpoint import VD, V, embedding, rewrite, small_cfg

T = 6  # positions of one sequence


def inputs(d: Eagle3Draft, seed: int = 3) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, V, (1, T), generator=g)
    hidden = torch.randn(1, T, 3 * d.target_hidden, generator=g)
    pos = torch.arange(T)[None]
    mask = torch.ones(T, T, dtype=torch.bool).tril()[None]
    return tokens, hidden, pos, mask


def full_logprobs(stored: dict[str, torch.Tensor], x: torch.Tensor, d: Eagle3Draft) -> torch.Tensor:
    """[T, V] log-probs over the target vocabulary from the stored head and d2t (−inf off the draft vocabulary)."""
    logits = d.norm(x) @ stored["lm_head.weight"].T  # [1, T, Vd]: row j is draft id j
    logp = torch.log_softmax(logits.double(), dim=-1)[0]
    out = torch.full((T, V), float("-inf"), dtype=torch.float64)
    out[:, torch.arange(VD) + stored["d2t"]] = logp
    return out


def permuted(tmp_path, name: str, d: Eagle3Draft, perm: torch.Tensor, layout: str = "safeailab"):
    folder = d.save(tmp_path / name, layout=layout)
    ids = torch.arange(VD) + d.d2t
    rewrite(
        folder, **{"lm_head.weight": d.lm_head.weight.detach()[perm].contiguous(), "d2t": ids[perm] - torch.arange(VD)}
    )
    return folder


@pytest.mark.parametrize("layout", ["safeailab", "modelopt"])
def test_a_permuted_draft_vocabulary_gives_the_same_target_distribution(tmp_path, layout):
    embed = embedding()
    d = random_draft(small_cfg(), (1, 3, 4), draft_vocab=VD, base_embed=embed, seed=5)
    perm = torch.randperm(VD, generator=torch.Generator().manual_seed(11))
    plain = d.save(tmp_path / "plain", layout=layout)
    shuffled = permuted(tmp_path, "shuffled", d, perm, layout)
    assert not bool(((torch.arange(VD) + load_file(shuffled / "model.safetensors")["d2t"]).diff() > 0).all())
    check_folder_header(shuffled, read_shape(shuffled))  # validate accepts it (and t2d, safeailab, still holds)
    a, b = load_eagle3(plain, embed, 8), load_eagle3(shuffled, embed, 8)
    assert torch.equal(b.vocab_ids, d.vocab_ids) and torch.equal(b.lm_head.weight, d.lm_head.weight)
    tokens, hidden, pos, mask = inputs(d)
    with torch.no_grad():
        x = b(tokens, hidden, pos, mask)  # [1, T, H]: the head is not in it
        assert torch.equal(x, a(tokens, hidden, pos, mask))
        want = full_logprobs(load_file(shuffled / "model.safetensors"), x, b)  # brute force, from the stored tensors
        plain_want = full_logprobs(load_file(plain / "model.safetensors"), x, a)
        assert torch.equal(want.isfinite(), plain_want.isfinite())  # the same target tokens
        finite = want.isfinite()
        assert torch.allclose(want[finite], plain_want[finite], rtol=0, atol=1e-12)  # float64 sums, other order
        for draft in (a, b):
            lp, ids = draft.draft_topk(x, VD)  # every draft token, best first, as target ids
            got = torch.full((T, V), float("-inf"), dtype=torch.float64)
            got.scatter_(1, ids[0], lp[0].double())
            # the same float32 logits; the log-softmax in float32 vs float64: a few ulps of log-probs of magnitude
            # up to ~|logit spread| + log(Vd) ≈ 10 here
            assert torch.equal(finite, got.isfinite())
            assert torch.allclose(got[finite], want[finite], rtol=0, atol=64 * torch.finfo(torch.float32).eps)
            k = 5
            assert torch.equal(ids[0, :, :k], want.topk(k, dim=-1).indices)  # greedy and top-k target ids
        assert torch.equal(a.draft_topk(x, 7)[1], b.draft_topk(x, 7)[1])
        assert torch.equal(a.draft_topk(x, 7)[0], b.draft_topk(x, 7)[0])


def test_t2d_is_still_checked_against_a_permuted_d2t(tmp_path):
    embed = embedding()
    d = random_draft(small_cfg(), (1, 3, 4), draft_vocab=VD, base_embed=embed, seed=5)
    folder = permuted(tmp_path, "p", d, torch.randperm(VD, generator=torch.Generator().manual_seed(2)))
    t2d = load_file(folder / "model.safetensors")["t2d"].clone()
    j = int(d.vocab_ids[7])
    t2d[j] = False
    rewrite(folder, t2d=t2d)
    for check in (lambda: load_eagle3(folder, embed, 8), lambda: check_folder_header(folder, read_shape(folder))):
        with pytest.raises(UserError, match=rf"t2d\[{j}\] is False but d2t maps") as e:
            check()
        assert e.value.field == "t2d"


def test_duplicates_and_out_of_range_stay_refused_in_any_order(tmp_path):
    embed = embedding()
    d = random_draft(small_cfg(), (1, 3, 4), draft_vocab=VD, base_embed=embed, seed=5)
    perm = torch.randperm(VD, generator=torch.Generator().manual_seed(4))
    folder = permuted(tmp_path, "p", d, perm)
    ids = torch.arange(VD) + load_file(folder / "model.safetensors")["d2t"]
    dup = ids.clone()
    dup[9] = ids[40]
    rewrite(folder, d2t=dup - torch.arange(VD), t2d=None)
    with pytest.raises(UserError, match=rf"draft ids 9 and 40 both to token {int(ids[40])}") as e:
        load_eagle3(folder, embed, 8)
    assert e.value.field == "d2t"
    out = ids.clone()
    out[3] = V
    rewrite(folder, d2t=out - torch.arange(VD))
    with pytest.raises(UserError, match="outside the target's vocabulary") as e:
        check_folder_header(folder, read_shape(folder))
    assert e.value.field == "d2t"


def test_in_target_order_and_set_vocab_ids():
    """The permutation alone: rows follow their target ids; our draft itself holds ascending ids only."""
    head = torch.arange(4.0)[:, None].repeat(1, 2)  # row j = j
    d2t = torch.tensor([7, 1, 4, 0])  # draft ids 0..3 -> tokens 7, 2, 6, 3
    new_head, new_d2t = in_target_order(head, d2t)
    assert (torch.arange(4) + new_d2t).tolist() == [2, 3, 6, 7]
    assert new_head[:, 0].tolist() == [1, 3, 2, 0]
    d = random_draft(small_cfg(), (1, 3, 4), draft_vocab=VD)
    with pytest.raises(UserError, match="ascending"):
        d.set_vocab_ids(d.vocab_ids.flip(0))
