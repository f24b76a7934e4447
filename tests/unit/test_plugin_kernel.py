"""The Triton kernel face against the reference, on CPU tensors through Triton's interpreter.

The interpreter runs each program in Python (seconds per call), so the default cases are small:
blocks of 8 over V and up to 3 chunks per node still exercise every merge in the kernel. Random
cases give each sequence its own tree (padded to common T, P, D+1); `edge_case` is a hand-made
batch of five trees (padding rows, the root alone, ties, all rejected). A wider sweep is marked slow.
"""

from __future__ import annotations

import importlib
import os
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from plugins.tree_verify.contract import Mode
from plugins.verify_checks.cases import compare, edge_case, random_case


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
    return kernel.tree_verify_triton(*case.inputs()[:3], case.mode, *case.inputs()[3:], **launch)


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
    res = kernel.tree_verify_triton(logits, tokens, paths, block_v=8, split=2)
    assert res.accepted_len.tolist() == [2] and res.output_tokens.tolist() == [[5, 13]]


def test_kernel_rejects_contract_violations():
    with pytest.raises(ValueError, match="tokens: dtype int64"):
        kernel.tree_verify_triton(torch.zeros(1, 1, 4), torch.zeros(1, 1, dtype=torch.int64),
                                  torch.zeros(1, 1, 1, dtype=torch.int32))  # fmt: skip
    with pytest.raises(ValueError, match="paths: shape \\[1, 1\\] has rank 2"):  # one tree per sequence
        kernel.tree_verify_triton(torch.zeros(1, 1, 4), torch.zeros(1, 1, dtype=torch.int32),
                                  torch.zeros(1, 1, dtype=torch.int32))  # fmt: skip


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
