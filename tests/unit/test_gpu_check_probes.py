"""The GPU check's TensorRT probes and engine code, checked where neither TensorRT nor a GPU is (they run on a
TensorRT host): the probes' ONNX graphs and references are run through ONNX Runtime where it implements the
ONNX form (float32, int64 ids: RotaryEmbedding 23, TensorScatter 24, Attention 23; TreeVerify through its ORT
decomposition) — the references must accept ORT's answer and refuse a perturbed one —, the combo matrix is the
one the probes promise, the verdict rule, and `devtools/gpu_check/*.py` type-check strictly against
tensorrt-stubs (mypy), which also rejects a broken TensorRT call in a copy of the probes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from devtools.gpu_check import probes
from devtools.gpu_check.steps import FAIL, PASS

ort = pytest.importorskip("onnxruntime")
REPO = Path(__file__).resolve().parents[2]
MYPY_EXTRA = """
[mypy-builder.*,plugins.*,tests.*]
follow_imports = silent

[mypy-triton.*,onnx.*,onnxruntime.*,tokenizers.*,transformers.*,safetensors.*,huggingface_hub.*,pydantic.*,yaml.*]
follow_imports = skip
ignore_missing_imports = True
"""


def run_ort(combo: probes.Combo) -> dict[str, torch.Tensor]:
    sess = ort.InferenceSession(combo.model.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = sess.run(None, {n: t.numpy() for n, t in combo.feeds.items()})
    return {n: torch.from_numpy(np.asarray(o)) for n, o in zip(combo.outputs, outs)}


@pytest.mark.parametrize(
    "combos, name",
    [
        (probes.rope_combos, "onnx/int64 ids"),
        (probes.kv_update_combos, "onnx/int64/float32/separate"),
        (probes.attention_combos, "onnx/float32"),
    ],
)
def test_onnx_runtime_agrees_with_the_probe_reference_and_a_perturbed_answer_is_refused(combos, name):
    combo = next(c for c in combos() if c.name == name)
    got = run_ort(combo)
    good, err = combo.check(got)
    assert good, (name, err)
    (out,) = got
    wrong = got[out].clone()
    wrong.view(-1)[3] += 0.25 if wrong.dtype.is_floating_point else 1
    assert not combo.check({out: wrong})[0]


def test_the_treeverify_combos_check_against_the_reference_through_the_ort_decomposition():
    from plugins.tree_verify.onnx_op import decompose

    for combo in probes.treeverify_combos():
        got = run_ort(probes.Combo(combo.name, decompose(combo.model), combo.feeds, combo.outputs, combo.check))
        assert combo.check(got)[0], combo.name
        tokens = got["output_tokens"].clone()
        tokens[0, 0] += 1
        assert not combo.check({**got, "output_tokens": tokens})[0]


def test_the_probes_cover_every_form_they_promise():
    def names(fn):
        return [c.name for c in fn()]

    assert names(probes.rope_combos) == ["onnx/int32 ids", "onnx/int64 ids", "trt/int32 ids", "trt/int64 ids"]
    kv = names(probes.kv_update_combos)
    assert len(kv) == 2 * 2 * 3 * 2
    assert "trt/int32/float8_e4m3fn/in place" in kv and "onnx/int64/bfloat16/separate" in kv
    assert names(probes.attention_combos) == ["onnx/float32", "trt/float32", "onnx/bfloat16", "trt/bfloat16"]
    from onnx import AttributeProto

    attrs = {c.name: {a.name: a.type for a in c.model.graph.node[0].attribute} for c in probes.attribute_combos()}
    assert len(attrs) == 4
    assert {a["mode"] for a in attrs.values()} == {AttributeProto.INT, AttributeProto.INTS}
    assert all(a["plugin_namespace"] == AttributeProto.STRING for a in attrs.values())
    trt_nodes = [c.model.graph.node[0] for c in probes.attention_combos() if c.name.startswith("trt")]
    assert all(n.domain == "trt" and any(a.name == "TRT_decomposable" for a in n.attribute) for n in trt_nodes)


def test_verdict_records_refusals_and_fails_only_on_wrong_answers_or_nothing_working():
    ok = probes.Outcome("onnx/a", "ok", max_err=0.0)
    refused = probes.Outcome("trt/b", "parse", "unsupported")
    wrong = probes.Outcome("trt/c", "wrong", "differs", 1.0)
    v = probes.verdict("X", [ok, refused])
    assert v.status == PASS and v.reason == "accepted: onnx/a; refused: trt/b (parse)"
    assert len(v.details["outcomes"]) == 2
    assert probes.verdict("X", [ok, wrong]).status == FAIL
    assert probes.verdict("X", [refused]).status == FAIL and "no form works" in probes.verdict("X", [refused]).reason
    assert probes.verdict("X", [ok], needed=lambda o: o.combo.startswith("TreeVerify")).status == FAIL


@pytest.fixture(scope="module")
def mypy_work(tmp_path_factory):
    pytest.importorskip("mypy")
    from plugins.tree_verify import typecheck

    try:
        typecheck._installed_stubs()
    except FileNotFoundError as err:
        pytest.skip(str(err))
    return tmp_path_factory.mktemp("mypy_gpu_check")


def test_the_gpu_check_type_checks_strictly_against_tensorrt_stubs(mypy_work):
    from plugins.tree_verify.typecheck import run_mypy

    files = sorted((REPO / "devtools" / "gpu_check").glob("*.py"))
    result = run_mypy(files, mypy_work, MYPY_EXTRA)
    assert result.returncode == 0, result.stdout + result.stderr
    broken = mypy_work / "probes_broken.py"
    source = (REPO / "devtools" / "gpu_check" / "probes.py").read_text()
    right = "context.execute_async_v3(int(stream.cuda_stream))"
    assert right in source
    broken.write_text(source.replace(right, "context.execute_async_v3()"))
    result = run_mypy([broken], mypy_work, MYPY_EXTRA)
    assert result.returncode == 1 and 'Missing positional argument "stream_handle"' in result.stdout, result.stdout


def test_the_garbage_indices_case_runs_through_the_kernel_without_a_fault_here():
    """The `kernel-garbage-indices` step's inputs, here through the kernel under TRITON_INTERPRET (the CPU face,
    tests/conftest.py): arbitrary int32 tokens/paths and NaN/inf logits give in-range outputs, no exception."""
    pytest.importorskip("triton")
    import os

    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("a GPU host: the step itself runs there")
    from devtools.gpu_check.kernel import garbage_case
    from plugins.tree_verify.contract import Mode
    from plugins.tree_verify.kernel import tree_verify_triton

    for mode in Mode:
        case = garbage_case(mode, 0, device="cpu")
        assert case.tokens.min() < -(2**20) and case.paths.max() > 2**20 and case.logits.isnan().any()
        out = tree_verify_triton(*case.inputs()[:3], case.mode, *case.inputs()[3:])
        width = case.paths.shape[2]
        assert ((out.accepted_len >= 1) & (out.accepted_len <= width)).all(), out.accepted_len


def test_the_int_attribute_expectation_follows_the_recorded_tensorrt_rule():
    assert probes.int_attribute_expected("10.15.1.29", "2.5.2") is False  # int() of a [1] array under NumPy >= 2.4
    assert probes.int_attribute_expected("10.15.1.29", "1.26.4") is True  # deprecated, still works
    assert probes.int_attribute_expected("11.4.0.106", "2.5.2") is True  # 11.4 unwraps 1-element fields
    assert probes.int_attribute_expected("9.9.9", "2.5.2") is None  # a release nobody read
