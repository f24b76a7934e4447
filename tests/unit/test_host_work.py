"""Host work per step, vectorised: each batched piece against its one-sequence reference (the readable code
it replaces) on random cases — EAGLE trees grown for a batch (`builder.speculative.eagle.grow`) against
`eagle.tree`'s generators and `tree_from_parents`, the batched draft checks (`DraftBatch`) against `check_draft`, the verdict checks against brute force, the batched KV compaction
against `compact` row by row, and the binding pools."""

from __future__ import annotations

import numpy as np
import pytest

from builder.engines.bindings import LruBindings
from builder.engines.ort.kv import KVBuffers
from builder.engines.results import checked_verdicts
from builder.speculative.batch import DraftBatch
from builder.speculative.eagle.grow import DynamicTrees, StaticTrees
from builder.speculative.eagle.tree import drive, dynamic_tree_steps, static_tree, static_tree_steps
from builder.speculative.protocols import Draft, check_draft, root_only
from builder.speculative.tree import tree_draft, tree_from_parents

VOCAB = 50


def _random_parents(rng: np.random.Generator, t: int) -> np.ndarray:
    return np.array([-1] + [int(rng.integers(0, i)) for i in range(1, t)], np.int64)


def _answers(rng: np.random.Generator, b: int, f: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """[B, F, K] distinct tokens per node and sorted log-probs (<= 0, best first; some ties)."""
    tok = np.stack([[rng.permutation(VOCAB)[:k] for _ in range(f)] for _ in range(b)]).astype(np.int64)
    lp = -np.sort(np.round(rng.exponential(1.0, (b, f, k)), 1), axis=2).astype(np.float32)
    return tok, lp


@pytest.mark.parametrize("b", [1, 4])
@pytest.mark.parametrize("seed", range(8))
def test_dynamic_trees_match_the_one_sequence_generator(seed: int, b: int) -> None:
    rng = np.random.default_rng(seed)
    depth, top_k, k = int(rng.integers(1, 7)), int(rng.integers(1, 5)), int(rng.integers(1, 4))
    workspaces: dict = {}  # (reused by every tree of a shape, as the drafter does: three trees, the same buffers)
    for _ in range(3):
        _grow_dynamic_and_compare(rng, b, depth, top_k, k, int(rng.integers(1, 40)), workspaces)
    assert len(workspaces) == 1


def _grow_dynamic_and_compare(
    rng: np.random.Generator, b: int, depth: int, top_k: int, k: int, total: int, workspaces: dict
) -> None:
    roots = rng.integers(0, VOCAB, b)
    grow = DynamicTrees(roots, depth=depth, top_k=top_k, total_nodes=total, workspaces=workspaces)
    refs = [dynamic_tree_steps(int(r), depth=depth, top_k=top_k, total_nodes=total) for r in roots]
    asked = [next(g) for g in refs]
    grown = [None] * b
    while not grow.done:
        tokens, parents = grow.frontier()
        for i in range(b):  # the batch asks exactly what each sequence's generator asks
            np.testing.assert_array_equal(tokens[i], asked[i][0])
            np.testing.assert_array_equal(parents[i], asked[i][1])
        tok, lp = _answers(rng, b, tokens.shape[1], k)
        grow.answer(tok, lp)
        for i in range(b):
            try:
                asked[i] = refs[i].send((tok[i], lp[i]))
            except StopIteration as stop:
                grown[i] = stop.value
    drafts = grow.drafts()
    for d, g in zip(drafts, grown):
        ref = tree_draft(g.tree, g.tokens)
        check_draft(d, VOCAB)
        np.testing.assert_array_equal(tree_from_parents(g.tree.parents).mask, d.mask)
        np.testing.assert_array_equal(d.tokens, ref.tokens)
        np.testing.assert_array_equal(d.mask, ref.mask)
        np.testing.assert_array_equal(d.depth, ref.depth)
        p, w = ref.paths.shape  # ours: the batch's most leaves, width depth + 1; the extra rows are the root alone
        assert d.paths.shape == (max(g.tree.paths.shape[0] for g in grown), depth + 1)
        np.testing.assert_array_equal(d.paths[:p, :w], ref.paths)
        assert (d.paths[:p, w:] == -1).all() and (d.paths[p:, 0] == 0).all() and (d.paths[p:, 1:] == -1).all()


@pytest.mark.parametrize("bad", [np.nan, 0.5])
def test_grown_trees_refuse_log_probs_that_are_nan_or_positive(bad: float) -> None:
    """The answers' log-probs are checked (EAGLE-2: once, over every level, when the drafts are made)."""
    rng = np.random.default_rng(3)
    for level in range(3):
        grow = DynamicTrees(rng.integers(0, VOCAB, 2), depth=3, top_k=2, total_nodes=5)
        static = StaticTrees(static_tree([[0], [0, 0], [0, 0, 0]]), rng.integers(0, VOCAB, 2))
        for g in (grow, static):
            for i in range(3):
                tok, lp = _answers(rng, 2, g.frontier()[0].shape[1], 2)
                if i == level:
                    lp[1, -1, -1] = bad
                if g is static and i == level:
                    with pytest.raises(ValueError, match="NaN or > 0"):
                        g.answer(tok, lp)
                    break
                g.answer(tok, lp)
        with pytest.raises(ValueError, match="NaN or > 0"):
            grow.drafts()


def test_dynamic_trees_refuse_answers_of_the_wrong_shape() -> None:
    grow = DynamicTrees(np.array([1, 2]), depth=3, top_k=2, total_nodes=5)
    with pytest.raises(ValueError, match=r"for 2 x 1 frontier nodes"):
        grow.answer(*_answers(np.random.default_rng(0), 2, 2, 3))
    grow.answer(*_answers(np.random.default_rng(0), 2, 1, 3))
    with pytest.raises(ValueError, match="K=2 after K=3"):
        grow.answer(*_answers(np.random.default_rng(0), 2, 2, 2))


@pytest.mark.parametrize("choices", [[[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]], [[0], [0, 0], [0, 0, 0]]])
def test_static_trees_match_the_one_sequence_generator(choices: list[list[int]]) -> None:
    rng = np.random.default_rng(7)
    tree, b = static_tree(choices), 3
    roots = rng.integers(0, VOCAB, b)
    grow = StaticTrees(tree, roots)
    answers = []
    while not grow.done:
        tokens, _ = grow.frontier()
        answers.append(_answers(rng, b, tokens.shape[1], 2))
        grow.answer(*answers[-1])
    for i, d in enumerate(grow.drafts()):
        level = iter(range(len(answers)))
        ref = drive(static_tree_steps(tree, int(roots[i])), lambda _t, _p: tuple(a[i] for a in answers[next(level)]))
        np.testing.assert_array_equal(d.tokens, ref.tokens)
        assert d.mask is tree.mask and d.paths is tree.paths  # a static tree's arrays are shared, not copied


def _random_draft(rng: np.random.Generator) -> Draft:
    tree = tree_from_parents(_random_parents(rng, int(rng.integers(1, 9))))
    return Draft(
        rng.integers(0, VOCAB, tree.num_nodes).astype(np.int64), tree.mask.copy(), tree.depth.copy(), tree.paths.copy()
    )


def _read_only(d: Draft) -> Draft:
    for a in (d.mask, d.depth, d.paths):
        a.flags.writeable = False
    return d


def _corrupt(rng: np.random.Generator, d: Draft) -> Draft:
    """A draft broken in one of the ways `check_draft` refuses (or, when the tree is too small, unchanged)."""
    mask, depth, paths, tokens = d.mask.copy(), d.depth.copy(), d.paths.copy(), d.tokens.copy()
    kind = int(rng.integers(0, 6))
    t = d.num_nodes
    if kind == 0:
        tokens[-1] = VOCAB
    elif kind == 1 and t > 1:
        mask[t - 1, t - 1] = False
    elif kind == 2 and t > 1:
        depth[t - 1] += 1
    elif kind == 3 and paths.shape[1] > 1:
        paths[0, 1:] = -1
        paths[0, -1] = 0  # padding before a node
    elif kind == 4 and t > 1:
        mask[t - 1, 0] = not mask[t - 1, 0]
    elif kind == 5:
        paths[0, 0] = 1 if t > 1 else -1
    return Draft(tokens, mask, depth, paths)


@pytest.mark.parametrize("n", [1, 5])
@pytest.mark.parametrize("seed", range(8))
def test_draft_batch_checks_as_check_draft_does(seed: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    drafts = [_random_draft(rng) for _ in range(n)]
    if seed % 2:  # read-only trees (as Lookahead's layouts): checked through `check_tree`'s cache
        drafts = [_read_only(d) for d in drafts]
    batch = DraftBatch.of(drafts, VOCAB)
    for i, d in enumerate(drafts):  # the padded arrays hold each draft, padding nodes attend themselves only
        n, (p, w) = d.num_nodes, d.paths.shape
        np.testing.assert_array_equal(batch.tokens[i, :n], d.tokens)
        np.testing.assert_array_equal(batch.mask[i, :n, :n], d.mask)
        np.testing.assert_array_equal(batch.paths[i, :p, :w], d.paths)
        assert (batch.mask[i, n:] == np.eye(batch.t, dtype=bool)[n:]).all()
    bad = list(drafts)
    j = int(rng.integers(0, len(bad)))
    bad[j] = _corrupt(rng, bad[j]) if seed % 2 == 0 else _read_only(_corrupt(rng, bad[j]))
    try:
        check_draft(bad[j], VOCAB)
    except ValueError as e:
        with pytest.raises(ValueError) as got:
            DraftBatch.of(bad, VOCAB)
        assert str(got.value) == str(e)  # the same rule, the same message
    else:
        DraftBatch.of(bad, VOCAB)


def test_draft_batch_reuses_a_shared_read_only_structure() -> None:
    tree = static_tree([[0], [1], [0, 0]])
    drafts = [tree_draft(tree, np.array([1, 2, 3, 4], np.int64)) for _ in range(2)]
    first = DraftBatch.of(drafts, VOCAB)
    again = [tree_draft(tree, np.array([5, 6, 7, 8], np.int64)) for _ in range(2)]
    second = DraftBatch.of(again, VOCAB, first)
    assert second.same_structure and second.tokens.tolist() == [[5, 6, 7, 8]] * 2
    other = DraftBatch.of([_random_draft(np.random.default_rng(0))] * 2, VOCAB, second)
    assert not other.same_structure


def test_compact_rows_matches_compact_row_by_row() -> None:
    rng = np.random.default_rng(3)
    a, b = KVBuffers(2, 5, 2, 24, 3), KVBuffers(2, 5, 2, 24, 3)
    a.buf[...] = b.buf[...] = rng.standard_normal(a.buf.shape).astype(np.float32)
    rows, starts = np.array([4, 0, 2]), np.array([3, 10, 0])
    chains = np.array([[0, 2, 5, -1], [0, 1, 2, 3], [0, 3, -1, -1]])
    lengths = np.array([3, 4, 2])
    a.compact_rows(rows, starts, chains, lengths)
    for r, s, c, n in zip(rows, starts, chains, lengths):
        b.compact(int(r), int(s), c[:n])
    np.testing.assert_array_equal(a.buf, b.buf)


def test_prefill_bindings_never_push_out_a_step_binding() -> None:
    pool, built = LruBindings(size=2, prefill=1), []

    def build(key: tuple) -> object:
        built.append(key)
        return object()

    step = pool.get(("step", "greedy", 1, 1, 1, 1, 1), lambda: build("step"))
    for n in range(5):  # prompts of new lengths
        pool.get(("prefill", "greedy", 0, 1, 10 + n), lambda: build("prefill"))
    assert pool.get(("step", "greedy", 1, 1, 1, 1, 1), lambda: build("step")) is step
    assert built.count("step") == 1


@pytest.mark.parametrize("n", [1, 4])
def test_verdict_checks_match_brute_force(n: int) -> None:
    rng, checked = np.random.default_rng(n), 0
    for _ in range(40):
        drafts = [_random_draft(rng) for _ in range(n)]
        batch = DraftBatch.of(drafts, VOCAB)
        best = rng.integers(-1, batch.p + 2, n)
        acc = rng.integers(-1, batch.w + 3, n)
        if rng.random() < 0.5:  # a verdict every draft holds
            best = np.array([rng.integers(0, d.paths.shape[0]) for d in drafts])
            acc = np.array([rng.integers(1, int((d.paths[p] >= 0).sum()) + 1) for d, p in zip(drafts, best)])
        holds = [
            0 <= p < d.paths.shape[0] and 1 <= k <= d.width and d.paths[p, k - 1] >= 0
            for d, p, k in zip(drafts, best, acc)
        ]
        if not all(holds):
            with pytest.raises(RuntimeError, match="outside the draft's"):
                checked_verdicts(batch, acc, best)
            continue
        moved = np.broadcast_to(checked_verdicts(batch, acc, best), (n,))
        want = [(d.paths[p, :k] != np.arange(k)).any() for d, p, k in zip(drafts, best, acc)]
        assert moved.tolist() == want
        checked += 1
    assert checked >= 5


@pytest.mark.parametrize("n", [1, 2, 16])
def test_verdict_checks_of_plain_steps_match_brute_force(n: int) -> None:
    """Root-only batches (every row a plain step: checked_verdicts' shortcut): only (1, 0) holds, nothing moves."""
    rng = np.random.default_rng(100 + n)
    batch = DraftBatch.of([root_only(int(t)) for t in rng.integers(0, VOCAB, n)], VOCAB)
    assert batch.t == 1
    for trial in range(60):
        acc, best = np.ones(n, np.int32), np.zeros(n, np.int32)
        if trial % 2:  # one row (or a few) off the only verdict
            rows = rng.choice(n, size=int(rng.integers(1, n + 1)), replace=False)
            acc[rows] = rng.choice([-1, 0, 1, 2, 5], size=len(rows))
            best[rows] = rng.choice([-1, 0, 1, 3], size=len(rows))
        holds = [0 <= p < 1 and 1 <= k <= 1 for p, k in zip(best, acc)]
        if not all(holds):
            first = holds.index(False)
            with pytest.raises(RuntimeError, match=f"accepted {acc[first]} nodes of path {best[first]},"):
                checked_verdicts(batch, acc, best)
            continue
        assert np.broadcast_to(checked_verdicts(batch, acc, best), (n,)).tolist() == [False] * n


class _RecordingNet:
    """A stand-in EagleNet (the drafter is under test, not the net): deterministic top-k from the node's token and
    position, hidden = the token broadcast; records every expand's (tokens, hidden, positions, offset, mask)."""

    top_k, hidden_size = 4, 3

    def __init__(self) -> None:
        self.calls: list[tuple[np.ndarray, ...]] = []
        self.lens: dict[int, int] = {}

    def start(self, seqs):  # noqa: ANN001, ANN201
        self.lens.update({s: 0 for s in seqs})

    def release(self, seq):  # noqa: ANN001, ANN201
        self.lens.pop(seq)

    def committed_len(self, seq):  # noqa: ANN001, ANN201
        return self.lens[seq]

    def committed_lens(self, seqs):  # noqa: ANN001, ANN201
        return np.array([self.lens[s] for s in seqs], np.int64)

    def _out(self, tokens: np.ndarray, pos: np.ndarray):  # noqa: ANN202
        from builder.speculative.protocols import DraftOutput

        k = np.arange(self.top_k)
        tok = (tokens[..., None] * 7 + pos[..., None] * 3 + k * 11) % VOCAB
        lp = -np.broadcast_to(0.5 * k + (tokens[..., None] % 3) * 0.1, tok.shape).astype(np.float32)
        hid = np.broadcast_to(tokens[..., None], (*tokens.shape, self.hidden_size)).astype(np.float32)
        return DraftOutput(hid, tok.astype(np.int64), lp)

    def extend(self, seqs, tokens, hidden, num_new):  # noqa: ANN001, ANN201
        for s, n in zip(seqs, num_new):
            self.lens[s] += int(n)
        last = tokens[np.arange(len(seqs)), np.asarray(num_new) - 1][:, None]
        return self._out(last, self.committed_lens(seqs)[:, None] - 1)

    def expand(self, seqs, tokens, hidden, position_ids, write_offset, tree_mask):  # noqa: ANN001, ANN201
        self.calls.append((tokens.copy(), np.array(hidden), np.array(position_ids), write_offset, np.array(tree_mask)))
        return self._out(tokens, position_ids)


@pytest.mark.parametrize("b", [1, 3])
def test_static_tree_levels_from_the_mask_cache_equal_the_per_level_rule(b: int) -> None:
    """EAGLE-1's per-(tree, B) level masks (`EagleDrafter._static_levels`, with the parents' rows) against brute
    force — slot u (the frontier nodes of depth ≥ 1, level by level) is attended by frontier node f iff u is f or one of its ancestors — and the
    whole propose (every expand's inputs, the drafts) against the same drafter with the cache off (each level's
    mask and parents' outputs gathered per row, as for EAGLE-2), over two steps and a budget change."""
    from builder.speculative.eagle.drafter import EagleDrafter
    from builder.speculative.protocols import PrefillResult

    tree = static_tree([[0], [1], [2], [0, 0], [0, 1], [1, 0], [1, 0, 0], [0, 0, 0], [0, 1, 0], [0, 0, 0, 0]])
    runs = {}
    for cached in (True, False):
        net, calls, drafts = _RecordingNet(), [], []
        for budget in (None, 6, None):  # the full tree, a truncated one, the full tree again (its masks cached)
            rng = np.random.default_rng(b)
            d = EagleDrafter(net, tree)
            if not cached:
                d._static_levels = lambda *_: None  # type: ignore[method-assign]
            seqs = list(range(len(drafts) * b, (len(drafts) + 1) * b))
            prompts = [[int(t) for t in rng.integers(0, VOCAB, 5)] for _ in seqs]
            d.start(
                seqs,
                prompts,
                PrefillResult(np.array([p[-1] for p in prompts]), [np.ones((5, 3), np.float32)] * b, None),
            )
            d.set_budget(budget)
            drafts.append([(x.tokens.tolist(), x.paths.tolist()) for x in d.propose(seqs, [p[-1] for p in prompts])])
        runs[cached] = (net.calls, drafts)
    (calls, drafts_a), (ref_calls, drafts_b) = runs[True], runs[False]
    levels = tree.max_depth - 1  # expand calls of the full tree (its root level is the extend's); 6 nodes: 1
    assert drafts_a == drafts_b and len(calls) == len(ref_calls) == 2 * levels + 1
    assert all(np.array_equal(a[4], c[4]) for a, c in zip(calls[:levels], calls[levels + 1 :]))  # the cached masks
    for got, want in zip(calls, ref_calls):
        assert all(np.array_equal(x, y) for x, y in zip(got, want)), (got, want)
    parent = {int(i): int(p) for i, p in enumerate(tree.parents)}
    frontier = [i for i in range(1, tree.num_nodes) if i in parent.values()]  # expanded nodes of depth >= 1
    frontier.sort(key=lambda i: (int(tree.depth[i]), i))

    def ancestors_or_self(i: int) -> set[int]:
        out = set()
        while i > 0:
            out.add(i)
            i = parent[i]
        return out

    used = 0
    for call in calls[: tree.max_depth - 1]:  # the first step's levels
        mask = call[4]
        f = mask.shape[1]
        nodes, slots = frontier[used : used + f], frontier[: used + f]
        want = np.array([[u in ancestors_or_self(n) for u in slots] for n in nodes])
        assert all(np.array_equal(mask[r], want) for r in range(b))
        used += f


@pytest.mark.parametrize("b", [1, 4])
def test_step_result_chain_is_each_rows_best_path_prefix(b: int) -> None:
    """`ReusedResult.chain` (one row: slices; more: a gather and a select) against its definition row by row: the
    first accepted_len nodes of the row's best path, -1 after; and hidden follows the chain (node 0's past it)."""
    from builder.engines.results import ReusedResult

    rng, kept = np.random.default_rng(b), {}
    for _ in range(60):
        drafts = [
            Draft(np.zeros(n, np.int64), t.mask, t.depth, t.paths)
            for n in rng.integers(1, 9, b)
            for t in [tree_from_parents(_random_parents(rng, int(n)))]
        ]
        batch = DraftBatch.of(drafts, VOCAB)
        best = np.array([int(rng.integers(0, d.paths.shape[0])) for d in drafts], np.int64)
        acc = np.array([int(1 + rng.integers(0, int((d.paths[p] >= 0).sum()))) for d, p in zip(drafts, best)])
        y = {
            "output_tokens": np.zeros((b, batch.w), np.int64),
            "hidden": rng.standard_normal((b, batch.t, 3), np.float32),
        }
        res = kept.setdefault((batch.w, batch.t), ReusedResult(b, batch.w, batch.t, 3, None))  # reused, as engines do
        res.fill(y, np.arange(b), batch, best, acc, True)
        for r in range(b):
            want = [int(x) for x in drafts[r].paths[best[r], : acc[r]]] + [-1] * (batch.w - int(acc[r]))
            assert res.chain[r].tolist() == want
            assert np.array_equal(res.hidden[r], y["hidden"][r, [max(x, 0) for x in want]])
