"""The Triton kernel face against the reference, on CPU tensors through Triton's interpreter.

The interpreter runs each program in Python (seconds per call), so the default cases are small:
blocks of 8 over V and up to 3 chunks per node still exercise every merge in the kernel. Random
cases give each sequence its own tree (padded to common T, P, D+1); `edge_case` is a hand-made
batch of five trees (padding rows, the root alone, ties, all rejected). A wider sweep is marked slow.

Every launch here runs under `triton_bounds.checked_addresses`: a load or store outside the tensors it was
given fails the test (on a GPU it would be an illegal address). Untrusted inputs — what TensorRT feeds a
plugin while it times tactics — get garbage paths and tokens (random int32 over the whole range, values
just outside [0, T) and [0, V), small values that give a node two parents): no out-of-range access, outputs
in bounds, and equal to the reference's `untrusted=True` reading of the same inputs (the contract's
"Untrusted index inputs"); garbage floats (NaN, ±inf, negatives) as well: no fault, outputs in bounds.
"""

from __future__ import annotations

import importlib
import os
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from devtools.verify_cases import Case, compare, edge_case, random_case
from plugins.tree_verify.contract import Mode
from plugins.tree_verify.reference import tree_verify
from tests.unit.triton_bounds import checked_addresses


def _import_kernel_interpreted():
    """The kernel module with Triton's interpreter on. TRITON_INTERPRET is read when triton (and
    the @triton.jit kernels) are imported; if another test imported triton first, in compiled mode,
    drop triton's Python modules — not its C extension, which cannot load twice — and re-import."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        os.environ["TRITON_INTERPRET"] = "1"
        stale = [n for n in sys.modules if n.split(".")[0] == "triton" and not n.startswith("triton._C")]
        for name in [*stale, "plugins.tree_verify.kernel"]:
            sys.modules.pop(name, None)
    try:
        return importlib.import_module("plugins.tree_verify.kernel")
    except ImportError:
        pytest.skip("triton is not installed", allow_module_level=True)


kernel = _import_kernel_interpreted()


def _run(case, **launch):
    with checked_addresses() as launches:
        out = kernel.tree_verify_triton(*case.inputs()[:3], case.mode, *case.inputs()[3:], **launch)
    assert launches == ["_partials_kernel", "_node_stats_kernel", "_verify_kernel"]
    return out


def _check(seed, batch, nodes, vocab, mode, dtype, split, deterministic):
    case = random_case(seed, batch, nodes, vocab, mode, dtype, deterministic_draft=deterministic)
    result = compare(case, _run(case, block_v=8, split=split))
    assert not result.wrong, result.describe()


@settings(max_examples=8, derandomize=True, deadline=None)
@given(
    seed=st.integers(0, 2**20),
    batch=st.integers(1, 3),
    nodes=st.integers(1, 7),
    vocab=st.integers(2, 16),
    mode=st.sampled_from(list(Mode)),
    dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
    split=st.integers(1, 2),
    deterministic=st.booleans(),
)
def test_kernel_matches_reference(seed, batch, nodes, vocab, mode, dtype, split, deterministic):
    _check(seed, batch, nodes, vocab, mode, dtype, split, deterministic)


@pytest.mark.parametrize(
    "seed, mode, dtype, split",
    [
        (11, Mode.REJECTION, torch.float32, 3),  # top-p search, q < 1, three chunks per node
        (12, Mode.REJECTION, torch.bfloat16, 1),
        (13, Mode.GREEDY, torch.float16, 2),
    ],
)
def test_kernel_fixed_cases(seed, mode, dtype, split):
    _check(seed, 2, 8, 24, mode, dtype, split, deterministic=seed % 2 == 0)


@pytest.mark.parametrize("mode", list(Mode))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernel_mixed_trees_edge_case(mode, dtype):
    case = edge_case(mode, dtype)
    got = _run(case, block_v=4, split=2)
    assert [tuple(r) for r in got.output_tokens.tolist()] == [tuple(r) for r in case.reference().output_tokens.tolist()]
    assert not compare(case, got).wrong


@pytest.mark.parametrize("mode", list(Mode))
def test_kernel_shared_tree_any_strides(mode):
    # one tree for the batch as a stride-0 expansion (read in place), and a transposed copy (made contiguous)
    case = random_case(21, 3, 9, 16, mode, parents=[-1, 0, 0, 1, 1, 2, 3, 3, 5])
    assert case.paths.stride(0) == 0
    assert not compare(case, _run(case, block_v=8)).wrong
    case.paths = case.paths.contiguous().transpose(1, 2).contiguous().transpose(1, 2)
    assert not case.paths[0].is_contiguous()
    assert not compare(case, _run(case, block_v=8)).wrong


def test_kernel_argmax_ties_across_blocks_and_chunks():
    # the maximum 3.0 sits at ids 5, 13 and 21: three blocks of 8, two chunks; lowest id wins
    logits = torch.zeros(1, 2, 24)
    logits[0, 0, [5, 13, 21]] = 3.0
    logits[0, 1, [13, 21]] = 3.0
    paths = torch.tensor([[[0, 1]]], dtype=torch.int32)
    tokens = torch.tensor([[0, 5]], dtype=torch.int32)
    with checked_addresses():
        res = kernel.tree_verify_triton(logits, tokens, paths, block_v=8, split=2)
    assert res.accepted_len.tolist() == [2] and res.output_tokens.tolist() == [[5, 13]]


def test_kernel_rejects_contract_violations():
    with pytest.raises(ValueError, match="tokens: dtype int64"):
        kernel.tree_verify_triton(
            torch.zeros(1, 1, 4), torch.zeros(1, 1, dtype=torch.int64), torch.zeros(1, 1, 1, dtype=torch.int32)
        )
    with pytest.raises(ValueError, match="paths: shape \\[1, 1\\] has rank 2"):  # one tree per sequence
        kernel.tree_verify_triton(
            torch.zeros(1, 1, 4), torch.zeros(1, 1, dtype=torch.int32), torch.zeros(1, 1, dtype=torch.int32)
        )


# -- untrusted inputs (contract.py, "Untrusted index inputs") --------------------------------------------------


class UntrustedCase(Case):
    """A case whose oracle is the reference's reading of out-of-contract index inputs."""

    def reference(self):
        return tree_verify(*self.inputs()[:3], self.mode, *self.inputs()[3:], untrusted=True)


def _garbage(values: torch.Tensor, share: float, limit: int, gen: torch.Generator) -> torch.Tensor:
    """values with about `share` of the entries replaced: by any int32, by a value just outside [0, limit)
    (or at its edges), or by a small value in [-3, limit + 3) (a node under another parent, the root again)."""
    i32 = torch.iinfo(torch.int32)
    near = torch.tensor([i32.min, i32.max, -(2**20), -limit, -2, -1, 0, limit - 1, limit, limit + 1, 2**20])
    kind = torch.randint(0, 3, values.shape, generator=gen)
    anything = torch.randint(i32.min, i32.max, values.shape, generator=gen, dtype=torch.int64)
    edge = near[torch.randint(0, len(near), values.shape, generator=gen)]
    small = torch.randint(-3, limit + 3, values.shape, generator=gen)
    junk = torch.where(kind == 0, anything, torch.where(kind == 1, edge, small))
    hit = torch.rand(values.shape, generator=gen) < share
    return torch.where(hit, junk, values.long()).to(torch.int32)


def _untrusted_case(seed: int, mode: Mode, batch: int = 3, nodes: int = 8, vocab: int = 24) -> UntrustedCase:
    base = random_case(seed, batch, nodes, vocab, mode, hit_rate=0.8)
    gen = torch.Generator().manual_seed(seed + 1)
    paths = _garbage(base.paths.contiguous(), 0.3, nodes, gen)  # [B, P, D+1]
    tokens = _garbage(base.tokens, 0.3, vocab, gen)  # [B, T]
    return UntrustedCase(**{**vars(base), "paths": paths, "tokens": tokens})


def _assert_in_bounds(case: Case, got) -> None:
    """The outputs the contract promises for any inputs (contract.py, "Untrusted index inputs")."""
    b, t, v = case.logits.shape
    p, w = case.paths.shape[1:]
    for i in range(b):
        n = int(got.accepted_len[i])
        best = int(got.best_path[i])
        assert 1 <= n <= w and 0 <= best < p, (i, n, best)
        out = got.output_tokens[i].tolist()
        assert all(0 <= x < v for x in out[:n]) and out[n:] == [-1] * (w - n), (i, out)
        assert all(1 <= x < t for x in case.paths[i, best, 1:n].tolist()), (i, case.paths[i, best].tolist())


@pytest.mark.parametrize("seed", [31, 32, 33])
@pytest.mark.parametrize("mode", list(Mode))
def test_kernel_garbage_indices_never_fault_and_read_as_the_contract_says(seed, mode):
    case = _untrusted_case(seed, mode)
    assert ((case.paths < -1) | (case.paths >= 8)).any() and ((case.tokens < 0) | (case.tokens >= 24)).any()
    with pytest.raises(ValueError):  # the strict reference refuses these inputs ...
        tree_verify(*case.inputs()[:3], case.mode, *case.inputs()[3:])
    got = _run(case, block_v=8, split=2)  # ... the kernel reads them (under the address check)
    _assert_in_bounds(case, got)
    result = compare(case, got)
    assert not result.wrong, result.describe()


def test_kernel_untrusted_indices_by_hand():
    """Greedy, T = 4, V = 6; the argmax is 2 at node 0, 3 at node 1, 4 at node 2, 1 at node 3 in every row.
    row 0  paths [[77, 1, 2, 3], pad]: column 0 reads as the root; node 3's token 6 = V matches nothing:
           (3, 0, [2, 3, 4, -1])
    row 1  paths [[0, -5, 1, 2], [0, 1, 4, 2]]: -5 ends row 0 at the root, node 4 = T ends row 1 after
           node 1: (2, 1, [2, 3, -1, -1])
    row 2  paths [[0, 1, 2, 3], [0, 2, 0, INT32_MAX]]: node 1's token -7 matches nothing; node 2 also sits
           under the root (two parents: row 1 is followed on its own) and the root again ends row 1:
           (2, 1, [2, 4, -1, -1])"""
    logits = torch.zeros(3, 4, 6)
    logits[:, [0, 1, 2, 3], [2, 3, 4, 1]] = 1.0
    tokens = torch.tensor([[0, 2, 3, 6], [0, 2, 3, 1], [0, -7, 2, 3]], dtype=torch.int32)
    paths = torch.tensor(
        [[[77, 1, 2, 3], [0, -1, -1, -1]], [[0, -5, 1, 2], [0, 1, 4, 2]], [[0, 1, 2, 3], [0, 2, 0, 2**31 - 1]]],
        dtype=torch.int32,
    )
    want = ([3, 2, 2], [0, 1, 1], [[2, 3, 4, -1], [2, 3, -1, -1], [2, 4, -1, -1]])
    ref = tree_verify(logits, tokens, paths, untrusted=True)
    with checked_addresses():
        got = kernel.tree_verify_triton(logits, tokens, paths, block_v=4)
    for res in (ref, got):
        assert (res.accepted_len.tolist(), res.best_path.tolist(), res.output_tokens.tolist()) == want


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy on inf / NaN inside the interpreter
@pytest.mark.parametrize("mode", list(Mode))
def test_kernel_garbage_floats_never_fault(mode):
    case = _untrusted_case(41, mode)
    gen = torch.Generator().manual_seed(42)
    odd = torch.tensor([float("nan"), float("inf"), float("-inf"), -1.0, 0.0, 1e-30, 2.0, 1e30])
    pick = lambda shape: odd[torch.randint(0, len(odd), shape, generator=gen)]  # noqa: E731
    # an all -inf row and scattered odd values (not a whole NaN block: the interpreter's argmax is NumPy's
    # nanargmax, which raises on one — an interpreter limit, not a kernel fault)
    case.logits[1, 0] = float("-inf")
    case.logits[2] = torch.where(
        torch.rand(case.logits[2].shape, generator=gen) < 0.2, pick(case.logits[2].shape), case.logits[2]
    )
    case.temperature, case.top_p = pick(case.temperature.shape), pick(case.top_p.shape)
    case.uniforms, case.draft_probs = pick(case.uniforms.shape), pick(case.draft_probs.shape)
    _assert_in_bounds(case, _run(case, block_v=8, split=2))


def test_the_address_check_catches_an_out_of_range_read():
    """The checker itself can fail: a kernel that indexes by an input value, unchecked."""
    import triton
    import triton.language as tl

    @triton.jit
    def gather(x_ptr, idx_ptr, out_ptr):
        tl.store(out_ptr, tl.load(x_ptr + tl.load(idx_ptr)))

    x, out = torch.arange(8, dtype=torch.float32), torch.zeros(1)
    with checked_addresses():
        gather[(1,)](x, torch.tensor([7], dtype=torch.int32), out)
        assert float(out) == 7.0
        with pytest.raises(Exception, match="OutOfBounds"):
            gather[(1,)](x, torch.tensor([8], dtype=torch.int32), out)


@pytest.mark.slow
@settings(max_examples=60, derandomize=True, deadline=None)
@given(
    seed=st.integers(0, 2**20),
    batch=st.integers(1, 4),
    nodes=st.integers(1, 16),
    vocab=st.integers(2, 64),
    mode=st.sampled_from(list(Mode)),
    dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
    split=st.integers(1, 4),
    deterministic=st.booleans(),
)
def test_kernel_matches_reference_wide(seed, batch, nodes, vocab, mode, dtype, split, deterministic):
    _check(seed, batch, nodes, vocab, mode, dtype, split, deterministic)
