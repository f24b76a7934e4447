"""The torch reference of tree verification (`plugins.tree_verify.reference`) against hand-worked tables
and an independent brute-force verifier written here with plain Python lists and loops. Batches mix
trees: each sequence has its own paths (padding rows [0, -1, ...], the root alone, shuffled labels)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from devtools.verify_cases import Case, compare, edge_case, paths_of, random_case
from plugins.tree_verify.contract import TEMPERATURE_EPS, Mode
from plugins.tree_verify.reference import VerifyResult, tree_verify


def _rows(res: VerifyResult) -> list[tuple[int, int, list[int]]]:
    return [(int(a), int(b), o) for a, b, o in zip(res.accepted_len, res.best_path, res.output_tokens.tolist())]


def _paths(parents: list[int]) -> torch.Tensor:  # [1, P, D+1]: one sequence's tree
    return paths_of([parents])


# ---------------------------------------------------------------- brute force, written differently


def _bf_probs(z: list[float], temperature: float, top_p: float) -> list[float]:
    """softmax(z / temperature) on the nucleus: token i stays iff the mass strictly above it < top_p."""
    m = max(z)
    e = [math.exp((x - m) / temperature) for x in z]
    p = [x / sum(e) for x in e]
    if top_p < 1:
        p = [pi if sum(pj for pj in p if pj > pi) < top_p else 0.0 for pi in p]
        p = [pi / sum(p) for pi in p]
    return p


def _bf_argmax(z: list[float]) -> int:
    best = 0
    for i in range(1, len(z)):
        if z[i] > z[best]:
            best = i
    return best


def _bf_decide(p: list[float], kids: list[int], tok: list[int], q: list[float], t: float) -> tuple[int, int]:
    """One node's decision: (accepted child or -1, bonus token if none is accepted)."""
    residual = list(p)
    for c in kids:
        a = residual[tok[c]] / q[c]
        if t < a:
            return c, -1
        t -= a
        residual[tok[c]] = 0.0
    running = 0.0
    for x, mass in enumerate(residual):
        running += mass
        if running > t:
            return -1, x
    return -1, max(x for x, mass in enumerate(residual) if mass > 0)


def _bf_row(case: Case, b: int) -> tuple[int, int, list[int]]:
    z = case.logits[b].double().tolist()
    tok, q, u = case.tokens[b].tolist(), case.draft_probs[b].tolist(), case.uniforms[b].tolist()
    paths = case.paths[b].tolist()  # this sequence's tree
    greedy = case.mode is Mode.GREEDY or float(case.temperature[b]) <= TEMPERATURE_EPS
    argmax = [_bf_argmax(row) for row in z]
    # every node's verdict on each of its children, computed independently of any walk
    kids = {
        n: sorted({p[k + 1] for p in paths for k in range(len(p) - 1) if p[k] == n and p[k + 1] >= 0})
        for n in range(len(tok))
    }
    depth = {n: k for p in paths for k, n in enumerate(p) if n >= 0}
    verdict: dict[int, tuple[int, int]] = {}
    for n in depth:
        if greedy:
            verdict[n] = (-1, argmax[n])
        else:
            p = _bf_probs(z[n], float(case.temperature[b]), float(case.top_p[b]))
            verdict[n] = _bf_decide(p, kids[n], tok, q, u[depth[n]])
    best_len, best = -1, 0
    for i, p in enumerate(paths):
        length = 0
        for k in range(1, len(p)):
            ok = p[k] >= 0 and (tok[p[k]] == argmax[p[k - 1]] if greedy else verdict[p[k - 1]][0] == p[k])
            if not ok:
                break
            length = k
        if length > best_len:
            best_len, best = length, i
    chain = paths[best][: best_len + 1]
    out = [tok[n] for n in chain[1:]] + [verdict[chain[-1]][1]]
    return len(chain), best, out + [-1] * (len(paths[0]) - len(out))


def _brute_force(case: Case) -> VerifyResult:
    rows = [_bf_row(case, b) for b in range(case.tokens.shape[0])]
    return VerifyResult(
        torch.tensor([r[0] for r in rows], dtype=torch.int32),
        torch.tensor([r[1] for r in rows], dtype=torch.int32),
        torch.tensor([r[2] for r in rows], dtype=torch.int32),
    )


@settings(max_examples=80, derandomize=True, deadline=None)
@given(
    seed=st.integers(0, 2**20),
    batch=st.integers(1, 3),
    nodes=st.integers(1, 12),
    vocab=st.integers(2, 10),
    mode=st.sampled_from(list(Mode)),
    deterministic=st.booleans(),
)
def test_reference_equals_brute_force(seed, batch, nodes, vocab, mode, deterministic):
    case = random_case(seed, batch, nodes, vocab, mode, deterministic_draft=deterministic)
    result = compare(case, _brute_force(case))
    assert not result.wrong, result.describe()


# ---------------------------------------------------------------- greedy: hand-worked tables


def test_greedy_single_node_tie_lowest_index():
    logits = torch.tensor([[[0.1, 0.7, 0.7, 0.2]]])  # [1, 1, 4]: tie between 1 and 2
    res = tree_verify(logits, torch.tensor([[5]], dtype=torch.int32), torch.tensor([[[0]]], dtype=torch.int32))
    assert _rows(res) == [(1, 0, [1])]


def test_greedy_all_rejected_and_argmax_tie():
    # root argmax: logits [1, 5, 5, 0] → token 1 (lowest of the tie); drafts 2 and 0 both rejected
    logits = torch.tensor([[[1.0, 5.0, 5.0, 0.0], [0.0] * 4, [0.0] * 4]])  # [1, 3, 4]
    tokens = torch.tensor([[9, 2, 0]], dtype=torch.int32)
    assert _rows(tree_verify(logits, tokens, _paths([-1, 0, 0]))) == [(1, 0, [1, -1])]


#            node:      0 root        1             2             3             4
_TABLE = torch.tensor([[0, 0, 3, 0], [4, 0, 0, 0], [0, 4, 0, 0], [0, 0, 0, 4], [0, 0, 4, 0]], dtype=torch.float32)
# argmax per node:       2             0             1             3             2
# paths (parents [-1, 0, 0, 1, 2]): [0, 1, 3] and [0, 2, 4]


@pytest.mark.parametrize(
    "tokens, expected",
    [
        ([7, 2, 2, 0, 1], (3, 0, [2, 0, 3])),  # both paths accept 2 nodes: the lower path index wins
        ([7, 2, 2, 1, 1], (3, 1, [2, 1, 2])),  # node 3 wrong: path 1 is longer
        ([7, 2, 3, 0, 1], (3, 0, [2, 0, 3])),  # node 2 wrong
        ([7, 1, 2, 0, 1], (3, 1, [2, 1, 2])),  # node 1 wrong
        ([7, 3, 3, 0, 1], (1, 0, [2, -1, -1])),  # all rejected: the bonus token only
    ],
)
def test_greedy_table(tokens, expected):
    res = tree_verify(_TABLE[None], torch.tensor([tokens], dtype=torch.int32), _paths([-1, 0, 0, 1, 2]))
    assert _rows(res) == [expected]


def test_greedy_perfect_and_hopeless_drafter():
    case = random_case(3, 4, 10, 16, Mode.GREEDY, hit_rate=1.0)
    res = tree_verify(case.logits, case.tokens, case.paths)
    longest = [max(int((row >= 0).sum()) for row in tree) for tree in case.paths]  # per sequence
    assert res.accepted_len.tolist() == longest  # every path accepted to its leaf
    assert len({tuple(tree.flatten().tolist()) for tree in case.paths}) > 1  # the rows' trees differ
    never = case.logits.argmin(dim=-1).to(torch.int32)  # [B, T] a token that is never the argmax
    res = tree_verify(case.logits, never, case.paths)
    assert res.accepted_len.tolist() == [1] * 4


def test_greedy_mixed_trees_table():
    # the hand-made batch of `edge_case`: five trees, one per sequence (its docstring works them out)
    assert _rows(tree_verify(*edge_case(Mode.GREEDY).inputs()[:3])) == [
        (3, 2, [3, 6, 1]),
        (1, 0, [7, -1, -1]),
        (3, 1, [5, 0, 2]),
        (3, 0, [2, 4, 0]),
        (1, 0, [3, -1, -1]),
    ]


@pytest.mark.parametrize("mode", list(Mode))
def test_each_sequence_uses_only_its_own_tree(mode):
    # a batch gives each row what that row gives alone, and a shared tree may come expanded (stride 0)
    case = random_case(5, 4, 9, 12, mode)
    whole = _rows(case.reference())
    assert whole == [row for b in range(4) for row in _rows(case.rows(b, b + 1).reference())]
    shared = random_case(6, 3, 9, 12, mode, parents=[-1, 0, 0, 1, 1, 2, 3, 3, 5])
    assert shared.paths.stride(0) == 0
    dense = tree_verify(shared.logits, shared.tokens, shared.paths.contiguous(), mode, *shared.inputs()[3:])
    assert _rows(shared.reference()) == _rows(dense)


# ---------------------------------------------------------------- rejection: hand-worked tables

_P = torch.tensor([0.1, 0.2, 0.3, 0.4]).log()  # root distribution at temperature 1
_FLAT = torch.zeros(4)  # leaves: uniform


def _rejection(tokens, u0, u1=0.1, q=(1.0, 1.0, 1.0), top_p=1.0, root=_P):
    logits = torch.stack([root, _FLAT, _FLAT])[None]  # [1, 3, 4]; root children 1 and 2 (leaves)
    res = tree_verify(
        logits,
        torch.tensor([tokens], dtype=torch.int32),
        _paths([-1, 0, 0]),
        "rejection",
        temperature=torch.ones(1),
        top_p=torch.tensor([top_p]),
        uniforms=torch.tensor([[u0, u1]]),
        draft_probs=torch.tensor([q]),
    )
    return _rows(res)[0]


@pytest.mark.parametrize(
    "u0, expected",
    [
        (0.35, (2, 0, [3, 0])),  # 0.35 < p(3) = .4: node 1 accepted; leaf bonus with u1 = .1 → token 0
        (0.50, (2, 1, [2, 0])),  # t = .1 after node 1; .1 < p(2) = .3: node 2 accepted
        (0.75, (1, 0, [0, -1])),  # t = .35 → .05; residual (.1, .2, 0, 0): token 0
        (0.95, (1, 0, [1, -1])),  # t = .55 → .25; residual cumsum .1, .3 > .25: token 1
    ],
)
def test_rejection_table_deterministic_draft(u0, expected):
    assert _rejection([9, 3, 2], u0) == expected


def test_rejection_table_draft_prob_below_one():
    # q(node 1) = .8: a = .4/.8 = .5
    assert _rejection([9, 3, 2], 0.45, q=(1.0, 0.8, 1.0)) == (2, 0, [3, 0])
    # u0 = .95: t = .45 after node 1, .15 after node 2; residual cumsum .1, .3 > .15: token 1
    assert _rejection([9, 3, 2], 0.95, q=(1.0, 0.8, 1.0)) == (1, 0, [1, -1])


def test_rejection_table_top_p():
    # top_p .65: mass above token 2 is .4 < .65 (kept), above token 1 it is .7 (dropped): p' = (0, 0, 3/7, 4/7)
    assert _rejection([9, 0, 1], 0.5, top_p=0.65) == (1, 0, [3, -1])  # drafts outside the nucleus: a = 0
    assert _rejection([9, 0, 1], 0.3, top_p=0.65) == (1, 0, [2, -1])
    assert _rejection([9, 3, 2], 0.6, top_p=0.65) == (2, 1, [2, 0])  # 0.6 ≥ 4/7, then 0.029 < 3/7
    # ties close the nucleus: a flat root keeps all 4 tokens even for top_p .3
    assert _rejection([9, 1, 2], 0.2, top_p=0.3, root=_FLAT) == (2, 0, [1, 0])
    # u0 .6: t = .35 after node 1, .1 after node 2; residual (.25, 0, 0, .25): token 0
    assert _rejection([9, 1, 2], 0.6, top_p=0.3, root=_FLAT) == (1, 0, [0, -1])


def test_rejection_repeated_sibling_token_is_never_accepted():
    # nodes 1 and 2 both draft token 3; node 1 rejected removes it, so node 2 has p = 0
    assert _rejection([9, 3, 3], 0.55) == (1, 0, [1, -1])  # t = .15: residual cumsum .1, .3 > .15 → 1


@settings(max_examples=30, derandomize=True, deadline=None)
@given(seed=st.integers(0, 2**20), nodes=st.integers(1, 12), vocab=st.integers(4, 12))
def test_zero_temperature_is_greedy(seed, nodes, vocab):
    case = random_case(seed, 2, nodes, vocab, Mode.REJECTION)
    greedy = tree_verify(case.logits, case.tokens, case.paths)
    zero = tree_verify(
        case.logits, case.tokens, case.paths, "rejection", torch.zeros(2), case.top_p, case.uniforms, case.draft_probs
    )
    assert _rows(zero) == _rows(greedy)


@settings(max_examples=30, derandomize=True, deadline=None)
@given(seed=st.integers(0, 2**20), nodes=st.integers(1, 12), vocab=st.integers(4, 12))
def test_small_temperature_converges_to_greedy(seed, nodes, vocab):
    # Logits 2 apart at temperature 1e-3 (> TEMPERATURE_EPS) make the target one-hot in fp64. With
    # distinct sibling tokens rejection then walks the greedy chain (with a repeated token greedy
    # would also search the repeat's subtree, rejection never accepts the repeat).
    gen = torch.Generator().manual_seed(seed)
    logits = torch.stack([torch.randperm(vocab, generator=gen).float() * 2 for _ in range(nodes)])[None]
    paths = random_case(seed, 1, nodes, vocab, Mode.GREEDY).paths  # [1, P, D+1]
    tokens = torch.zeros(1, nodes, dtype=torch.int32)
    siblings: dict[int, int] = {}
    edges = {(p, c) for row in paths[0].tolist() for p, c in zip(row, row[1:]) if c >= 0}
    for parent, child in sorted(edges, key=lambda e: e[1]):
        rank = siblings[parent] = siblings.get(parent, -1) + 1  # the parent's rank-th likeliest token
        tokens[0, child] = logits[0, parent].argsort(descending=True)[rank % vocab]
    cold = tree_verify(
        logits,
        tokens,
        paths,
        "rejection",
        torch.full((1,), 1e-3),
        torch.ones(1),
        torch.rand(1, paths.shape[2], generator=gen),
    )
    assert _rows(cold) == _rows(tree_verify(logits, tokens, paths))


def test_bad_inputs_raise():
    logits = torch.zeros(2, 3, 4)
    tokens = torch.zeros(2, 3, dtype=torch.int32)
    good = [[0, 1, 2], [0, -1, -1]]
    with pytest.raises(ValueError, match=r"paths\[1\]\[0\] = \[1, 2, -1\]: must start with the root"):
        tree_verify(logits, tokens, torch.tensor([good, [[1, 2, -1], [0, -1, -1]]], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"paths\[0\]: node 2 has two parents"):
        tree_verify(logits, tokens, torch.tensor([[[0, 1, 2], [0, 2, -1]], good], dtype=torch.int32))
    with pytest.raises(ValueError, match="padding must be a suffix"):
        tree_verify(logits, tokens, torch.tensor([good, [[0, -1, 2], [0, 1, -1]]], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"paths: shape \[2, 2\] has rank 2"):  # [P, D+1]: the old contract
        tree_verify(logits, tokens, torch.tensor([[0, 1], [0, 2]], dtype=torch.int32))
    with pytest.raises(ValueError, match="paths: shape"):
        tree_verify(logits, tokens, _paths([-1, 0, 0]))  # B = 1 against 2 rows of logits
    with pytest.raises(ValueError, match=r"tokens\[1\]: a node on a path"):
        tree_verify(
            logits,
            torch.tensor([[0, 1, 2], [0, -1, 0]], dtype=torch.int32),
            torch.tensor([good, [[0, 1, -1], [0, 2, -1]]], dtype=torch.int32),
        )
    # trees differ per sequence: two parents only counts within one sequence
    mixed = torch.tensor([[[0, 1, 2], [0, 1, -1]], [[0, 2, 1], [0, -1, -1]]], dtype=torch.int32)
    assert tree_verify(logits, tokens, mixed).accepted_len.tolist() == [3, 3]
    one = _paths([-1, 0, 0])
    with pytest.raises(ValueError, match="uniforms"):
        tree_verify(logits[:1], tokens[:1], one, "rejection", torch.ones(1), torch.ones(1), torch.tensor([[1.0, 0.0]]))
    with pytest.raises(ValueError, match="tokens: shape"):
        tree_verify(logits[:1], torch.zeros(2, 3, dtype=torch.int32), one)
