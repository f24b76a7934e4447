"""The draft budget rule (builder.speculative.budget) and the loop's budget-1 step.

Oracles: a brute-force search over per-sequence budgets (every assignment of a budget to every row of the batch,
the step costing the widest row's budget: one padded T per step) on synthetic acceptance / cost tables — the rule's
one budget per step must reach the exact optimum; and plain greedy decoding — a drafting request under a budget of 1
decodes exactly as a request that does not speculate (same tokens, same steps, nothing accepted), through the plain
fast path where its drafter learns a plain step (n-gram, Lookahead: no `engine.step` call at all, as for plain
requests), on the tiny fixture's ONNX Runtime engines.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

import pytest

from builder.data.humaneval import heldout_prompts
from builder.recipe.loader import load_recipe
from builder.speculative.budget import MARGIN, BudgetRule, best_padded
from builder.speculative.decoding import Decoder, DraftSchedule, Request
from builder.stages.decoders import build_decoder

REPO = Path(__file__).resolve().parents[2]


def brute_force(taus: list[dict[int, float]], cost: dict[int, float]) -> float:
    """The best tokens per ms over every per-row budget assignment (the step costs the widest row's budget)."""
    budgets = sorted(cost)
    return max(
        sum(tau[n] for tau, n in zip(taus, pick)) / cost[max(pick)]
        for pick in itertools.product(budgets, repeat=len(taus))
    )


def random_tables(rng: random.Random, rows: int, monotone: bool) -> tuple[list[dict[int, float]], dict[int, float]]:
    budgets = sorted(rng.sample(range(2, 14), rng.randint(1, 5))) + [1]
    budgets.sort()
    taus = []
    for _ in range(rows):
        tau, t = {}, 1.0
        for n in budgets:
            t = (t + rng.uniform(0, 0.8)) if monotone else 1.0 + rng.uniform(0, 3)
            tau[n] = 1.0 if n == 1 else t
        taus.append(tau)
    cost, c = {}, rng.uniform(1, 10)
    for n in budgets:
        c += rng.uniform(0, 3)
        cost[n] = c
    return taus, cost


@pytest.mark.parametrize("monotone", [True, False])
def test_one_padded_budget_reaches_the_per_sequence_optimum(monotone):
    rng = random.Random(7)
    for _ in range(300):
        taus, cost = random_tables(rng, rng.randint(1, 4), monotone)
        n, rate = best_padded(taus, cost)
        want = brute_force(taus, cost)
        assert rate == pytest.approx(want, rel=1e-12)
        # and the rate claimed is the rate of that budget: each row at its best budget <= n
        tokens = sum(max(t for m, t in tau.items() if m <= n) for tau in taus)
        assert tokens / cost[n] == pytest.approx(rate, rel=1e-12)


def test_rule_picks_by_batch_and_interpolates():
    tau = {1: 1.0, 2: 1.9, 4: 2.6, 8: 3.2}
    cost = {  # a memory-bound batch 1 (drafts nearly free), a compute-bound batch 8 (every node costs)
        1: {1: 10.0, 2: 10.5, 4: 11.0, 8: 12.0},
        8: {1: 20.0, 2: 40.0, 4: 80.0, 8: 160.0},
    }
    rule = BudgetRule(tau, cost)
    for b in range(1, 12):
        c = rule.cost_at(b)
        want = max(sorted(c), key=lambda n: (b * tau[n] / c[n], -n))
        if b * tau[want] / c[want] < (1 + MARGIN) * b / c[1]:  # a gain within the table's noise: no draft
            want = 1
        assert rule.budget(b) == want
    assert rule.budget(1) == 8 and rule.budget(8) == 1
    assert rule.cost_at(4)[2] == pytest.approx(10.5 + (40.0 - 10.5) * 3 / 7)
    assert rule.cost_at(16)[1] == pytest.approx(40.0)  # past the largest batch: in proportion to b
    # a draft that beats no draft by less than MARGIN (here 2.7 %: within the table's noise) is not taken
    assert BudgetRule({1: 1.0, 2: 1.5}, {1: {1: 10.0, 2: 14.6}}).budget(1) == 1
    assert BudgetRule({1: 1.0, 2: 1.5}, {1: {1: 10.0, 2: 13.0}}).budget(1) == 2  # 15 %
    back = BudgetRule.from_json(rule.to_json())
    assert back.tau == tau and back.cost == cost


def test_rule_learns_acceptance_online():
    rule = BudgetRule({1: 1.0, 2: 1.9}, {4: {1: 10.0, 2: 15.0}}, about={"sequence_steps": {"2": 64}})
    assert rule.budget(4) == 2  # 4 · 1.9 / 15 = 0.507 > 0.4
    rule.observe(2, 1.2 * 4096, 4096)  # served traffic accepts far less than the calibration prompts did
    assert rule.live_tau[2] < 1.25
    assert rule.budget(4) == 1  # 4 · 1.21 / 15 = 0.32 < 0.4: speculation off at batch 4
    assert rule.tau[2] == 1.9  # (the measured table is kept as measured)


def test_bad_tables_are_refused():
    with pytest.raises(ValueError):
        BudgetRule({2: 1.5}, {1: {2: 3.0}})  # no τ(1)
    with pytest.raises(ValueError):
        BudgetRule({1: 1.0}, {1: {1: 2.0, 3: 4.0}})  # a cost without its τ


RECIPES = {
    "ngram": "tiny-llama3-ngram.yaml",
    "lookahead": "tiny-llama3-lookahead.yaml",
    "eagle-1": "tiny-llama3-eagle1.yaml",
    "medusa": "tiny-llama3-medusa.yaml",
}


@pytest.fixture(scope="module", params=list(RECIPES))
def method(request) -> tuple[str, Any]:
    return request.param, build_decoder(load_recipe(REPO / "recipes" / RECIPES[request.param]), max_batch_size=3)


def test_budget_one_decodes_exactly_like_plain(method):
    name, dec = method
    prompts = [tuple(dec.tokenizer.encode(p).ids) for p in heldout_prompts(3)]
    plain = Decoder(dec.engine).run([Request(p, 24, speculate=False) for p in prompts])
    calls = [0]
    step = dec.engine.step

    def counted(*args: Any) -> Any:
        calls[0] += 1
        return step(*args)

    dec.engine.step = counted
    try:
        loop = Decoder(dec.engine, dec.make_drafter(), DraftSchedule([(3, 1)]))
        off = loop.run([Request(p, 24) for p in prompts], burst=False)
    finally:
        del dec.engine.step
    for a, b in zip(plain, off):
        assert b.token_ids == a.token_ids and b.steps == a.steps
        assert b.accepted_per_step == [0] * b.steps and b.drafted == 0
    assert loop.budget == 1
    if name in ("ngram", "lookahead"):  # a drafter that learns a plain step (`PlainUpdates`): the plain loop itself
        assert calls[0] == 0
    # ... and at batch 1 too, and drafting resumes where the budget allows it, lossless
    for p, a in zip(prompts, plain):
        loop = Decoder(dec.engine, dec.make_drafter(), DraftSchedule([(3, 1)]))
        assert loop.run([Request(p, 24)], burst=False)[0].token_ids == a.token_ids


def test_rule_driven_decoding_is_lossless_and_switches(method):
    """A rule that drafts at batch 1 and turns off from batch 2: requests joining and leaving cross the switch, and
    every output equals its plain decoding."""
    _, dec = method
    prompts = [tuple(dec.tokenizer.encode(p).ids) for p in heldout_prompts(5)]
    lengths = [30, 8, 21, 13, 26]
    plain = [g.token_ids for g in Decoder(dec.engine).run([Request(p, n) for p, n in zip(prompts, lengths)])]
    full = dec.make_drafter().max_nodes
    rule = BudgetRule({1: 1.0, full: 3.0}, {1: {1: 1.0, full: 1.5}, 2: {1: 1.0, full: 9.0}})
    loop = Decoder(dec.engine, dec.make_drafter(), rule)
    got = loop.run([Request(p, n) for p, n in zip(prompts, lengths)], burst=False)
    assert [g.token_ids for g in got] == plain
    assert rule.budget(1) == full and rule.budget(2) == 1 and rule.budget(3) == 1
    assert loop.totals.drafting_steps > 0
