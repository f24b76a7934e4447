"""TreeVerify's `mode` attribute in the form TensorRT hands it over (`plugins.tree_verify.trt_attrs`).

TensorRT's ONNX parser passes an INT attribute as a 1-element int32 array (onnx-tensorrt `loadFields`), and
`tensorrt.plugin` decodes it by the attribute's annotation (`_TemplatePluginCreator.create_plugin`,
tensorrt_bindings/plugin/_lib.py@10.15.1.29): `int(array)` for `int` — a TypeError from NumPy 2.4 on — and
`array.astype(dtype)` for an array annotation. `trt_attrs.decode_field` restates that rule; here it runs on
the parser's form under the installed NumPy, for every release `UNWRAPS_SCALARS` records.

The real rule: with $TRTSPEC_TENSORRT_WHEELS a folder of tensorrt-cu13-bindings wheels (as for
tests/unit/test_plugin_mypy.py: `pip download --no-deps tensorrt-cu13-bindings==V`; no network in CI), each
wheel's own `tensorrt.plugin` Python is imported over a stand-in `tensorrt` core (the compiled
bindings need a GPU host: the stand-in supplies only a plugin registry and inert base classes). Our
`trt_plugin.register()` then goes through TensorRT's real signature validation, and the creator it
registers decodes the parser's array, serialises the plugin's fields and decodes them again (engine
deserialisation), with no int() anywhere; an `int`-annotated twin shows the failure each release has.
"""

from __future__ import annotations

import importlib
import os
import sys
import types
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest

from plugins.tree_verify import trt_plugin
from plugins.tree_verify.contract import Mode
from plugins.tree_verify.trt_attrs import (
    UNWRAPS_SCALARS,
    ModeAttr,
    array_dtype,
    decode_field,
    encode_field,
    is_numpy_array,
    mode_field,
    mode_from_attr,
)

NUMPY = tuple(int(p) for p in np.__version__.split(".")[:2])


@pytest.mark.parametrize("version", sorted(UNWRAPS_SCALARS))
@pytest.mark.parametrize("mode", list(Mode))
def test_the_parsers_array_form_decodes_and_round_trips(version, mode):
    field = mode_field(mode)
    assert field.dtype == np.int32 and field.shape == (1,)  # what the parser builds from an INT attribute
    unwraps = UNWRAPS_SCALARS[version]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NumPy's int()-of-an-array deprecation would be an error here
        built = decode_field(ModeAttr, field, unwraps_scalars=unwraps)  # parse / build
        assert isinstance(built, np.ndarray) and built.dtype == np.int32 and built.tolist() == [int(mode)]
        loaded = decode_field(ModeAttr, encode_field(built), unwraps_scalars=unwraps)  # serialise, deserialise
    assert mode_from_attr(built) is mode_from_attr(loaded) is mode


def test_an_int_annotation_is_what_fails_under_numpy_2_4():
    """The bug this typing avoids: int() of the parser's array (TypeError on NumPy ≥ 2.4, deprecated from 1.25)."""
    field = mode_field(Mode.REJECTION)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TypeError if NUMPY >= (2, 4) else DeprecationWarning):
            decode_field(int, field)
        assert decode_field(int, field, unwraps_scalars=True) == 1  # 11.4.0.106's fix


def test_the_annotation_is_an_int32_array_under_tensorrts_rule():
    assert is_numpy_array(ModeAttr) and array_dtype(ModeAttr) == np.int32
    assert not is_numpy_array(int) and not is_numpy_array(str)
    with pytest.raises(TypeError, match="annotate array attributes"):
        array_dtype(np.ndarray)


@pytest.mark.parametrize(
    "value,mode",
    [
        (np.array([0], np.int32), Mode.GREEDY),
        (np.array([[1]], np.int64), Mode.REJECTION),
        (1, Mode.REJECTION),
        (np.int32(0), Mode.GREEDY),
    ],
)
def test_mode_from_attr_takes_every_form_a_release_passes(value, mode):
    assert mode_from_attr(value) is mode


@pytest.mark.parametrize(
    "value",
    [np.array([0, 1], np.int32), np.array([], np.int32), np.array([1.0]), 1.0, "1", True, np.array([7], np.int32)],
)
def test_mode_from_attr_refuses_anything_else(value):
    with pytest.raises(ValueError):
        mode_from_attr(value)


# -- the real tensorrt.plugin Python, over a stand-in TensorRT core -----------------------------------------------


def _plugin_sources(tmp: Path) -> list[tuple[str, Path]]:
    """(version, folder holding its tensorrt.plugin *.py) per wheel in $TRTSPEC_TENSORRT_WHEELS."""
    folder = Path(os.environ.get("TRTSPEC_TENSORRT_WHEELS", "/nonexistent"))
    out = []
    for wheel in sorted(folder.glob("tensorrt_cu*_bindings-*.whl")):
        version = wheel.name.split("-")[1]
        with zipfile.ZipFile(wheel) as z:
            z.extractall(tmp / version, [n for n in z.namelist() if n.startswith("tensorrt_bindings/plugin/")])
        out.append((version, tmp / version / "tensorrt_bindings" / "plugin"))
    return out


class StandInTensorRT(types.ModuleType):
    """A stand-in for TensorRT's compiled core (absent here): every attribute is an inert class whose members
    are their own names, plus a plugin registry, PluginField and PluginFieldCollection that keep what they get."""

    class _Names(type):
        def __getattr__(cls, name: str) -> str:
            if name.startswith("__"):
                raise AttributeError(name)
            return f"{cls.__name__}.{name}"

    class PluginField:
        def __init__(self, name: str, data=b"", type_=None) -> None:
            self.name, self.data, self.type = name, data, type_

    def __init__(self) -> None:
        super().__init__("tensorrt")
        self.creators: dict[tuple[str, str], object] = {}
        self.PluginFieldCollection = list

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        cls = self._Names(name, (), {"__init__": lambda self, *a, **k: None})
        setattr(self, name, cls)
        return cls

    def get_plugin_registry(self):
        registry = self

        class Registry:
            def register_creator(self, creator, namespace):
                registry.creators[(creator.name, namespace)] = creator
                return True

            def get_creator(self, name, version, namespace):
                return registry.creators[(name, namespace)]

        return Registry()


@pytest.fixture
def real_plugin_module(monkeypatch, tmp_path):
    """Yields a loader: version folder -> (stand-in tensorrt, the real tensorrt.plugin package)."""
    sources = _plugin_sources(tmp_path)
    if not sources:
        pytest.skip("no tensorrt-cu13-bindings wheel in $TRTSPEC_TENSORRT_WHEELS (offline; see the module docstring)")

    def load(folder: Path):
        for name in [n for n in sys.modules if n == "tensorrt" or n.startswith("tensorrt.")]:
            monkeypatch.delitem(sys.modules, name)
        trt = StandInTensorRT()
        pkg = types.ModuleType("tensorrt.plugin")
        pkg.__path__, pkg.__package__ = [str(folder)], "tensorrt.plugin"
        trt.plugin = pkg
        monkeypatch.setitem(sys.modules, "tensorrt", trt)
        monkeypatch.setitem(sys.modules, "tensorrt.plugin", pkg)
        for mod in ("_export", "_utils", "_tensor", "_autotune", "_validate", "_plugin_class", "_lib", "_top_level"):
            module = importlib.import_module(f"tensorrt.plugin.{mod}")
            monkeypatch.setitem(sys.modules, f"tensorrt.plugin.{mod}", module)
        monkeypatch.setattr(trt_plugin, "_registered", [])
        return trt, pkg

    yield sources, load


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::SyntaxWarning")  # "\\s" in their docstrings
def test_stand_in_core_real_tensorrt_plugin_decodes_the_parsers_array(real_plugin_module):
    sources, load = real_plugin_module
    for version, folder in sources:
        trt, trtp = load(folder)
        trt_plugin.register()  # through TensorRT's own signature checks (_validate.py)
        creator = trt.creators[("TreeVerify", "trtspec")]
        assert [(f.name, f.type) for f in creator.field_names] == [("mode", "PluginFieldType.INT32")], version
        for mode in Mode:
            parsed = [trt.PluginField("mode", mode_field(mode), "PluginFieldType.INT32")]
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                built = creator.create_plugin("TreeVerify", "trtspec", parsed, "BUILD")
                fields = built.get_fields_to_serialize()
                loaded = creator.create_plugin("TreeVerify", "trtspec", fields, "RUNTIME")
            for plugin in (built, loaded):
                assert mode_from_attr(plugin.attrs["mode"]) is mode, version
                np.testing.assert_array_equal(plugin.attrs["mode"], decode_field(ModeAttr, mode_field(mode)))
            assert plugin.impl_attr_names == ["mode"]

        # an `int`-annotated twin: our restated rule predicts what this release does with the parser's array
        def shapes(x, mode):
            return x.like()

        shapes.__annotations__ = {"x": trtp.TensorDesc, "mode": int, "return": trtp.TensorDesc}  # real classes
        trtp.register("trtspec_probe::IntAttr")(shapes)
        twin = trt.creators[("IntAttr", "trtspec_probe")]
        field = [trt.PluginField("mode", mode_field(Mode.REJECTION), "PluginFieldType.INT32")]
        if UNWRAPS_SCALARS.get(version, False) or NUMPY < (2, 4):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                assert twin.create_plugin("IntAttr", "trtspec_probe", field, "BUILD").attrs["mode"] == 1
        else:
            with pytest.raises(TypeError):
                twin.create_plugin("IntAttr", "trtspec_probe", field, "BUILD")
        if version in UNWRAPS_SCALARS:  # the recorded rule agrees with this release's source
            src = (folder / "_lib.py").read_text()
            assert ("f.data[0]" in src) is UNWRAPS_SCALARS[version], version
