"""The TensorRT plugin's registration, checked on a machine without TensorRT.

The GPU run is `scripts/gpu_check.sh`. Here `FakeTensorRT` stands in for `tensorrt` and
`tensorrt.plugin`: it records what `trt_plugin.register()` registers and applies the signature
rules TensorRT's own decorators enforce (tensorrt_bindings/plugin/_validate.py: tensor arguments
first, then attributes; impl = tensors, attributes, outputs, stream; autotune = tensors, outputs),
so a drift from the contract fails here rather than on a GPU host. It runs no kernel.
"""

from __future__ import annotations

import inspect
import sys
import types
import typing

import pytest

from plugins.tree_verify import trt_plugin
from plugins.tree_verify.contract import INPUT_NAMES, OUTPUTS, PLUGIN_ID
from plugins.tree_verify.trt_attrs import ModeAttr, mode_field


class FakeTensorRT:
    """Fake `tensorrt` + `tensorrt.plugin` modules (no GPU, no TensorRT): records registrations."""

    def __init__(self) -> None:
        self.trt = types.ModuleType("tensorrt")
        self.trt.int32, self.trt.bfloat16 = "INT32", "BF16"
        self.plugin = types.ModuleType("tensorrt.plugin")
        self.registered: dict[str, typing.Callable] = {}
        plugin = self.plugin

        class TensorDesc:
            def __init__(self, shape_expr=(), dtype=None):
                self.shape_expr, self.dtype = tuple(shape_expr), dtype

        class Tensor:
            pass

        class AutoTuneCombination:
            def __init__(self, io_types=None, layouts=None, tactics=None):
                self.io_types, self.layouts = io_types, layouts

        plugin.TensorDesc, plugin.Tensor, plugin.AutoTuneCombination = TensorDesc, Tensor, AutoTuneCombination
        plugin.from_shape_expr = lambda shape_expr, dtype: TensorDesc(shape_expr, dtype)
        for kind in ("register", "autotune", "impl"):
            setattr(plugin, kind, self._decorator(kind))
        self.trt.plugin = plugin

    def _decorator(self, kind: str):
        def decorate(plugin_id: str):
            def keep(fn):
                self.registered[f"{kind} {plugin_id}"] = fn
                return fn

            return keep

        return decorate


@pytest.fixture
def fake_trt(monkeypatch):
    fake = FakeTensorRT()
    monkeypatch.setitem(sys.modules, "tensorrt", fake.trt)
    monkeypatch.setitem(sys.modules, "tensorrt.plugin", fake.plugin)
    monkeypatch.setattr(trt_plugin, "_registered", [])
    trt_plugin.register()
    return fake


def test_registration_follows_the_contract(fake_trt):
    shapes = fake_trt.registered[f"register {PLUGIN_ID}"]
    sig = inspect.signature(shapes)
    assert list(sig.parameters) == [*INPUT_NAMES, "mode"]
    assert all(p.annotation is fake_trt.plugin.TensorDesc for p in list(sig.parameters.values())[:-1])
    # an int32 array, not int: the parser's INT attribute is a 1-element array, and int() of it fails on NumPy
    # >= 2.4 (tests/unit/test_plugin_trt_attrs.py); a real object, since TensorRT inspects it at run time
    assert sig.parameters["mode"].annotation is ModeAttr
    assert typing.get_args(sig.return_annotation) == (fake_trt.plugin.TensorDesc,) * len(OUTPUTS)
    impl = inspect.signature(fake_trt.registered[f"impl {PLUGIN_ID}"])
    assert list(impl.parameters) == [*INPUT_NAMES, "mode", "outputs", "stream"]
    assert impl.parameters["mode"].annotation == ModeAttr  # TensorRT requires the registration's annotation
    autotune = inspect.signature(fake_trt.registered[f"autotune {PLUGIN_ID}"])
    assert list(autotune.parameters) == [*INPUT_NAMES, "outputs"]


def test_output_shapes_and_formats(fake_trt):
    desc = fake_trt.plugin.TensorDesc
    dims = {
        "logits": ("B", "T", "V"),
        "tokens": ("B", "T"),
        "paths": ("B", "P", "W"),
        "uniforms": ("B", "W"),
        "draft_probs": ("B", "T"),
        "temperature": ("B",),
        "top_p": ("B",),
    }
    outs = fake_trt.registered[f"register {PLUGIN_ID}"](*(desc(dims[n], "X") for n in INPUT_NAMES), mode=mode_field(1))
    assert [(o.shape_expr, o.dtype) for o in outs] == [(("B",), "INT32"), (("B",), "INT32"), (("B", "W"), "INT32")]
    (combo,) = fake_trt.registered[f"autotune {PLUGIN_ID}"](*(desc() for _ in INPUT_NAMES), outputs=outs)
    assert combo.io_types.replace(" ", "").split(",") == [
        "FP32|FP16|BF16",
        "INT32",
        "INT32",
        "FP32",
        "FP32",
        "FP32",
        "FP32",
        "INT32",
        "INT32",
        "INT32",
    ]


def test_register_without_tensorrt_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt.plugin", None)  # as on a CPU machine
    monkeypatch.setattr(trt_plugin, "_registered", [])
    with pytest.raises(ImportError, match=r"pip install 'trtspec\[[^]]*tensorrt"):  # the extra naming TensorRT
        trt_plugin.register()
