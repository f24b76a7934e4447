"""EAGLE-2 ⊇ EAGLE-1: a dynamic setting whose tree the scores cannot change is that static tree, drafted on EAGLE-1's
path, and the EAGLE-2 tuner's grid holds the chains EAGLE-1's tuner can pick.

* Trees (pure): for every setting `dynamic_as_static` names a static tree for, the batched dynamic grower
  (`DynamicTrees`) and the one-sequence reference (`dynamic_tree_steps`) grow exactly that tree (tokens, mask,
  depths, paths), over answers that are a function of each node's token path, ties included; the two-node trees
  are one tree for every top_k >= 2 (the tuner's `setting_key`) — against brute force.
* Drafters over the tiny fixture's trained draft (the torch net) and the fixture's target (the torch reference):
  an EAGLE-2 top_k-1 drafter drafts what a static chain drafter drafts, step by step, with the same draft-net calls,
  and both generate plain greedy's tokens; the same drafter forced onto the dynamic path drafts the same (the
  static route changes the work, not the drafts); a budget truncates it to the shorter chain; a smaller top_k over
  a net of more ranks drafts what a net of exactly that top_k drafts.
* The tuner's grid (`builder.tune.dynamic.grid`): every chain d = 1..min(MAX_CHAIN, room - 1), top_k-2 trees, the
  recipe's top_k family; one key per tree; the chains' τ from the deepest chain's acceptance (hand table); the
  search on the tiny fixture scores every chain from one decode (the deepest chain's τ: its own decode's) and picks
  the best rate.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from builder.speculative.eagle.drafter import DynamicSpec, EagleDrafter, runnable
from builder.speculative.eagle.grow import DynamicTrees, StaticTrees
from builder.speculative.eagle.tree import drive, dynamic_as_static, dynamic_tree_steps, static_tree
from builder.speculative.tree import tree_draft
from builder.tune.acceptance import TauStats
from builder.tune.dynamic import MAX_CHAIN, around, chain_tau, chains, grid, most_nodes, setting_key

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "tiny-llama3"
VOCAB = 11


def chain(d: int) -> list[list[int]]:
    return [[0] * i for i in range(1, d + 1)]


# ---- trees: answers as a function of each node's token path ----


def path_answer(path: tuple[int, ...], k: int, ties: bool) -> tuple[np.ndarray, np.ndarray]:
    """[K] distinct tokens and [K] log-probs (<= 0, best first) for the node with this token path (root first):
    a fixed function of the path, so every grower that reaches the node gets the same answer."""
    rng = np.random.default_rng(abs(hash(path)) % (1 << 32))
    tok = rng.permutation(VOCAB).astype(np.int64)  # the whole ranking: top-k of one distribution for every k
    lp = np.zeros(VOCAB, np.float32) if ties else -np.sort(rng.exponential(1.0, VOCAB)).astype(np.float32)
    return tok[:k], lp[:k]


class PathDraft:
    """A batched `expand` over `path_answer`: rebuilds each frontier node's token path from its parent's row."""

    def __init__(self, k: int, ties: bool) -> None:
        self.k, self.ties = k, ties
        self.prev: list[list[tuple[int, ...]]] = []  # per row: the previous frontier's token paths

    def __call__(self, tokens: np.ndarray, parents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # [B, F] each
        rows = [
            [(t,) if p == -1 else self.prev[b][p] + (t,) for t, p in zip(tok, par)]  # (-1: the root, its own path)
            for b, (tok, par) in enumerate(zip(tokens.tolist(), parents.tolist()))
        ]
        self.prev = rows
        ans = [[path_answer(p, self.k, self.ties) for p in r] for r in rows]
        return np.array([[a[0] for a in r] for r in ans]), np.array([[a[1] for a in r] for r in ans])


def grow_batched(grow, k: int, ties: bool) -> list:
    draft = PathDraft(k, ties)
    while not grow.done:
        grow.answer(*draft(*grow.frontier()))
    return grow.drafts()


def same_draft(a, b) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in ("tokens", "mask", "depth", "paths"))


STATIC_SETTINGS = [
    (d, k, n)
    for d, k, n in itertools.product(range(1, 5), range(1, 4), range(1, 14))
    if n <= most_nodes(d, k) and dynamic_as_static(d, k, n) is not None
]


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("depth,top_k,total", STATIC_SETTINGS)
def test_dynamic_settings_with_a_fixed_tree_grow_that_static_tree(depth, top_k, total, ties):
    tree = dynamic_as_static(depth, top_k, total)
    assert tree is dynamic_as_static(depth, top_k, total)  # one object per setting (the drafter's mask cache)
    roots = np.array([3, 7, 3])
    levels = min(depth, total)  # deeper levels keep nothing: the drafter caps them (`runnable`)
    static = grow_batched(StaticTrees(tree, roots), top_k, ties)
    dynamic = grow_batched(DynamicTrees(roots, depth=levels, top_k=top_k, total_nodes=total), top_k, ties)
    for row, (s, d) in enumerate(zip(static, dynamic)):
        assert same_draft(s, d), (row, s, d)
        ref = drive(  # the one-sequence reference, at the setting's own depth
            dynamic_tree_steps(int(roots[row]), depth=depth, top_k=top_k, total_nodes=total),
            lambda tok, par, _d=PathDraft(top_k, ties): tuple(a[0] for a in _d(tok[None], par[None])),
        )
        want = tree_draft(ref.tree, ref.tokens)
        assert np.array_equal(want.tokens, s.tokens) and np.array_equal(want.mask, s.mask)
    if top_k == 1:
        assert tree.num_nodes == levels + 1 and tree.max_depth == levels  # a chain
    if levels == 1:
        assert tree.max_depth == 1 and tree.num_nodes == 1 + min(top_k, total)  # a star


def test_runnable_routes_the_fixed_trees_and_caps_depth():
    assert runnable(DynamicSpec(6, 1, 4)) is dynamic_as_static(4, 1, 4)
    assert runnable(DynamicSpec(1, 3, 8)) is dynamic_as_static(1, 3, 3)  # the star of the root's 3 best
    assert runnable(DynamicSpec(6, 3, 4)) == DynamicSpec(4, 3, 4)  # no level past the 4th can keep a node
    assert runnable(DynamicSpec(5, 3, 12)) == DynamicSpec(5, 3, 12)


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("depth", [1, 2, 4])
def test_two_node_trees_are_one_tree_for_every_top_k_of_two_or_more(depth, ties):
    """`setting_key`'s claim, by brute force over top_k 2..5 (K = top_k children per node)."""
    roots = np.array([5, 2])
    got = [grow_batched(DynamicTrees(roots, depth=depth, top_k=k, total_nodes=2), k, ties) for k in range(2, 6)]
    for other in got[1:]:
        assert all(same_draft(a, b) for a, b in zip(got[0], other))
    assert {setting_key(depth, k, 2) for k in range(2, 6)} == {(min(depth, 2), 2, 2)}


# ---- drafters over the tiny fixture's trained draft ----

NEW, PROMPTS, MAX_SEQ = 40, 3, 512


@pytest.fixture(scope="module")
def fixture():
    from tokenizers import Tokenizer

    from builder.data.humaneval import heldout_prompts
    from builder.engines.torch_engine import TorchEngine
    from builder.model.loader import load_model
    from builder.speculative.decoding import generate
    from builder.speculative.eagle.draft_model import load_eagle

    model = load_model(FIXTURE / "base")
    draft = load_eagle(FIXTURE / "eagle", model.embed_tokens.weight, model.lm_head.weight)
    tok = Tokenizer.from_file(str(FIXTURE / "base" / "tokenizer.json"))
    prompts = [tok.encode(p).ids[-48:] for p in heldout_prompts(PROMPTS)]
    engine = TorchEngine(model, max_seq_len=MAX_SEQ, max_batch_size=1)
    plain = [generate(engine, p, NEW).token_ids for p in prompts]
    return draft, engine, prompts, plain


def net(draft, top_k: int):
    from builder.engines.torch_eagle import TorchEagleNet

    return TorchEagleNet(draft, top_k, MAX_SEQ + 64)


def decode(fixture, make, schedule=None, force=None) -> tuple[list[list[int]], list[list], int]:
    """Each prompt decoded by a fresh drafter: (tokens per prompt, drafts per step per prompt, draft-net calls).
    force: the shape `propose` grows, set past the constructor (the general path, for the comparison)."""
    from builder.speculative.decoding import Decoder, Request

    _, engine, prompts, _ = fixture
    outs, drafts, calls = [], [], 0
    for p in prompts:
        d = make()
        if force is not None:
            d._shape = force
        seen: list = []
        propose, n = d.propose, d.net

        def spy(seqs, roots, _propose=propose, _seen=seen):
            out = _propose(seqs, roots)
            _seen.append(out)
            return out

        d.propose = spy
        before = n.expand_calls if hasattr(n, "expand_calls") else None
        g = Decoder(engine, d, schedule).run([Request(tuple(p), NEW)])[0]
        outs.append(g.token_ids)
        drafts.append(seen)
        calls += 0 if before is None else n.expand_calls - before
    return outs, drafts, calls


class Counting:
    """A draft net's calls counted (the net itself runs them)."""

    def __init__(self, inner) -> None:
        self.inner, self.expand_calls, self.top_k = inner, 0, inner.top_k
        self.hidden_size = inner.hidden_size

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def expand(self, *args):
        self.expand_calls += 1
        return self.inner.expand(*args)


def assert_same_drafts(a: list[list], b: list[list]) -> None:
    assert [len(x) for x in a] == [len(x) for x in b]
    for sa, sb in zip(a, b):
        for x, y in zip(sa, sb):
            assert len(x) == len(y) and all(same_draft(u, v) for u, v in zip(x, y))


@pytest.mark.parametrize("d", [1, 3, 5])
def test_top_k_1_drafts_the_static_chain_with_the_same_calls(fixture, d):
    draft, _, _, plain = fixture
    wide = Counting(net(draft, 3))  # the graph of a recipe exported for top_k 3
    one = Counting(net(draft, 1))
    assert EagleDrafter(wide, DynamicSpec(d + 2, 1, d))._shape is dynamic_as_static(d, 1, d)  # EAGLE-1's path
    outs2, drafts2, calls2 = decode(fixture, lambda: EagleDrafter(wide, DynamicSpec(d + 2, 1, d)))
    outs1, drafts1, calls1 = decode(fixture, lambda: EagleDrafter(one, static_tree(chain(d))))
    assert outs2 == outs1 == plain  # lossless: plain greedy's tokens
    assert_same_drafts(drafts2, drafts1)
    assert calls2 == calls1 == sum(len(s) for s in drafts1) * (d - 1)  # one expand per level below the extend's
    assert all(len(x.tokens) == d + 1 for s in drafts1 for step in s for x in step)  # d nodes and the root
    if d > 1:
        accepted = sum(len(o) - 1 for o in outs1) - sum(len(s) for s in drafts1)  # tokens beyond one per step
        assert accepted > 0  # the trained draft accepts: the drafts are not all wrong
    # the general path (DynamicTrees over the net's first rank) drafts the same chains
    outs3, drafts3, calls3 = decode(
        fixture, lambda: EagleDrafter(wide, DynamicSpec(d, 1, d)), force=DynamicSpec(d, 1, d)
    )
    assert outs3 == plain and calls3 == calls1
    assert_same_drafts(drafts3, drafts1)


def test_a_budget_cuts_a_top_k_1_setting_to_the_shorter_chain(fixture):
    from builder.speculative.decoding import DraftSchedule

    draft, _, _, plain = fixture
    wide = net(draft, 3)
    outs, drafts, _ = decode(fixture, lambda: EagleDrafter(wide, DynamicSpec(5, 1, 5)), DraftSchedule([[1, 3]]))
    outs_ref, drafts_ref, _ = decode(fixture, lambda: EagleDrafter(wide, static_tree(chain(2))))
    assert outs == outs_ref == plain
    assert_same_drafts(drafts, drafts_ref)
    d = EagleDrafter(wide, DynamicSpec(5, 1, 5))
    d.set_budget(3)
    assert d._shape is dynamic_as_static(2, 1, 2)
    d.set_budget(None)
    assert d._shape is dynamic_as_static(5, 1, 5)


def test_a_smaller_top_k_over_a_wider_net_drafts_what_a_net_of_that_top_k_drafts(fixture):
    draft, _, _, plain = fixture
    spec = DynamicSpec(4, 2, 7)
    wide, exact = net(draft, 4), net(draft, 2)
    outs_w, drafts_w, _ = decode(fixture, lambda: EagleDrafter(wide, spec))
    outs_e, drafts_e, _ = decode(fixture, lambda: EagleDrafter(exact, spec))
    assert outs_w == outs_e == plain
    assert_same_drafts(drafts_w, drafts_e)
    with pytest.raises(ValueError, match="exceeds the draft net's top-k"):
        EagleDrafter(exact, DynamicSpec(4, 3, 7))


# ---- the tuner's grid ----


@pytest.mark.parametrize("room", [2, 5, 24, 200])
@pytest.mark.parametrize("depth,top_k,total", [(5, 3, 12), (6, 10, 60), (2, 2, 4), (4, 1, 4)])
def test_the_grid_holds_the_chains_small_trees_and_the_recipes_family(depth, top_k, total, room):
    keys = grid(depth, top_k, total, room)
    want_chains = [(d, 1, d) for d in range(1, min(MAX_CHAIN, room - 1) + 1)]
    assert chains(room) == want_chains and keys[: len(want_chains)] == want_chains
    assert len(set(keys)) == len(keys)
    for d, k, n in keys:
        assert 1 <= d <= n < room and k <= top_k and n <= most_nodes(d, k)
        assert (d, k, n) == setting_key(d, k, n)  # one key per tree
    trees = {(k, n) for _, k, n in keys if k > 1}
    if top_k > 2:  # top_k-2 small trees
        assert {(2, n) for n in (2, 3, 4, 6, 8) if n < room} <= trees
    if top_k > 1 and total < room:  # the recipe's own setting
        assert setting_key(depth, top_k, total) in keys
        assert {(top_k, n) for n in (3, 4, 6, 8, 12, 16) if n < room and n <= most_nodes(depth, top_k)} <= trees
    if top_k == 1:
        assert all(k == 1 for _, k, _ in keys)  # a draft graph of one rank: chains only


def test_around_varies_depth_only_for_trees():
    assert around((3, 1, 3)) == []
    assert around((5, 3, 12)) == [(3, 3, 12), (4, 3, 12), (6, 3, 12), (7, 3, 12)]
    assert around((2, 2, 2)) == [(1, 2, 2)]  # no deeper than its nodes
    assert around((2, 3, 12)) == [(3, 3, 12), (4, 3, 12)]  # depth 1 gives only 3 candidates


def test_chain_tau_from_the_deepest_chains_acceptance():
    # 10 steps of a 3-node chain accepting 0, 1, 1, 2, 3, 3, 3, 0, 2, 1 tokens: >= 1: 8, >= 2: 5, >= 3: 3
    stats = TauStats(steps=10, tokens=10 + 16, accepted_at_depth=[8, 5, 3])
    assert chain_tau(stats, 1) == pytest.approx(1.8)
    assert chain_tau(stats, 2) == pytest.approx(2.3)
    assert chain_tau(stats, 3) == pytest.approx(stats.tau)  # the deepest chain itself: its measured τ
    assert chain_tau(stats, 5) == pytest.approx(stats.tau)


def test_the_search_scores_every_chain_and_picks_the_best_rate():
    """`tune_dynamic` on the tiny fixture (the torch reference decodes the calibration prompts) over a synthetic step
    curve: the table holds every chain, the deepest chain's τ is its own decode's, the pick is the best rate, and
    a chain pick's schedule options are the shorter chains."""
    from builder.recipe.loader import load_recipe
    from builder.speculative.method import set_path
    from builder.tune.calibrate import Calibration
    from builder.tune.choose import best
    from builder.tune.costs import Host
    from builder.tune.curve import StepCurve
    from builder.tune.dynamic import EAGLE2, key_of
    from builder.tune.tuners import measure_tau

    loaded = load_recipe(REPO / "recipes" / "tiny-llama3-eagle2.yaml")
    cal = Calibration(loaded, 2, 48, 24)
    room = 16
    curve = StepCurve(
        "measured",
        target={1: {1: 10.0, room: 10.0 + 0.5 * (room - 1)}},
        expand={1: {1: 0.4, room: 1.0}},
        extend={1: {1: 0.5, 8: 0.8}},
    )
    tuned = EAGLE2.tune(cal, curve, room, Host(), lambda _m: None)
    taus = {key_of(s.setting): s.tau for s in tuned.table}
    assert set(chains(room)) <= set(taus) and len(taus) == len(tuned.table)
    assert all(taus[(d, 1, d)] <= taus[(d + 1, 1, d + 1)] for d in range(1, MAX_CHAIN))
    spec = loaded.recipe.speculative
    deepest = set_path(spec, ("tree",), {"type": "dynamic", "depth": MAX_CHAIN, "top_k": 1, "total_nodes": MAX_CHAIN})
    assert taus[(MAX_CHAIN, 1, MAX_CHAIN)] == measure_tau(cal, deepest, spec.tree.top_k, 64).tau
    assert tuned.pick.rate == best(tuned.table).rate
    assert tuned.stats["settings_measured"] < tuned.stats["settings_scored"]  # the chains: one decode
    options = tuned.options(1)
    assert options[0].nodes == 1 and [o.nodes for o in options[1:]] == sorted(o.nodes for o in options[1:])
    if tuned.pick.setting["top_k"] == 1:
        assert [key_of(o.setting) for o in options[1:]] == chains(tuned.pick.nodes)
