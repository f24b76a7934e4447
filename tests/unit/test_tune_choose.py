"""The tuner's choosers against brute force on small synthetic acceptance tables and cost curves.

Oracles: every prefix-closed tree of a small candidate space enumerated (static trees), every budget per
batch size enumerated (draft schedule), and hand-worked tables.
"""

from __future__ import annotations

import itertools
import random

import pytest

from builder.speculative.choices import check_choices
from builder.speculative.tree_search import ranked_measured_choices
from builder.tune.choose import Scored, best, choose_static, schedule
from builder.tune.expect import expected_tau

CANDIDATES = [c for d in (1, 2, 3) for c in itertools.product(range(2), repeat=d)]  # depth <= 3, ranks 0..1


def measured_table(rng: random.Random, steps: int = 200) -> dict[tuple[int, ...], float]:
    """P(c) as a calibration decode measures it: the share of steps whose true rank path starts with c.
    Rank paths drawn with depth-to-depth dependence (a rank-1 hit makes the next depth likelier to miss)."""
    counts = dict.fromkeys(CANDIDATES, 0)
    for _ in range(steps):
        path: list[int] = []
        for d in range(3):
            r = rng.random()
            miss = 0.3 + (0.3 if path and path[-1] == 1 else 0.0)
            if r < miss:
                break
            path.append(0 if r < miss + (1 - miss) * 0.7 else 1)
        for k in range(1, len(path) + 1):
            counts[tuple(path[:k])] += 1
    return {c: n / steps for c, n in counts.items()}


def prefix_closed_subsets():
    for k in range(len(CANDIDATES) + 1):
        for subset in itertools.combinations(CANDIDATES, k):
            if not subset or check_choices(list(subset), None) == []:
                yield subset


SUBSETS = list(prefix_closed_subsets())


@pytest.mark.parametrize("seed", range(8))
def test_choose_static_is_the_brute_force_optimum(seed):
    rng = random.Random(seed)
    prob = measured_table(rng)
    a, b = 1.0, rng.uniform(0.02, 0.5)
    c = 0.0 if seed % 2 else rng.uniform(0.01, 0.4)  # c(n, depth) = a + b (n - 1) + c · depth
    max_nodes = rng.choice([3, 5, 8, 15])

    def cost(choices, _tau):
        return a + b * len(choices) + c * max((len(ch) for ch in choices), default=0)

    pick, table = choose_static(prob, cost, max_nodes, max_depth=3)
    brute = max((1 + sum(prob[ch] for ch in s)) / cost(s, 0) for s in SUBSETS if len(s) + 1 <= max_nodes)
    assert pick.rate == pytest.approx(brute, rel=1e-12)
    chosen = [tuple(ch) for ch in pick.setting["choices"]]
    assert check_choices(chosen, None) == [] and len(chosen) + 1 == pick.nodes <= max_nodes
    assert pick.tau == pytest.approx(expected_tau(chosen, prob)) and pick.cost_ms == pytest.approx(cost(chosen, 0))
    # and per size, the best tree of that size (brute force over the trees of that size)
    for row in table:
        size_best = max(1 + sum(prob[ch] for ch in s) for s in SUBSETS if len(s) + 1 == row.nodes)
        if c == 0:  # the cost depends on the size alone: the table's tree of each size accepts the most
            assert row.tau == pytest.approx(size_best)


def test_choose_static_hand_worked():
    # P: (0) .8, (1) .1, (0,0) .5, (0,1) .1, (1,0) .05; c(n) = 1 + 0.25 (n - 1) ms
    prob = {(0,): 0.8, (1,): 0.1, (0, 0): 0.5, (0, 1): 0.1, (1, 0): 0.05}
    pick, table = choose_static(prob, lambda ch, _t: 1 + 0.25 * len(ch), max_nodes=6, max_depth=2)
    # n=1: 1/1; n=2: 1.8/1.25 = 1.44; n=3: 2.3/1.5 = 1.533; n=4: 2.4/1.75 = 1.371; n=5: 2.5/2; n=6: 2.55/2.25
    assert pick.setting["choices"] == [[0], [0, 0]] and pick.tau == pytest.approx(2.3) and pick.cost_ms == 1.5
    assert [round(r.rate, 4) for r in table] == [1.0, 1.44, 1.5333, 1.3714, 1.25, 1.1333]


def test_off_wins_when_nothing_pays():
    prob = {(0,): 0.1, (0, 0): 0.01}
    pick, _ = choose_static(prob, lambda ch, _t: 1 + 0.5 * len(ch), max_nodes=3, max_depth=2)
    assert pick.nodes == 1 and pick.setting["choices"] == []


def test_ranked_measured_choices_puts_parents_first():
    prob = {(0,): 0.5, (0, 0): 0.5, (1,): 0.5, (0, 0, 0): 0.2}
    assert ranked_measured_choices(prob, 4) == [(0,), (1,), (0, 0), (0, 0, 0)]
    assert ranked_measured_choices(prob, 3, max_depth=1) == [(0,), (1,)]
    with pytest.raises(ValueError, match="prefix-closed"):
        ranked_measured_choices({(0, 1): 0.3}, 1)


def test_best_prefers_more_tokens_per_ms_then_fewer_nodes():
    a, b, c = Scored(3, 2.0, 1.0), Scored(5, 4.0, 2.0), Scored(2, 1.5, 1.0)
    assert best([b, a, c]) is a  # a and b tie at 2 tokens/ms: fewer nodes
    with pytest.raises(ValueError):
        best([])


def brute_schedule(options, batches):
    return {b: max(options(b), key=lambda s: (s.rate, -s.nodes)).nodes for b in batches}


@pytest.mark.parametrize("seed", range(5))
def test_schedule_takes_each_batch_sizes_best_budget(seed):
    rng = random.Random(seed)
    taus = {1: 1.0, 2: 1.0 + rng.random(), 4: 0.0, 7: 0.0}
    taus[4] = taus[2] + rng.random() * 0.8
    taus[7] = taus[4] + rng.random() * 0.5
    per_node = {b: rng.uniform(0.01, 0.3) * b for b in (1, 2, 4, 8)}

    def options(b):  # c_b(n) = 1 + per_node[b] · (n - 1): bigger batches make nodes dearer
        return [Scored(n, t, 1 + per_node[b] * (n - 1)) for n, t in taus.items()]

    got = schedule(options, [1, 2, 4, 8], full_nodes=7)
    want = brute_schedule(options, [1, 2, 4, 8])
    if all(n == 7 for n in want.values()):
        assert got == []
    else:
        expanded = {}
        for b in (1, 2, 4, 8):  # what the served loop does: the first entry with b <= max_batch
            expanded[b] = next(n for mb, n in got if b <= mb)
        assert expanded == want
        assert all(x[0] < y[0] and x[1] != y[1] for x, y in zip(got, got[1:]))  # merged, increasing


def test_schedule_hand_worked():
    # batch 1: 7 nodes at τ 3 for 2 ms beats off (1/1); batch 4: 7 nodes cost 8 ms -> 3/8 < 1: off
    def options(b):
        return [Scored(1, 1.0, 1.0), Scored(7, 3.0, 2.0 if b == 1 else 8.0)]

    assert schedule(options, [1, 2, 4], full_nodes=7) == [[1, 7], [4, 1]]
    assert schedule(lambda b: [Scored(1, 1.0, 1.0), Scored(7, 3.0, 2.0)], [1, 2, 4], full_nodes=7) == []
