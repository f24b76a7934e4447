"""Rejection verification inside the full decoding loop reproduces the target's distribution.

Why this bound: on a vocabulary of 8 the exact law of the first two generated tokens is computable
by enumerating all 64 continuations with the plain reference model (softmax(logits / T)). N = 3000
runs of the speculative loop give counts whose Pearson χ² statistic against that law follows χ²(k-1)
when the loop is exact (cells with expected count < 5 are merged). We reject at p < 1e-4, so a
correct loop fails this test about once in 10,000 runs (the seeds are fixed, so in practice never),
while the same check does reject samples drawn at a wrong temperature (shown below) — the test can
fail.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from builder.engines.torch_engine import TorchEngine
from builder.model.llama import causal_mask
from builder.model.loader import load_model
from builder.speculative.decoding import generate
from builder.speculative.lookahead.drafter import LookaheadDrafter
from builder.speculative.medusa.drafter import MedusaDrafter
from builder.speculative.protocols import Sampling
from builder.speculative.tree import tree_from_choices
from tests.unit.speculative_models import make_hf_llama, random_medusa

V, N, TEMP = 8, 3000, 1.0
PROMPT = [1, 5, 3]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = make_hf_llama(
        tmp_path_factory.mktemp("v8") / "m", vocab=V, hidden=32, layers=1, heads=4, kv_heads=2, std=0.5, seed=7
    )
    return load_model(path)


def last_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids]), torch.arange(len(ids))[None], causal_mask(len(ids)))[0][0, -1]


def exact_law(model, temp: float) -> dict[tuple[int, int], float]:
    p1 = torch.softmax(last_logits(model, PROMPT).double() / temp, -1)
    law = {}
    for a in range(V):
        p2 = torch.softmax(last_logits(model, PROMPT + [a]).double() / temp, -1)
        for b in range(V):
            law[(a, b)] = float(p1[a] * p2[b])
    return law


def chi2_pvalue(counts: Counter, law: dict, n: int) -> float:
    cells = sorted(law, key=law.get, reverse=True)
    stat, k, merged_e, merged_o = 0.0, 0, 0.0, 0
    for c in cells:
        e = law[c] * n
        if e >= 5:
            stat += (counts[c] - e) ** 2 / e
            k += 1
        else:
            merged_e += e
            merged_o += counts[c]
    if merged_e > 0:
        stat += (merged_o - merged_e) ** 2 / merged_e
        k += 1
    df = k - 1
    # Wilson–Hilferty: (χ²/df)^(1/3) is ~normal(1 - 2/(9df), 2/(9df))
    z = ((stat / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))
    return 0.5 * math.erfc(z / math.sqrt(2))


def sample(engine, make_drafter, temp: float) -> Counter:
    counts = Counter()
    for seed in range(N):
        g = generate(engine, PROMPT, 2, make_drafter(), Sampling(temperature=temp, top_p=1.0, seed=seed))
        counts[tuple(g.token_ids)] += 1
    return counts


@pytest.mark.parametrize("kind", ["torch", "onnxruntime"])
@pytest.mark.parametrize("method", ["none", "medusa", "lookahead"])
def test_loop_samples_follow_the_target(model, method, kind, tmp_path):
    """The torch reference verifies with plugins.tree_verify.reference; the ONNX Runtime engine runs the
    decomposed TreeVerify (rejection graph) inside its step graph: both must reproduce the target."""
    from devtools.ort_engines import target_engine

    tree = tree_from_choices([[0], [1], [2], [0, 0], [0, 1], [1, 0]])
    medusa = dict(medusa=random_medusa(model, num_heads=2, std=0.5), medusa_topk=3) if method == "medusa" else {}
    if kind == "torch":
        engine = TorchEngine(model, max_seq_len=64, **medusa)
    else:
        engine = target_engine(model, tmp_path, max_seq_len=32, max_nodes=16, **medusa)
    make = {
        "none": lambda: None,
        "medusa": lambda: MedusaDrafter(tree),
        "lookahead": lambda: LookaheadDrafter(2, 3, 2),
    }[method]
    counts = sample(engine, make, TEMP)
    p = chi2_pvalue(counts, exact_law(model, TEMP), N)
    assert p > 1e-4, f"{method}: samples do not follow the target (χ² p = {p:.2e})"


def test_the_check_rejects_a_wrong_distribution(model):
    counts = sample(TorchEngine(model, max_seq_len=64), lambda: None, 0.6)  # drawn at temperature 0.6 ...
    assert chi2_pvalue(counts, exact_law(model, TEMP), N) < 1e-4  # ... compared against temperature 1.0
