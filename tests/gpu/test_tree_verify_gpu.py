"""tree_verify on a GPU: the Triton kernel (and the TensorRT plugin, when installed) against the
reference at the full Llama 3 vocabulary, with one tree shared by the batch (stride-0 paths) and
with one tree per sequence. Skipped without CUDA; run with `pytest -m gpu tests/gpu`."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)
pytest.importorskip("triton")

from devtools.gpu_check import engines as trt_check  # noqa: E402
from devtools.gpu_check import kernel as gpu_check  # noqa: E402
from devtools.verify_cases import compare, edge_case  # noqa: E402
from plugins.tree_verify.contract import Mode  # noqa: E402

VOCAB = 128256


@pytest.mark.parametrize("mode, top_p_one", [(Mode.GREEDY, True), (Mode.REJECTION, True), (Mode.REJECTION, False)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("own_trees", [False, True])
def test_kernel_matches_reference_full_vocab(mode, top_p_one, dtype, own_trees):
    case = gpu_check.make_case(mode, 4, VOCAB, dtype, top_p_one, own_trees)
    assert (case.paths.stride(0) == 0) != own_trees
    row = gpu_check.check_kernel(case, mode.name.lower(), copy_gbps=1.0)
    assert row.wrong == 0 and row.rows_ok + row.near_ties == 4


@pytest.mark.parametrize("mode", list(Mode))
def test_kernel_mixed_trees_edge_case(mode):
    from plugins.tree_verify.kernel import tree_verify_triton

    case = edge_case(mode).to("cuda")
    got = tree_verify_triton(*case.inputs()[:3], case.mode, *case.inputs()[3:])
    assert not compare(case, got).wrong


@pytest.mark.parametrize("mode", list(Mode))
def test_tensorrt_plugin_matches_reference(mode):
    if not trt_check.tensorrt_available():
        pytest.skip("tensorrt with tensorrt.plugin is not installed")
    for own_trees in (False, True):
        case = gpu_check.make_case(mode, 2, VOCAB, torch.bfloat16, False, own_trees)
        assert trt_check.check_tensorrt(case, mode.name.lower()).wrong == 0
