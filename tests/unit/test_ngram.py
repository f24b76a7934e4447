"""N-gram (prompt-lookup) speculation (builder.speculative.ngram), each part against an oracle:

* the lookup against a brute-force scan of the text written from the rule (longest suffix with an earlier
  occurrence, continuations newest first, an overlapping copy where one runs into the end);
* the draft's tree against the engine's own draft checks (`check_draft`) and a brute-force trie (one node per
  distinct prefix of the continuations, one path per maximal continuation);
* node budgets, the adaptive length rule, and the text the drafter learns against the real decode's output;
* the shared pool (`pool.SharedPool`): its lookup against a brute-force scan of the kept texts (with eviction), its
  drafts only where the own text has none, the adaptive length left alone by them, what the real decoding loop
  puts in it (lossless, and it drafts a repeated request's output); the benchmark's warm-up leaves it empty and
  its private twin row (`private_pools`);
* the recipe section: cross-field error (exit 2, field and allowed values), the trtllm backend's refusal, `trtspec
  generate --method ngram` on a recipe of another method (`trtspec tune` on n-gram: tests/unit/test_tune_ngram.py).
Losslessness of decoding with it: tests/unit/test_lossless.py (random model, trees of 2 candidates, both engines,
batched) and tests/unit/test_fixture_lossless.py (the shipped recipe on the trained fixture, τ > 1.2).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from builder.speculative.ngram.config import NgramConfig
from builder.speculative.ngram.drafter import (
    ADAPT_AFTER,
    ADAPT_FLOOR,
    ADAPT_START,
    ADAPT_UP,
    SCAN,
    NgramDrafter,
    NgramFactory,
    NgramState,
)
from builder.speculative.ngram.pool import POOL_DRAFT, POOL_MIN_MATCH, SharedPool
from builder.speculative.protocols import PrefillResult, StepResult, check_draft

REPO = Path(__file__).resolve().parents[2]


def ngram_config(**fields) -> NgramConfig:
    return NgramConfig(method="ngram", **fields)


def brute_continuations(
    text: list[int], max_draft: int, max_match: int, min_match: int, candidates: int, limit: int
) -> list[tuple[int, ...]]:
    """The lookup rule by scanning: the longest suffix n (max_match..min_match) that occurred before, then the
    `limit` tokens after each earlier occurrence (latest first, at most SCAN read), copied with overlap."""
    size = len(text)
    for n in range(min(max_match, size), min_match - 1, -1):
        suffix = text[size - n :]
        ends = [e for e in range(n, size) if text[e - n : e] == suffix]  # occurrences ending before the suffix's end
        if not ends:
            continue
        found: list[tuple[int, ...]] = []
        for e in sorted(ends, reverse=True)[:SCAN]:
            ext = list(text)
            cont = []
            for i in range(limit):
                ext.append(ext[e + i])  # reading what the copy itself wrote when e + i >= size
                cont.append(ext[-1])
            if tuple(cont) not in found:
                found.append(tuple(cont))
            if len(found) == candidates:
                break
        return found
    return []


def looped_text(gen: np.random.Generator, size: int, vocab: int) -> list[int]:
    """Random tokens with copied stretches and short loops, as a greedy model's output has."""
    text = [int(t) for t in gen.integers(0, vocab, 4)]
    while len(text) < size:
        r = gen.random()
        if r < 0.4 and len(text) > 6:
            start = int(gen.integers(0, len(text) - 3))
            text += text[start : start + int(gen.integers(2, 9))]
        elif r < 0.6:
            period = int(gen.integers(1, 4))
            text += (text[-period:] * 4)[: int(gen.integers(2, 10))]
        else:
            text.append(int(gen.integers(0, vocab)))
    return text[:size]


@pytest.mark.parametrize("seed", range(6))
def test_continuations_equal_the_brute_force_scan(seed: int) -> None:
    gen = np.random.default_rng(seed)
    for _ in range(40):
        text = looped_text(gen, int(gen.integers(1, 60)), vocab=int(gen.integers(3, 12)))
        big = int(gen.integers(1, 6))
        small, k, c = int(gen.integers(1, big + 1)), int(gen.integers(1, 14)), int(gen.integers(1, 4))
        state = NgramState(text, k, big, small, c, adaptive=False)
        limit = int(gen.integers(1, k + 1))
        assert state.continuations(limit) == brute_continuations(text, k, big, small, c, limit), (text, big, small)


def trie(conts: list[tuple[int, ...]], cap: int) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """(node prefixes in creation order, maximal prefixes) of the continuations' trie under a `cap`-node budget."""
    nodes: list[tuple[int, ...]] = [()]
    for c in conts:
        for i in range(1, len(c) + 1):
            if c[:i] not in nodes:
                if len(nodes) >= cap:
                    break
                nodes.append(c[:i])
    leaves = [p for p in nodes if not any(q[: len(p)] == p and len(q) > len(p) for q in nodes)]
    return nodes, leaves


@pytest.mark.parametrize("candidates", [1, 2, 3])
def test_draft_tree_is_the_trie_of_the_continuations(candidates: int) -> None:
    gen = np.random.default_rng(candidates)
    for _ in range(60):
        text = looped_text(gen, int(gen.integers(8, 80)), vocab=5)
        state = NgramState(text[:-1], 12, 4, 1, candidates, adaptive=False)
        budget = None if gen.random() < 0.5 else int(gen.integers(1, 20))
        draft = state.propose(text[-1], budget)
        check_draft(draft, 5)  # the engines' own rules: mask, depth, paths
        room = 12 if budget is None else min(12, budget - 1)
        conts = state.continuations(room) if room >= 1 else []
        nodes, leaves = trie(conts, 12 * candidates + 1 if budget is None else budget)
        if len(nodes) == 1:
            assert draft.num_nodes == 1
            continue
        toks = draft.tokens.tolist()
        assert toks[0] == text[-1] and draft.num_nodes == len(nodes)
        got = [tuple(toks[i] for i in row[row >= 0][1:]) for row in draft.paths]
        assert sorted(got) == sorted(leaves)


def test_chain_as_tokens_is_the_draft_and_the_draft_after_it_unchanged() -> None:
    """`propose_chain` (one candidate: the loop's batch-1 shortcut) against `propose` on a twin state: the root and
    the draft's tokens, for random texts, budgets and adaptive lengths; and `propose` called after it for the same
    root (what the loop does where the shortcut does not apply) gives that same draft."""
    gen = np.random.default_rng(11)
    for _ in range(80):
        text = looped_text(gen, int(gen.integers(3, 90)), vocab=6)
        adaptive = bool(gen.random() < 0.7)
        a, b = (NgramState(text[:-1], 12, 4, 1, 1, adaptive=adaptive) for _ in range(2))
        for _ in range(int(gen.integers(1, 6))):  # some steps first: the adaptive length moves
            emitted = [int(t) for t in gen.integers(0, 6, int(gen.integers(1, 5)))]
            depth = int(gen.integers(0, 6))
            a.update(emitted, depth)
            b.update(emitted, depth)
        budget = None if gen.random() < 0.5 else int(gen.integers(1, 20))
        root = int(gen.integers(0, 6))
        chain = a.propose_chain(root, budget)
        draft = b.propose(root, budget)
        assert chain == draft.tokens.tolist() and draft.paths.shape == (1, len(chain))
        assert a.propose(root, budget).tokens.tolist() == chain and a.text == b.text


def _result(emitted: list[int]) -> StepResult:
    n = len(emitted)
    z = np.zeros((1, n), np.int64)
    return StepResult(np.array([n]), z, np.array([emitted], np.int64), np.zeros((1, n, 1), np.float32), z)


def test_budget_caps_nodes_and_one_node_is_a_plain_step() -> None:
    text = [1, 2, 3, 4, 5, 6, 7, 8, 9] * 3
    d = NgramDrafter(8, 3, 2, 2, adaptive=False)
    d.start([0], [text], PrefillResult(np.array([1]), []))
    assert d.max_nodes == 17
    assert d.propose([0], [1])[0].num_nodes == 9  # root + 8 copied tokens
    for budget, want in ((1, 1), (4, 4), (None, 9)):
        d.set_budget(budget)
        assert d.propose([0], [1])[0].num_nodes == want


def test_adaptive_length_rises_on_full_acceptance_and_falls_to_what_was_accepted() -> None:
    s = NgramState([7, 8, 9] * 10, 10, 3, 2, 1)
    assert s.length == ADAPT_START
    draft = s.propose(7, None)
    assert draft.width - 1 == ADAPT_START  # a loop: the draft has the full current length
    s.update([8, 9, 7, 8, 9], draft.width - 1)  # accepted in full (and more tokens emitted)
    assert s.length == min(10, ADAPT_START + ADAPT_UP)
    s.update([8, 9, 7, 8, 9, 7, 8, 9, 7, 8, 9], 10)
    assert s.length == 10  # capped at max_draft
    s.update([8, 9, 7, 8, 9, 7, 8, 1], 10)  # 7 of 10 drafts accepted: the length falls to 7 + ADAPT_AFTER
    assert s.length == min(10, 7 + ADAPT_AFTER)
    s.update([1], 5)  # rejected at once
    assert s.length == max(ADAPT_FLOOR, ADAPT_AFTER)
    for _ in range(20):
        s.update([1], 5)
    assert s.length == ADAPT_FLOOR
    s.update([1], 0)  # a root-only step leaves it alone
    assert s.length == ADAPT_FLOOR
    assert NgramState([1, 2], 1, 2, 1, 1).length == 1  # never above max_draft
    assert NgramState([1, 2], 10, 2, 1, 1, adaptive=False).length == 10


def test_the_text_learned_is_the_prompt_and_the_decoded_output() -> None:
    """Through the real decoding loop (torch reference engine): the drafter's text = prompt + generated tokens."""
    import tempfile

    from builder.model.loader import load_model
    from builder.speculative.decoding import generate
    from tests.unit.speculative_models import make_hf_llama
    from tests.unit.test_lossless import torch_method

    with tempfile.TemporaryDirectory() as tmp:
        model = load_model(make_hf_llama(Path(tmp) / "m"))

    class Kept(NgramDrafter):
        def release(self, seq: int) -> None:
            self.kept = self._seqs[seq]  # the sequence's state as the loop lets it go
            super().release(seq)

    engine, _ = torch_method(model, "none")
    drafter = Kept(6, 3, 1, 2)
    prompt = [5, 6, 7, 5, 6, 7, 5, 6]
    g = generate(engine, prompt, 40, drafter)
    assert g.token_ids == generate(engine, prompt, 40).token_ids  # lossless
    assert sum(g.accepted_per_step) > 0  # it drafted, and drafts were accepted
    state = drafter.kept
    assert state.text[: len(prompt)] == prompt
    learned = state.text[len(prompt) :]  # the last step may emit past max_new: the loop cuts, the drafter saw all
    assert learned[: len(g.token_ids)] == g.token_ids[: len(learned)] and len(learned) >= len(g.token_ids) - 1


def brute_pool(texts: list[list[int]], query: list[int], max_match: int, min_match: int, limit: int) -> tuple[int, ...]:
    """The pool's rule by scanning: the longest suffix of `query` (max_match..min_match tokens) that occurs in a
    kept text followed by at least one token; of its occurrences the newest (latest text, then latest place); the
    `limit` tokens after it, not past that text's end."""
    size = len(query)
    for n in range(min(max_match, size), min_match - 1, -1):
        suffix = query[size - n :]
        for text in reversed(texts):
            ends = [e for e in range(n, len(text)) if text[e - n : e] == suffix]
            if ends:
                return tuple(text[ends[-1] : ends[-1] + limit])
    return ()


@pytest.mark.parametrize("seed", range(4))
def test_pool_lookup_equals_the_brute_force_scan(seed: int) -> None:
    """Texts added one after another into a small pool (so the oldest go): the kept texts are the newest ones whose
    tokens fit, every lookup equals the scan over them, and the pool never holds more than its capacity."""
    gen = np.random.default_rng(100 + seed)
    cap = int(gen.integers(30, 120))
    big = int(gen.integers(2, 6))
    small = int(gen.integers(1, big + 1))
    pool, added = SharedPool(big, small, capacity=cap), []
    for _ in range(25):
        text = looped_text(gen, int(gen.integers(1, 50)), vocab=int(gen.integers(3, 9)))
        pool.add(text)
        added.append(text[-(cap // 2) :])
        assert len(pool) <= cap
        starts = [0, *pool.ends[:-1]]
        kept = [pool.tokens[a:b] for a, b in zip(starts, pool.ends)]
        assert kept == added[len(added) - len(kept) :] and kept[-1] == added[-1]  # the newest texts, in order
        for _ in range(10):
            query = looped_text(gen, int(gen.integers(1, 12)), vocab=int(gen.integers(3, 9)))
            limit = int(gen.integers(0, 7))
            assert pool.lookup(query, limit) == (brute_pool(kept, query, big, small, limit) if limit >= 1 else ())


def test_shared_pool_drafts_only_where_the_own_text_has_none() -> None:
    """With a pool, a state drafts what it drafts without one wherever its own text has a match; where it has none,
    the pool's continuation of at most POOL_DRAFT tokens (and the budget's room); such a step's update leaves the
    adaptive length alone, an own draft's moves it as before."""
    gen = np.random.default_rng(5)
    pool = SharedPool(4)
    for _ in range(12):
        pool.add([int(t) for t in gen.integers(0, 6, 80)])
    pooled = 0
    for _ in range(300):
        text = looped_text(gen, int(gen.integers(1, 8)), vocab=6)
        budget = None if gen.random() < 0.6 else int(gen.integers(1, 8))
        root = int(gen.integers(0, 6))
        a, b = NgramState(text, 10, 4, 1, 1, pool=pool), NgramState(text, 10, 4, 1, 1)
        a.length = b.length = int(gen.integers(2, 11))
        got, own = a.propose_chain(root, budget), b.propose_chain(root, budget)
        if len(own) > 1 or budget == 1:
            assert got == own and not a.pooled
            continue
        room = min(POOL_DRAFT, 10, 1 << 30 if budget is None else budget - 1)
        want = brute_pool(
            [pool.tokens[x:y] for x, y in zip([0, *pool.ends[:-1]], pool.ends)], a.text, 4, POOL_MIN_MATCH, room
        )
        assert got == [root, *want] and a.pooled == bool(want)
        if want:
            pooled += 1
            before = a.length
            a.update([root], len(want))  # rejected at once: an own draft would fall to ADAPT_AFTER
            assert a.length == before
    assert pooled > 20  # the pool answered often enough to test it
    s = NgramState([7, 8, 9] * 5, 10, 3, 2, 1, pool=pool)
    d = s.propose(7, None)
    s.update([8], d.width - 1)
    assert not s.pooled and s.length == max(ADAPT_FLOOR, ADAPT_AFTER)  # an own draft still moves it


def test_shared_pool_drafts_a_repeated_requests_output_losslessly() -> None:
    """Through the real decoding loop (torch reference engine), one factory's drafters: the second request of the
    same prompt finds the first's text in the pool and accepts more drafts than a private drafter does on it; every
    output equals plain greedy; the pool holds each released request's prompt + output."""
    import tempfile

    from builder.model.loader import load_model
    from builder.speculative.decoding import generate
    from tests.unit.speculative_models import make_hf_llama
    from tests.unit.test_lossless import torch_method

    with tempfile.TemporaryDirectory() as tmp:
        model = load_model(make_hf_llama(Path(tmp) / "m"))
    engine, _ = torch_method(model, "none")
    shared, private = (
        NgramFactory(
            ngram_config(max_draft=6, max_match=3, min_match=1, candidates=1, adaptive=True, shared_pool=True)
        ),
        NgramFactory(
            ngram_config(max_draft=6, max_match=3, min_match=1, candidates=1, adaptive=True, shared_pool=False)
        ),
    )
    prompts = [[11, 40, 3, 17, 22, 5], [30, 31, 32, 33, 34, 35, 36], [11, 40, 3, 17, 22, 5]]
    gens = []
    for p in prompts:
        want = generate(engine, p, 40).token_ids
        g = generate(engine, p, 40, shared())
        assert g.token_ids == want  # lossless
        gens.append(g)
        assert shared.pool is not None
        last = shared.pool.tokens[([0, *shared.pool.ends])[-2] :]  # the newest text: this request's
        rest = last[len(p) :]  # (the last step may emit past max_new: the loop cuts, the drafter saw all)
        assert last[: len(p)] == p and rest[: len(want)] == want[: len(rest)] and len(rest) >= len(want) - 1
    alone = generate(engine, prompts[2], 40, private())
    assert sum(gens[2].accepted_per_step) > sum(alone.accepted_per_step)  # the pool drafted the first's output
    assert gens[2].steps < alone.steps and private.pool is None


def test_bench_warm_up_leaves_the_pool_empty_and_the_private_twin() -> None:
    """The decode benchmark's row: after its warm-up prompt the shared pool is empty (the first timed prompt is
    the warm-up's), after a timed one it holds it; `private_pools` adds the same engine without a pool."""
    import tempfile

    from builder.model.loader import load_model
    from builder.stages.decoders import DecoderSetup
    from devtools.bench.decode import private_pools
    from devtools.bench.rows import OurRun
    from tests.unit.speculative_models import make_hf_llama
    from tests.unit.test_lossless import torch_method

    with tempfile.TemporaryDirectory() as tmp:
        model = load_model(make_hf_llama(Path(tmp) / "m"))
    engine, _ = torch_method(model, "none")
    factory = NgramFactory(
        ngram_config(max_draft=6, max_match=3, min_match=1, candidates=1, adaptive=True, shared_pool=True)
    )
    dec = DecoderSetup(engine, None, factory, "ngram", "ngram(K=6,M=3,m=1,C=1,shared)", [])
    run = OurRun(dec, 512)
    run.warm([11, 40, 3, 17, 22, 5], 20)
    assert factory.pool is not None and len(factory.pool) == 0
    run.once([11, 40, 3, 17, 22, 5], 20)
    assert len(factory.pool) > 20
    (twin,) = private_pools(
        [
            dec,
            DecoderSetup(
                engine,
                None,
                NgramFactory(
                    ngram_config(max_draft=6, max_match=3, min_match=1, candidates=1, adaptive=True, shared_pool=False)
                ),
                "ngram",
                "x",
                [],
            ),
        ]
    )
    assert twin.engine is engine and twin.make_drafter.config == ngram_config(
        max_draft=6, max_match=3, min_match=1, candidates=1, adaptive=True, shared_pool=False
    )
    assert twin.label == "ngram(K=6,M=3,m=1,C=1)" and twin.make_drafter().pool is None


def test_a_pool_looks_up_what_the_drafter_does() -> None:
    """A drafter whose suffixes are shorter than POOL_MIN_MATCH gets a pool of its own max_match (not one that can
    never match); a longer one the pool's minimum."""
    for big in (1, 2, POOL_MIN_MATCH, 5):
        pool = NgramFactory(
            ngram_config(max_draft=6, max_match=big, min_match=1, candidates=1, adaptive=True, shared_pool=True)
        ).pool
        assert pool is not None and pool.max_match == big and pool.min_match == min(POOL_MIN_MATCH, big)
        assert NgramDrafter(6, big, 1, 1, True, True).pool.min_match == pool.min_match


def _trtspec(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "builder.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=300
    )


def test_recipe_errors_name_the_field_and_exit_2(tmp_path: Path) -> None:
    r = _trtspec("validate", "--set", "speculative.min_match=6", "recipes/tiny-llama3-ngram.yaml")
    assert r.returncode == 2 and "speculative.min_match" in r.stderr and "allowed: 1..5" in r.stderr
    assert "Traceback" not in r.stderr
    rec = tmp_path / "r.yaml"
    rec.write_text(
        f"extends: [{REPO}/recipes/llama3-8b-1xh100-fp8-trtllm-lookahead.yaml]\n"
        "speculative: {method: ngram, verification: greedy}\n"
    )
    r = _trtspec("validate", str(rec))
    assert (
        r.returncode == 2 and "speculative.method" in r.stderr and "allowed: none, medusa, eagle, lookahead" in r.stderr
    )


def test_method_ngram_runs_on_any_recipe(tmp_path: Path) -> None:
    r = _trtspec(
        "generate",
        "recipes/tiny-llama3-medusa.yaml",
        "--prompt-ids",
        "5,6,7,5,6,7,5,6",
        "--max-new-tokens",
        "24",
        "--method",
        "ngram",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    ngram = json.loads(r.stdout)
    r = _trtspec(
        "generate",
        "recipes/tiny-llama3-medusa.yaml",
        "--prompt-ids",
        "5,6,7,5,6,7,5,6",
        "--max-new-tokens",
        "24",
        "--method",
        "none",
        "--json",
    )
    assert ngram["method"].startswith("ngram(") and ngram["token_ids"] == json.loads(r.stdout)["token_ids"]
