"""`trtspec tune` on n-gram recipes (builder/tune/ngram.py), against oracles:

* the replay against the decoding loop itself: the torch reference engine decoding with the same n-gram drafter
  (one and two candidates, with and without a node budget, with and without a shared pool — then one factory's
  drafters, request after request) takes exactly the replayed steps, tree sizes and accepted counts;
* the score against a brute-force sum of the curve over the replayed steps;
* end to end on the tiny fixture: the pick is the argmax of E[τ] / c over the candidates, within the engine's
  room, and the overlay validates and carries it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from builder.recipe.loader import load_recipe
from builder.speculative.decoding import Decoder, DraftSchedule, Request, generate
from builder.speculative.ngram.config import NgramConfig, ngram_nodes
from builder.speculative.ngram.drafter import NgramFactory
from builder.speculative.ngram.pool import shared_pool_for
from builder.tune.costs import Host
from builder.tune.curve import StepCurve
from builder.tune.ngram import KEYS, TUNER, grid, replay, score
from tests.unit.recipe_helpers import run

REPO = Path(__file__).resolve().parents[2]


class _Taps:
    """Wraps an engine's `step` to record every step's tree size."""

    def __init__(self, engine) -> None:  # noqa: ANN001
        self.inner, self.nodes = engine, []

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self.inner, name)

    def step(self, seqs, drafts, sampling):  # noqa: ANN001, ANN201
        self.nodes.extend(d.num_nodes for d in drafts)
        return self.inner.step(seqs, drafts, sampling)


@pytest.fixture(scope="module")
def engine():
    import tempfile

    from builder.engines.torch_engine import TorchEngine
    from builder.model.loader import load_model
    from tests.unit.speculative_models import make_hf_llama

    with tempfile.TemporaryDirectory() as tmp:
        model = load_model(make_hf_llama(Path(tmp) / "m"))
    return TorchEngine(model, 400, 1)


@pytest.mark.parametrize(
    "setting,budget",
    [
        ((6, 3, 1, 1, True, False), None),
        ((8, 4, 2, 1, False, False), None),
        ((5, 3, 1, 2, True, False), None),
        ((6, 3, 1, 1, True, False), 3),
        ((6, 3, 1, 1, True, True), None),
        ((5, 4, 1, 2, True, True), 4),
    ],
)
def test_replay_takes_the_decoding_loops_steps(engine, setting, budget) -> None:
    s = dict(zip(KEYS, setting))
    prompts = [
        [5, 6, 7, 5, 6, 7, 5, 6],
        [9, 9, 9, 9, 8],
        [1, 2, 3, 4, 1, 2, 3, 4, 1, 2],
        [11, 40, 3, 17, 22, 5],
        [11, 40, 3, 17, 22, 5],
    ]  # (the 4th again: a shared pool drafts its first decode's output)
    max_new = 40
    texts = [(p, generate(engine, p, max_new + s["max_draft"] + 1).token_ids) for p in prompts]
    r = replay(texts, s, max_new, budget)
    tap = _Taps(engine)
    sched = DraftSchedule([[1, budget]] if budget else ())
    # a fresh drafter per request; with shared_pool they share the pool
    factory = NgramFactory(NgramConfig(method="ngram", **s))
    gens = [Decoder(tap, factory(), sched).run([Request(tuple(p), max_new)])[0] for p in prompts]
    assert r.accepted == tuple(a for g in gens for a in g.accepted_per_step)
    assert r.steps == sum(g.steps for g in gens) and tuple(tap.nodes) == r.nodes
    assert sum(r.accepted) > 0  # the prompts made it draft, and drafts were accepted
    assert all(g.token_ids == t[:max_new] for g, (_, t) in zip(gens, texts))  # lossless: the texts replayed
    if budget:
        assert max(r.nodes) <= budget
    if s["shared_pool"]:  # the pool drafted: fewer steps than the same setting without one
        assert r.steps < replay(texts, {**s, "shared_pool": False}, max_new, budget).steps


def test_replay_from_a_starting_pool_takes_the_decoding_loops_steps(engine) -> None:
    """`replay(..., pool=)` (a datastore the texts start from) against the decoding loop whose drafters share a pool
    seeded the same way."""
    setting = (6, 3, 1, 1, True, True)
    s = dict(zip(KEYS, setting))
    prompts, max_new = [[11, 40, 3, 17, 22, 5], [1, 2, 3, 4, 1, 2, 3]], 40
    texts = [(p, generate(engine, p, max_new + s["max_draft"] + 1).token_ids) for p in prompts]
    store = [*prompts[0], *texts[0][1]]  # a datastore that holds the first decode's text

    def seeded():  # noqa: ANN202
        pool = shared_pool_for(s["max_match"])
        pool.add(store)
        return pool

    r = replay(texts, s, max_new, pool=seeded())
    tap, factory = _Taps(engine), NgramFactory(NgramConfig(method="ngram", **s))
    factory.pool = seeded()
    gens = [Decoder(tap, factory(), DraftSchedule(())).run([Request(tuple(p), max_new)])[0] for p in prompts]
    assert r.accepted == tuple(a for g in gens for a in g.accepted_per_step)
    assert r.steps == sum(g.steps for g in gens) and tuple(tap.nodes) == r.nodes
    assert r.steps < replay(texts, s, max_new).steps  # the datastore drafted
    with pytest.raises(ValueError, match="shared_pool"):
        replay(texts, {**s, "shared_pool": False}, max_new, pool=seeded())


def test_score_is_the_curve_summed_over_the_replayed_steps(engine) -> None:
    s = {"max_draft": 6, "max_match": 3, "min_match": 1, "candidates": 1, "adaptive": True}
    prompts = [[5, 6, 7, 5, 6, 7, 5, 6], [9, 9, 9, 9, 8], [11, 40, 3, 17, 22, 5]]
    r = replay([(p, generate(engine, p, 50).token_ids) for p in prompts], s, 40)
    curve = StepCurve("measured", {1: {1: 1.0, 4: 1.6, 7: 2.5}, 2: {1: 1.5, 7: 4.0}})
    host = Host(0.25, 0.0, "measured")
    got = score(r, curve, 1, host, s)
    brute = sum(curve.target_ms(1, t) + 0.25 for t in r.nodes) / r.steps
    assert got.cost_ms == pytest.approx(brute) and got.tau == pytest.approx(r.tokens / r.steps)
    assert got.nodes == 7 and sum(r.lengths) == r.steps and len(r.lengths) == 3
    # batch 2: texts 0 and 1 side by side (each step padded to the wider draft), then text 2 alone
    a, b, c = r.per_text()
    ms = [
        curve.target_ms(2 if k < min(len(a), len(b)) else 1, max(x[k] for x in (a, b) if k < len(x))) + 0.25
        for k in range(max(len(a), len(b)))
    ] + [curve.target_ms(1, t) + 0.25 for t in c]
    two = score(r, curve, 2, host, s)
    assert two.cost_ms == pytest.approx(sum(ms) / len(ms)) and two.tau == got.tau
    room = 9
    assert all(ngram_nodes(g["max_draft"], g["candidates"]) <= room for g in grid(s, room))
    assert grid(s, room)[0] == s and len({tuple(sorted(g.items())) for g in grid(s, room)}) == len(grid(s, room))
    # the pool: tried on and off where the recipe allows it, never turned on where it does not
    assert {g["shared_pool"] for g in grid({**s, "shared_pool": True}, room)} == {True, False}
    assert {g["shared_pool"] for g in grid({**s, "shared_pool": False}, room)} == {False}
    assert {g.get("shared_pool", False) for g in grid(s, room)} == {False}


def test_tune_ngram_end_to_end(tmp_path: Path) -> None:
    cache = os.environ["TRTSPEC_CACHE_DIR"]
    res = run(
        "tune",
        str(REPO / "recipes" / "tiny-llama3-ngram.yaml"),
        "--prompts",
        "2",
        "--max-new-tokens",
        "32",
        "--cache-dir",
        cache,
        "--json",
        "--measure-prompts",
        "0",
        "--write",
        str(tmp_path / "t.yaml"),
    )
    assert res.exit_code == 0, res.output
    rep = json.loads(res.output)
    rate = lambda r: r["tau"] / r["cost_ms"]  # noqa: E731
    assert rate(rep["pick"]) == pytest.approx(max(rate(r) for r in rep["candidates"]))
    assert rate(rep["pick"]) >= rate(rep["current"]) * (1 - 1e-9)
    assert all(r["nodes"] <= rep["cost"]["max_nodes"] and r["tau"] >= 1 for r in rep["candidates"])
    spec = load_recipe(tmp_path / "t.yaml").recipe.speculative
    assert (spec.max_draft, spec.max_match, spec.min_match, spec.shared_pool) == tuple(
        rep["pick"][k] for k in ("max_draft", "max_match", "min_match", "shared_pool")
    )
    # the recipe allows the pool: every setting was replayed with it and without (the report lists the best 10)
    tried = grid(TUNER.current(load_recipe(REPO / "recipes" / "tiny-llama3-ngram.yaml")), rep["cost"]["max_nodes"])
    assert rep["calibration"]["settings_measured"] == len(tried) and {g["shared_pool"] for g in tried} == {True, False}
    assert rep["calibration"]["replayed_steps"] > 0
