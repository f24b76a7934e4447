"""Block-quantized draft weights (`builder.export.nbits`): the format against a brute-force quantizer, and the rewritten
graph run in ONNX Runtime against NumPy over the dequantized weights, within the bound of its int8 activations."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from builder.export.nbits import BLOCK, quantize_blocks, quantize_matmuls


def brute_force(w: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """(stored values [N, K/bs, bs] as ints, scales [N, K/bs]) one block at a time."""
    k, n = w.shape
    half = 1 << (bits - 1)
    stored = np.zeros((n, k // BLOCK, BLOCK), np.int64)
    scales = np.zeros((n, k // BLOCK), np.float32)
    for col in range(n):
        for j in range(k // BLOCK):
            block = w[j * BLOCK : (j + 1) * BLOCK, col]
            s = np.float32(np.abs(block).max()) / np.float32(half - 1) or np.float32(1.0)
            scales[col, j] = s
            for i, v in enumerate(block):
                stored[col, j, i] = min(max(round(float(np.float32(v) / s)), 1 - half), half - 1) + half
    return stored, scales


@pytest.mark.parametrize("bits", [8, 4])
def test_format_matches_a_brute_force_quantizer(bits):
    rng = np.random.default_rng(bits)
    w = rng.standard_normal((96, 10)).astype(np.float32)
    w[:32, 3] = 0  # an all-zero block
    packed, scales, deq = quantize_blocks(w, bits)
    stored, want_scales = brute_force(w, bits)
    np.testing.assert_array_equal(scales, want_scales.reshape(-1))
    if bits == 8:
        got = packed.astype(np.int64)
    else:  # two per byte, the even one in the low nibble
        got = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(stored.shape).astype(np.int64)
    np.testing.assert_array_equal(got, stored)
    half = 1 << (bits - 1)
    np.testing.assert_array_equal(deq, ((stored - half) * want_scales[..., None]).reshape(10, 96).T.astype(np.float32))
    assert np.all(np.abs(deq - w) <= np.repeat(want_scales, BLOCK, axis=1).T / 2 * (1 + 1e-6))
    assert not deq[:32, 3].any()


def _model(weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    """Each rewrite on its own input: x [3, 64] @ w [64, 96]; x @ wg [64, 40] + bias (Gemm); xh [2, 3, 64] @ wh
    [2, 64, 48] (per head); and x @ w again as a node the rewrite does not select."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["y_matmul"], name="drafter/MatMul"),
        helper.make_node("Gemm", ["x", "wg", "bias"], ["y_gemm"], name="drafter/Gemm"),
        helper.make_node("MatMul", ["xh", "wh"], ["y_heads"], name="drafter/heads"),
        helper.make_node("MatMul", ["x", "w"], ["z"], name="target/MatMul"),  # not selected: stays float32
        helper.make_node("Mul", ["x", "scale"], ["x_scaled"], name="drafter/Mul"),  # a 1-D weight: left alone
    ]
    inits = [numpy_helper.from_array(v, k) for k, v in weights.items()]
    inits.append(numpy_helper.from_array(np.full(64, 0.5, np.float32), "scale"))
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", f, [3, 64]), helper.make_tensor_value_info("xh", f, [2, 3, 64])],
        [helper.make_tensor_value_info(n, f, None) for n in ("y_matmul", "y_gemm", "y_heads", "z", "x_scaled")],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _bound(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """|error| of x @ w with x quantized to int8 per block of 32 along K (symmetric, round to nearest), plus float32
    rounding of the sums: per block (max|x_block| / 127 / 2) · sum of |w| over the block's rows."""
    k = x.shape[-1]
    step = np.abs(x.reshape(*x.shape[:-1], k // BLOCK, BLOCK)).max(axis=-1) / 127 / 2  # [..., K/bs]
    per_block = np.abs(w).reshape(*w.shape[:-2], k // BLOCK, BLOCK, w.shape[-1]).sum(axis=-2)  # [..., K/bs, N]
    return step @ per_block + 1e-5 * (np.abs(x) @ np.abs(w)) + 1e-6


@pytest.mark.parametrize("bits", [8, 4])
def test_rewritten_graph_matches_numpy_over_the_dequantized_weights(bits, tmp_path):
    rng = np.random.default_rng(0)
    weights = {
        "w": rng.standard_normal((64, 96)).astype(np.float32) * 0.1,
        "wg": rng.standard_normal((64, 40)).astype(np.float32) * 0.1,
        "bias": rng.standard_normal(40).astype(np.float32),
        "wh": rng.standard_normal((2, 64, 48)).astype(np.float32) * 0.1,
    }
    model = _model(weights)
    feeds = {
        "x": rng.standard_normal((3, 64)).astype(np.float32),
        "xh": rng.standard_normal((2, 3, 64)).astype(np.float32),
    }
    z_float = _run(model, feeds)[3]
    assert quantize_matmuls(model, bits, tmp_path, lambda name: name.startswith("drafter/")) == 3
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("MatMulNBits") == 1 + 1 + 2 and ops.count("MatMul") == 1  # the target's MatMul kept
    names = {t.name for t in model.graph.initializer}
    assert "w" in names and not {"wg", "wh"} & names  # w is still read by the target's MatMul
    y_matmul, y_gemm, y_heads, z, _ = _run(model, feeds)
    np.testing.assert_array_equal(z, z_float)
    x, xh = feeds["x"], feeds["xh"]
    deq = {k: quantize_blocks(weights[k], bits)[2] for k in ("w", "wg")}
    deq["wh"] = np.stack([quantize_blocks(weights["wh"][h], bits)[2] for h in range(2)])
    for got, want, tol, what in (
        (y_matmul, x @ deq["w"], _bound(x, deq["w"]), "MatMul"),
        (y_gemm, x @ deq["wg"] + weights["bias"], _bound(x, deq["wg"]), "Gemm"),
        (y_heads, xh @ deq["wh"], _bound(xh, deq["wh"]), "per head"),
    ):
        assert got.shape == want.shape, what
        assert np.all(np.abs(got - want) <= tol), (what, float(np.max(np.abs(got - want) - tol)))
    # the bound is tight enough to tell a wrong layout (the heads swapped)
    assert np.max(np.abs(xh @ deq["wh"][::-1] - y_heads) - _bound(xh, deq["wh"])) > 0
