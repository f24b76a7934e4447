"""The TensorRT face's impl body (`plugins.tree_verify.trt_plugin`, `@trtp.impl`) called as TensorRT's
`tensorrt.plugin` calls it at enqueue — on a CUDA device, on an external stream — with `tensorrt` and
`tensorrt.plugin` stood in for (tests/unit/test_plugin_trt.py's FakeTensorRT records the registered functions;
the borrowed GPU machines have no TensorRT). Nothing here claims TensorRT ran.

The call follows TensorRT's own `_TemplatePlugin.enqueue` (tensorrt_bindings/plugin/_plugin_class.py, NVIDIA/
TensorRT@17003e43 python/packaging/bindings_wheel/tensorrt/plugin/): impl(*input tensors, *attribute values,
[output tensors], stream=<cudaStream_t as int>). The stand-in tensors are what `tensorrt.plugin.Tensor` is
there (_tensor.py): data_ptr, dtype, shape, strides in elements, and a __cuda_array_interface__ that carries the
enqueue stream and refuses BF16 (so the impl's bf16 path is the one TensorRT forces). The attribute value is the
form tensorrt.plugin hands an impl of that annotation: an int for `mode: int`, the parser's 1-element array
(int32 or int64) for an array annotation.

Checked: outputs equal the reference (`devtools.verify_cases.compare`); and the work is ordered on the
given stream — that stream is first held up by a ~50 ms GPU sleep, the impl is called (after a warm-up call,
so no compilation or allocation synchronises the host), and a copy of the outputs on an independent stream
right after it still finds the poisoned values (the kernels wait behind the sleep, on that stream); after the
stream synchronises they are right. Skipped without CUDA (`pytest -m gpu tests/gpu`; scripts/gpu_check.sh step
plugin-impl-stream).
"""

from __future__ import annotations

import inspect
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)
pytest.importorskip("triton")

from devtools.verify_cases import compare, random_case  # noqa: E402
from plugins.tree_verify import trt_plugin  # noqa: E402
from plugins.tree_verify.contract import PLUGIN_ID, Mode  # noqa: E402
from plugins.tree_verify.reference import VerifyResult  # noqa: E402
from plugins.tree_verify.trt_attrs import decode_field, mode_field  # noqa: E402
from tests.unit.test_plugin_trt import FakeTensorRT  # noqa: E402

TRT_NAMES = {torch.float32: "FLOAT", torch.float16: "HALF", torch.bfloat16: "BF16", torch.int32: "INT32"}
SLEEP_CYCLES = 100_000_000  # ~50 ms at ~2 GHz


class StandInTensor:
    """What tensorrt.plugin.Tensor is to an impl (module docstring), over a torch CUDA tensor."""

    def __init__(self, x: torch.Tensor, stream: int) -> None:
        self._x, self._stream = x, stream
        self.data_ptr = int(x.data_ptr())
        self.dtype = TRT_NAMES[x.dtype]
        self.shape = tuple(x.shape)
        self.strides = tuple(x.stride())  # in elements, as TensorRT passes them
        self.ndim = x.dim()

    @property
    def __cuda_array_interface__(self) -> dict:
        if self.dtype == "BF16":
            raise ValueError("Handling DataType.BF16 via '__cuda_array_interface__' is not supported")
        size = self._x.element_size()
        return {
            "shape": self.shape,
            "typestr": np.dtype(str(self._x.dtype).removeprefix("torch.")).str,
            "stream": self._stream,
            "version": 3,
            "data": (self.data_ptr, False),
            "strides": tuple(s * size for s in self.strides),
        }


@pytest.fixture
def impl(monkeypatch):
    fake = FakeTensorRT()
    fake.trt.float32, fake.trt.float16 = "FLOAT", "HALF"
    monkeypatch.setitem(sys.modules, "tensorrt", fake.trt)
    monkeypatch.setitem(sys.modules, "tensorrt.plugin", fake.plugin)
    monkeypatch.setattr(trt_plugin, "_registered", [])
    trt_plugin.register()
    return fake.registered[f"impl {PLUGIN_ID}"]


def attribute_value(fn, mode: Mode):
    """What tensorrt.plugin passes this impl for TreeVerify's `mode`: the parser's field data (`mode_field`)
    decoded by the impl's annotation as TensorRT's creator does (`decode_field`)."""
    annotation = inspect.signature(fn).parameters["mode"].annotation
    return decode_field(annotation, mode_field(mode))


def poisoned(case) -> list[torch.Tensor]:
    """Output buffers [B], [B], [B, D+1] int32 holding -7 (no output value is ever -7)."""
    b, w = case.tokens.shape[0], case.paths.shape[2]
    return [torch.full(shape, -7, dtype=torch.int32, device="cuda") for shape in ((b,), (b,), (b, w))]


def enqueue(fn, case, mode_value, outs: list[torch.Tensor], stream: torch.cuda.Stream) -> None:
    """impl(*inputs, *attributes, [outputs], stream=...) as TensorRT's enqueue calls it."""
    handle = int(stream.cuda_stream)
    fn(
        *[StandInTensor(x, handle) for x in case.inputs()],
        mode_value,
        [StandInTensor(o, handle) for o in outs],
        stream=handle,
    )


@pytest.mark.parametrize("own_trees", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("mode", list(Mode))
def test_impl_body_on_an_external_stream_matches_the_reference(impl, mode, dtype, own_trees):
    parents = None if own_trees else [-1, 0, 0, 1, 1, 2, 3, 3]  # one tree shared by the batch, or one per sequence
    case = random_case(11, 3, 8, 4096, mode, dtype, parents=parents).to("cuda")
    attr = attribute_value(impl, mode)
    stream = torch.cuda.Stream()
    enqueue(impl, case, attr, poisoned(case), stream)  # warm-up: compilation and allocation happen here
    stream.synchronize()
    outs = poisoned(case)
    torch.cuda.synchronize()  # inputs and poisoned outputs in place before the "enqueue"
    with torch.cuda.stream(stream):
        torch.cuda._sleep(SLEEP_CYCLES)  # holds up `stream` only
    enqueue(impl, case, attr, outs, stream)
    busy = not stream.query()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        early = [o.to("cpu") for o in outs]  # a copy that does not wait for `stream`
    assert busy, "the stream was idle right after the impl returned: something synchronised the host"
    assert all((e == -7).all() for e in early), "outputs were written before the stream's earlier work ended"
    stream.synchronize()
    result = compare(case, VerifyResult(*outs))
    assert not result.wrong, result.describe()
