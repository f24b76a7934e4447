"""Decoder in-flight batching under a draft schedule, cancellation, per-request Lookahead settings.

Oracle: every request's tokens equal its own plain greedy decoding (speculation is lossless whatever
the tree), on the tiny fixture through the torch reference engine, for all four drafters.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from builder.recipe.loader import load_recipe
from builder.speculative.decoding import Decoder, DraftSchedule, Request
from builder.speculative.medusa.drafter import truncate_tree
from builder.speculative.tree import tree_from_choices
from builder.stages.decoders import build_decoder

REPO = Path(__file__).resolve().parents[2]
RECIPES = {
    "eagle-2": "tiny-llama3-eagle2.yaml",
    "eagle-1": "tiny-llama3-eagle1.yaml",
    "medusa": "tiny-llama3-medusa.yaml",
    "lookahead": "tiny-llama3-lookahead.yaml",
}
PROMPTS = ["def fibonacci(n):", "import os\n", "class Stack:", "for i in range(10):", "x = [1, 2, 3]\n"]
LENGTHS = [20, 9, 17, 13, 24]


@pytest.fixture(scope="module", params=list(RECIPES))
def dec(request):
    return build_decoder(load_recipe(str(REPO / "recipes" / RECIPES[request.param])), engine="torch", max_batch_size=3)


def _requests(dec) -> list[Request]:
    return [Request(tuple(dec.tokenizer.encode(p).ids), n) for p, n in zip(PROMPTS, LENGTHS)]


def _plain(dec, reqs: list[Request]) -> list[list[int]]:
    return [g.token_ids for g in Decoder(dec.engine).run(reqs)]


def test_schedule_lookup():
    s = DraftSchedule([[1, 64], [4, 16], [8, 1]])
    assert [s.budget(b) for b in (1, 2, 4, 5, 8, 9, 100)] == [64, 16, 16, 1, 1, 1, 1]
    assert DraftSchedule().budget(7) is None
    with pytest.raises(ValueError):
        DraftSchedule([[4, 8], [2, 4]])


def test_truncated_tree_is_a_prefix_subtree():
    choices = [[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 1, 0]]
    tree = tree_from_choices(choices)
    for n in range(1, tree.num_nodes + 1):
        sub = truncate_tree(tree, n)
        assert sub.num_nodes == n
        assert (sub.parents == tree.parents[:n]).all() and (sub.mask == tree.mask[:n, :n]).all()
        assert (sub.rank == tree.rank[:n]).all()
        want = tree_from_choices(sorted(choices, key=lambda c: (len(c), c))[: n - 1]) if n > 1 else None
        if want is not None:
            assert (want.paths == sub.paths).all()


def test_batched_under_a_schedule_equals_plain_decoding(dec):
    """Budgets 6 / 3 / off as the batch grows: every request's tokens still equal its plain greedy ones."""
    reqs = _requests(dec)
    want = _plain(dec, reqs)
    loop = Decoder(dec.engine, dec.make_drafter(), DraftSchedule([[1, 6], [2, 3], [3, 1]]))
    seen_budgets: set[int | None] = set()
    step = loop.step

    def spy(on_tokens=None, **kw):
        out = step(on_tokens, **kw)
        seen_budgets.add(loop.budget)
        return out

    loop.step = spy  # type: ignore[method-assign]
    got = loop.run(reqs)
    assert [g.token_ids for g in got] == want
    assert seen_budgets >= {1, 3}  # the batch was full (off) and then drained
    assert all(g.drafted <= g.steps * 5 for g in got)  # never more than the largest budget's 5 draft nodes


def test_budget_one_turns_speculation_off_and_it_resumes(dec):
    """A single request with the schedule forcing root-only trees drafts nothing, and is still exact."""
    reqs = _requests(dec)[:1]
    want = _plain(dec, reqs)
    off = Decoder(dec.engine, dec.make_drafter(), DraftSchedule([[1, 1]])).run(reqs)[0]
    assert off.token_ids == want[0] and off.drafted == 0 and off.tau == 1.0
    loop = Decoder(dec.engine, dec.make_drafter(), DraftSchedule([[1, 1]]))
    seqs = loop.add(reqs)
    for _ in range(3):
        loop.step()
    assert seqs[0].gen.drafted == 0
    loop.schedule = DraftSchedule([[1, 64]])  # speculation back on mid-request (EAGLE: deferred pairs committed then)
    while loop.active:
        loop.step()
    assert seqs[0].gen.token_ids == want[0] and seqs[0].gen.drafted > 0


def test_cancel_frees_the_slot_and_others_finish_exactly(dec):
    reqs = _requests(dec)[:3]
    want = _plain(dec, reqs)
    loop = Decoder(dec.engine, dec.make_drafter())
    seqs = loop.add(reqs)
    loop.step()
    assert loop.free_slots == 0
    gen = loop.cancel(seqs[1].index)
    assert gen is not None and gen.finish_reason == "cancelled" and loop.free_slots == 1
    assert loop.cancel(seqs[1].index) is None
    extra = loop.add([reqs[1]], first_index=7)  # the freed slot takes a new request at once
    while loop.active:
        loop.step()
    assert seqs[0].gen.token_ids == want[0] and seqs[2].gen.token_ids == want[2]
    assert extra[0].gen.token_ids == want[1]


def test_stop_sequences_end_generation():
    dec = build_decoder(load_recipe(str(REPO / "recipes" / RECIPES["eagle-2"])), engine="torch")
    prompt = tuple(dec.tokenizer.encode(PROMPTS[0]).ids)
    full = Decoder(dec.engine).run([Request(prompt, 30)])[0].token_ids
    stop = tuple(full[5:7])
    got = Decoder(dec.engine, dec.make_drafter()).run([Request(prompt, 30, stop_sequences=(stop,))])[0]
    first = next(i for i in range(2, len(full) + 1) if tuple(full[i - 2 : i]) == stop)
    assert got.finish_reason == "stop" and got.token_ids == full[:first]


def test_per_request_lookahead_settings():
    dec = build_decoder(load_recipe(str(REPO / "recipes" / RECIPES["lookahead"])), engine="torch", max_batch_size=3)
    reqs = _requests(dec)[:3]
    want = _plain(dec, reqs)
    drafter = dec.make_drafter()
    w, n, g = drafter.window, drafter.ngram, drafter.verification_set  # the recipe's; requests go at most that far
    mixed = [
        reqs[0],
        Request(reqs[1].prompt, reqs[1].max_new_tokens, lookahead=(max(1, w - 1), max(2, n - 1), g)),
        Request(reqs[2].prompt, reqs[2].max_new_tokens, lookahead=(1, 2, 0)),
    ]
    got = Decoder(dec.engine, drafter).run(mixed)
    assert [g.token_ids for g in got] == want
    with pytest.raises(ValueError):
        Decoder(dec.engine, dec.make_drafter()).run([Request(reqs[0].prompt, 4, lookahead=(w + 1, n, g))])
    eagle = build_decoder(load_recipe(str(REPO / "recipes" / RECIPES["eagle-2"])), engine="torch")
    with pytest.raises(ValueError, match="Lookahead"):
        Decoder(eagle.engine, eagle.make_drafter()).add([Request(reqs[0].prompt, 4, lookahead=(2, 2, 1))])
    assert np.all(np.array([len(g.token_ids) for g in got]) == np.array([r.max_new_tokens for r in reqs]))
