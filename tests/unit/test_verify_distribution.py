"""Rejection mode reproduces the target distribution (tested by distribution, not by sample).

Tree (V = 6): the root drafts tokens 2 (node 1), 4 (node 2) and 2 again (node 3, a repeat that can
never be accepted); node 1 drafts 0 and 3 (nodes 4, 5), node 2 drafts 5 (node 6). Drafts are
deterministic (q = 1). One step emits y1 and, when y1 is an accepted draft token, y2. The target
law of these first two emitted tokens is
    P(y1 alone) = p_0(y1)                   for y1 ∉ {2, 4}  (the step ends with the bonus token)
    P(y1, y2)   = p_0(y1) · p_c(y2)         for y1 = tok(c), c = node 1 or node 2
with p_n the tempered, top-p-filtered target distribution at node n (computed here independently).
Every other row of the batch holds the same tree under other node labels (`RELABEL`: node 4 of
that row's T = 8 is on no path, node 1's parent is node 5, the root's children come in another
order but the repeat still after the original), and a padding row [0, -1, -1]: per-sequence trees
must give each row the same law (the siblings' order changes the segments, not the law).

Why these bounds: N rows of one call are i.i.d. draws (independent uniforms per row).
* Pearson's χ² over the categories with expected count ≥ 5 (the others merged) has k − 1 degrees of
  freedom; we reject at α = 1e-3, the critical value from the Wilson–Hilferty approximation
  χ²_{k-1, 1-α} ≈ df (1 − 2/(9 df) + z √(2/(9 df)))³ with z = 3.09. A category of probability 0
  must never occur.
* Total variation: E[TV] ≤ ½ Σ √(p_i / N) ≤ ½ √(k / N) (Cauchy–Schwarz), and TV moves by ≤ 1/N per
  sample, so McDiarmid gives P(TV ≥ E[TV] + s) ≤ exp(−2 N s²): s = √(ln(1/δ) / (2N)), δ = 1e-3.
A correct verifier fails either check with probability ≤ 1e-3 for any seed; the seeds are fixed, so
the run is deterministic. The same checks reject a verifier that is known to be biased (the
deterministic drafts passed as q = 0.5), which shows the test has the power to see a wrong law.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from devtools.verify_cases import paths_of
from plugins.tree_verify.reference import tree_verify

PARENTS = [-1, 0, 0, 0, 1, 1, 2]
TOKENS = [9, 2, 4, 2, 0, 3, 5]
TEMPERATURE, TOP_P = 0.8, 0.9
RELABEL = [0, 5, 2, 6, 1, 7, 3]  # node n of PARENTS is node RELABEL[n] in the other tree


def _target(z: list[float]) -> list[float]:
    e = [math.exp(x / TEMPERATURE) for x in z]
    p = [x / sum(e) for x in e]
    p = [pi if sum(pj for pj in p if pj > pi) < TOP_P else 0.0 for pi in p]
    return [pi / sum(p) for pi in p]


def _law(logits: torch.Tensor) -> dict[tuple[int, int], float]:
    p = [_target(row) for row in logits.double().tolist()]
    law: dict[tuple[int, int], float] = {}
    child_of = {2: 1, 4: 2}  # y1 → the node whose logits give y2 (node 3 repeats token 2)
    for y1 in range(6):
        if y1 in child_of:
            for y2 in range(6):
                law[(y1, y2)] = p[0][y1] * p[child_of[y1]][y2]
        else:
            law[(y1, -1)] = p[0][y1]
    return law


def _sample(logits: torch.Tensor, n: int, q: float, seed: int) -> Counter:
    width = len(RELABEL) + 1  # T = 8: node 7 (first tree) and node 4 (relabelled) are on no path
    moved = [-2] * width  # the relabelled tree's parents, tokens and logits
    tokens = torch.full((2, width), -1, dtype=torch.int32)
    tokens[0, : len(TOKENS)] = torch.tensor(TOKENS)
    both = torch.zeros(2, width, logits.shape[1])  # [2, T, V]
    both[0, : len(TOKENS)] = logits
    for n_old, n_new in enumerate(RELABEL):
        moved[n_new] = -1 if PARENTS[n_old] < 0 else RELABEL[PARENTS[n_old]]
        tokens[1, n_new], both[1, n_new] = TOKENS[n_old], logits[n_old]
    trees = paths_of([PARENTS + [-2], moved])  # [2, P, D+1]
    pad = torch.tensor([[[0, -1, -1]]], dtype=torch.int32).expand(2, 1, -1)
    trees = torch.cat([trees, pad], dim=1)  # a padding row: last in the first tree, first in the other
    trees[1] = trees[1].roll(1, dims=0)
    rows = torch.arange(n) % 2  # the trees alternate over the batch
    gen = torch.Generator().manual_seed(seed)
    res = tree_verify(
        both[rows],
        tokens[rows],
        trees[rows],
        "rejection",
        torch.full((n,), TEMPERATURE),
        torch.full((n,), TOP_P),
        torch.rand(n, trees.shape[2], generator=gen),
        torch.full((n, width), q),
    )
    return Counter((row[0], row[1]) for row in res.output_tokens.tolist())


def _statistics(law: dict[tuple[int, int], float], counts: Counter, n: int) -> tuple[float, float, int, bool]:
    """(χ², TV, degrees of freedom, any sample in a zero-probability category)."""
    impossible = any(counts[c] > 0 for c, pr in law.items() if pr == 0) or any(c not in law for c in counts)
    big = [c for c, pr in law.items() if pr * n >= 5]
    small = [c for c, pr in law.items() if 0 < pr * n < 5]
    cells = [(n * law[c], counts[c]) for c in big]
    if small:
        cells.append((n * sum(law[c] for c in small), sum(counts[c] for c in small)))
    chi2 = sum((obs - exp) ** 2 / exp for exp, obs in cells)
    tv = 0.5 * sum(abs(counts[c] / n - pr) for c, pr in law.items())
    return chi2, tv, len(cells) - 1, impossible


def _chi2_critical(df: int, z: float = 3.09) -> float:
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def _logits() -> torch.Tensor:
    return torch.randn(len(TOKENS), 6, generator=torch.Generator().manual_seed(7)) * 0.8  # [T, V]


def test_rejection_follows_target_distribution():
    logits, n = _logits(), 8000
    law = _law(logits)
    assert sum(law.values()) == pytest.approx(1.0)
    chi2, tv, df, impossible = _statistics(law, _sample(logits, n, 1.0, seed=11), n)
    k = sum(pr > 0 for pr in law.values())
    tv_bound = 0.5 * math.sqrt(k / n) + math.sqrt(math.log(1e3) / (2 * n))
    assert not impossible
    assert chi2 < _chi2_critical(df), f"χ² = {chi2:.1f} ≥ {_chi2_critical(df):.1f} (df {df})"
    assert tv < tv_bound, f"TV = {tv:.4f} ≥ {tv_bound:.4f}"


def test_check_has_power_against_a_biased_verifier():
    # q = 0.5 for deterministic drafts accepts with min(1, 2p): drafted tokens come out too often
    logits, n = _logits(), 2000
    chi2, _, df, _ = _statistics(_law(logits), _sample(logits, n, 0.5, seed=12), n)
    assert chi2 > _chi2_critical(df)
