"""TensorRT face of `tree_verify`: the plugin trtspec::TreeVerify (GPU hosts with tensorrt ≥ 10.15).

`register()` registers it with `tensorrt.plugin` (TensorRT's Python "quickly deployable plugins").
TensorRT's ONNX parser then maps every TreeVerify node (op type "TreeVerify", string attribute
plugin_namespace = "trtspec", which `onnx_op.make_node` writes) to it, with the node's `mode`
attribute as the plugin field (typed `trt_attrs.ModeAttr`, a [1] int32 array: an `int` annotation makes
tensorrt.plugin call int() on the parser's 1-element array, which NumPy ≥ 2.4 refuses — see `trt_attrs`).
Call `register()` before parsing the ONNX model *and* in every process
that deserialises the engine: the implementation is `@trtp.impl` (JIT), i.e. Python that launches
the Triton kernel on TensorRT's stream at enqueue time (so: a Python runtime — our engines, Triton
server's Python backend). An `@trtp.aot_impl` would embed one compiled kernel in the engine; the
kernel here is three launches, so AOT would first need them fused.

No `from __future__ import annotations` here: `tensorrt.plugin` reads the decorated functions'
annotations at run time (`inspect.signature` + `issubclass`), so they must be real objects (classes, and the
`np.ndarray[...]` alias of the attribute, which the impl must repeat exactly: TensorRT compares them).

TensorRT also runs the impl on made-up inputs while it times tactics: the kernel treats every index input
as untrusted (`contract.py`, "Untrusted index inputs"), so such a run cannot fault.
"""

from typing import TYPE_CHECKING, Any, List, Tuple

from plugins.tree_verify.contract import PLUGIN_ID
from plugins.tree_verify.trt_attrs import ModeAttr, mode_from_attr

if TYPE_CHECKING:
    import tensorrt.plugin as trtp
    import torch

INSTALL_HINT = (
    "the TensorRT face of tree_verify needs tensorrt >= 10.15 with tensorrt.plugin, torch with CUDA and "
    "triton on a GPU host: pip install 'trtspec[cpu,tensorrt]'"
)
_LOGITS_TYPES = "FP32|FP16|BF16"  # the other inputs and the outputs have one type each
_IO_TYPES = f"{_LOGITS_TYPES}, INT32, INT32, FP32, FP32, FP32, FP32, INT32, INT32, INT32"
_registered: List[bool] = []


def register() -> None:
    """Register trtspec::TreeVerify with tensorrt.plugin (idempotent)."""
    if _registered:
        return
    try:
        import tensorrt.plugin  # noqa: F401
    except ImportError as err:
        raise ImportError(INSTALL_HINT) from err
    _register_shapes()
    _register_formats()
    _register_impl()
    _registered.append(True)


def _register_shapes() -> None:
    import tensorrt as trt
    import tensorrt.plugin as trtp

    @trtp.register(PLUGIN_ID)
    def tree_verify_shapes(
        logits: trtp.TensorDesc,  # [B, T, V]
        tokens: trtp.TensorDesc,  # [B, T]
        paths: trtp.TensorDesc,  # [B, P, D+1]
        temperature: trtp.TensorDesc,  # [B]
        top_p: trtp.TensorDesc,  # [B]
        uniforms: trtp.TensorDesc,  # [B, D+1]
        draft_probs: trtp.TensorDesc,  # [B, T]
        mode: ModeAttr,  # [1] int32
    ) -> Tuple[trtp.TensorDesc, trtp.TensorDesc, trtp.TensorDesc]:
        batch, width = logits.shape_expr[0], paths.shape_expr[2]
        return (
            trtp.from_shape_expr((batch,), dtype=trt.int32),  # accepted_len [B]
            trtp.from_shape_expr((batch,), dtype=trt.int32),  # best_path [B]
            trtp.from_shape_expr((batch, width), dtype=trt.int32),  # output_tokens [B, D+1]
        )


def _register_formats() -> None:
    import tensorrt.plugin as trtp

    @trtp.autotune(PLUGIN_ID)
    def tree_verify_formats(
        logits: trtp.TensorDesc,
        tokens: trtp.TensorDesc,
        paths: trtp.TensorDesc,
        temperature: trtp.TensorDesc,
        top_p: trtp.TensorDesc,
        uniforms: trtp.TensorDesc,
        draft_probs: trtp.TensorDesc,
        outputs: Tuple[trtp.TensorDesc, trtp.TensorDesc, trtp.TensorDesc],
    ) -> List[trtp.AutoTuneCombination]:
        return [trtp.AutoTuneCombination(_IO_TYPES, "LINEAR")]


def _register_impl() -> None:
    import tensorrt.plugin as trtp

    @trtp.impl(PLUGIN_ID)
    def tree_verify_impl(
        logits: trtp.Tensor,
        tokens: trtp.Tensor,
        paths: trtp.Tensor,
        temperature: trtp.Tensor,
        top_p: trtp.Tensor,
        uniforms: trtp.Tensor,
        draft_probs: trtp.Tensor,
        mode: ModeAttr,  # [1] int32
        outputs: Tuple[trtp.Tensor, trtp.Tensor, trtp.Tensor],
        stream: int,
    ) -> None:
        import torch

        from plugins.tree_verify.kernel import tree_verify_triton
        from plugins.tree_verify.reference import VerifyResult

        x, tok, pa, temp, tp, u, q = (
            _as_torch(t) for t in (logits, tokens, paths, temperature, top_p, uniforms, draft_probs)
        )
        out = VerifyResult(*(_as_torch(t) for t in outputs))
        with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
            tree_verify_triton(x, tok, pa, mode_from_attr(mode), temp, tp, u, q, out=out)


class _CudaArray:
    """A device buffer described by __cuda_array_interface__ (for dtypes trtp.Tensor won't describe)."""

    def __init__(self, ptr: int, shape: Tuple[int, ...], strides: Tuple[int, ...], typestr: str) -> None:
        self.__cuda_array_interface__: dict[str, Any] = {
            "data": (ptr, False),
            "shape": shape,
            "strides": strides,
            "typestr": typestr,
            "version": 3,
        }


def _as_torch(t: "trtp.Tensor") -> "torch.Tensor":
    """A torch view of a TensorRT plugin tensor (no copy)."""
    import tensorrt as trt
    import torch

    if t.dtype == trt.bfloat16:  # trtp.Tensor refuses __cuda_array_interface__ for BF16: share as int16
        raw = _CudaArray(t.data_ptr, tuple(t.shape), tuple(2 * s for s in t.strides), "<i2")
        return torch.as_tensor(raw, device="cuda").view(torch.bfloat16)
    return torch.as_tensor(t, device="cuda")
