"""The TreeVerify plugin's `mode` attribute on its way through TensorRT, and the type that survives it.

Pure NumPy, no TensorRT: `trt_plugin` uses `ModeAttr` and `mode_from_attr`; the tests and the GPU check drive
`decode_field` / `encode_field`, which restate TensorRT's own rule (below) for the annotations we use.

How an attribute reaches the plugin (read in the `tensorrt-cu13-bindings` wheels, whose pure-Python
`tensorrt_bindings/plugin/` is `tensorrt.plugin`; versions named are the ones read):

1. Parse. TensorRT's ONNX parser builds a PluginField for each field the plugin creator declares from the
   node's attribute of that name; an ONNX INT attribute becomes `kINT32` data of length 1 (onnx-tensorrt
   `onnxOpImporters.cpp`, `loadFields`: `AttributeProto::INT` → `PluginFieldType::kINT32`, one element).
   The Python binding hands the field's data over as a 1-element `numpy.ndarray`.
2. Decode. `_TemplatePluginCreator.create_plugin` (`_lib.py`) looks at the annotation the `@trtp.register`
   function gave the attribute: a NumPy array annotation (`_utils._is_numpy_array`: typing origin
   `np.ndarray`) → `f.data.astype(dtype)`, dtype = the annotation's `np.dtype[...]` argument
   (`_utils._infer_numpy_type`; float16 goes through bytes); `str` → the bytes as UTF-8; any other class C
   → `C(f.data)`. For `mode: int` that is `int(ndarray of shape (1,))`: deprecated since NumPy 1.25, a
   TypeError from NumPy 2.4 on ("only 0-dimensional arrays can be converted to Python scalars") — parse,
   build and deserialisation all fail. So in 10.15.1.29, 10.16.1.11 and 11.0.0.114; 11.4.0.106 unwraps a
   1-element array first (`C(f.data[0])`). `UNWRAPS_SCALARS` records this per version read.
3. Serialise / deserialise. `_TemplateJITPlugin.get_fields_to_serialize` (`_plugin_class.py`) writes an
   ndarray attribute as a field of its own dtype and a built-in one as `np.array([value])`; loading the
   engine decodes those fields by step 2 again.

Hence `ModeAttr = np.ndarray[Any, np.dtype[np.int32]]`: step 2 takes the array branch in every version read,
`astype(int32)` of the parser's kINT32 data is exact, and the creator declares the field kINT32 — the type
the parser sends. Written `np.ndarray[...]`, not `numpy.typing.NDArray[np.int32]`: 11.4's `_utils` also
accepts an annotation whose origin is `numpy.typing.NDArray` itself (the form NumPy gives if `NDArray`
becomes a type-alias object), which 10.15's `_is_npt_ndarray` does not recognise and would send down the
`issubclass` branch; `np.ndarray[Any, np.dtype[...]]` has origin `np.ndarray` under every NumPy ≥ 1.22.
"""

from __future__ import annotations

import typing
from typing import Any, TypeAlias

import numpy as np

from plugins.tree_verify.contract import Mode

ModeAttr: TypeAlias = np.ndarray[Any, np.dtype[np.int32]]  # the `mode` attribute as the plugin receives it: [1]
MODE_DTYPE = np.int32  # ONNX INT attribute → PluginFieldType.kINT32 (onnx-tensorrt loadFields)
UNWRAPS_SCALARS = {  # tensorrt-cu13-bindings version → whether create_plugin unwraps 1-element builtin fields
    "10.15.1.29": False,
    "10.16.1.11": False,
    "11.0.0.114": False,
    "11.4.0.106": True,
}


def mode_field(mode: Mode | int) -> np.ndarray:
    """The data of the PluginField TensorRT's ONNX parser builds from TreeVerify's `mode` (an INT attribute)."""
    field: np.ndarray = np.array([int(Mode(mode))], dtype=MODE_DTYPE)  # [1] int32
    return field


def mode_from_attr(value: object) -> Mode:
    """The Mode a decoded `mode` attribute stands for: the [1] int32 array `ModeAttr` decodes to (any array
    holding exactly one integer), or an int / NumPy integer (a release that unwraps, or a direct call).
    ValueError for anything else — never int() on an array."""
    if isinstance(value, np.ndarray):
        if value.size != 1 or not np.issubdtype(value.dtype, np.integer):
            raise ValueError(f"mode attribute: expected one integer, got {value.dtype} array of shape {value.shape}")
        value = value.reshape(-1)[0]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"mode attribute: expected an integer, got {type(value).__name__}")
    return Mode(int(value))


# -- TensorRT's rule, restated (tensorrt_bindings/plugin/_utils.py, _lib.py, _plugin_class.py; module docstring) --


def is_numpy_array(annotation: object) -> bool:
    """`_utils._is_numpy_array` for the forms we use: np.ndarray itself or a subscripted np.ndarray."""
    return annotation is np.ndarray or typing.get_origin(annotation) is np.ndarray


def array_dtype(annotation: object) -> np.dtype[Any]:
    """`_utils._infer_numpy_type`: the dtype argument of np.ndarray[shape, np.dtype[dtype]]."""
    args = typing.get_args(annotation)
    inner = typing.get_args(args[1]) if len(args) >= 2 else ()
    if not inner:
        raise TypeError(f"{annotation!r}: annotate array attributes as np.ndarray[Any, np.dtype[<dtype>]]")
    dtype: np.dtype[Any] = np.dtype(inner[0])
    return dtype


def decode_field(annotation: Any, data: np.ndarray, *, unwraps_scalars: bool = False) -> Any:
    """What `tensorrt.plugin` passes the plugin for a field holding `data`, for an attribute annotated
    `annotation` (`_TemplatePluginCreator.create_plugin`); `unwraps_scalars`: the 11.4 rule."""
    if is_numpy_array(annotation):
        dtype = array_dtype(annotation)
        return np.frombuffer(data.tobytes(), dtype=np.float16) if dtype == np.float16 else data.astype(dtype)
    if issubclass(annotation, str):
        return data.tobytes().decode("utf-8")
    if unwraps_scalars and isinstance(data, np.ndarray) and data.size == 1:
        return annotation(data[0])
    return annotation(data)


def encode_field(value: Any) -> np.ndarray | bytes:
    """The data `get_fields_to_serialize` writes for an attribute value (what deserialisation decodes)."""
    if isinstance(value, np.ndarray):
        return value.tobytes() if value.dtype == np.float16 else value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes):
        return value
    data: np.ndarray = np.array([value])
    return data
