"""An estimate of in-graph verification cost for the decode benchmark's rows (`verify_estimate`)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from builder.speculative.protocols import Draft


def verify_estimate(draft: Draft, vocab: int, runs: int = 200) -> dict[str, Any]:
    """ms per call of a standalone decomposed TreeVerify (greedy) on [1, T, V] random logits with
    `draft`'s tree, ORT, 1 thread, IOBinding, mean of `runs` calls, minus the mean call of an empty
    graph (Identity) bound the same way. An estimate of the in-graph cost, not a measurement of it."""
    from plugins.tree_verify.contract import INPUT_NAMES

    t, (p, w) = draft.num_nodes, draft.paths.shape
    rng = np.random.default_rng(0)
    feeds = {
        "logits": rng.standard_normal((1, t, vocab), dtype=np.float32),
        "tokens": draft.tokens.astype(np.int32)[None],
        "paths": draft.paths.astype(np.int32)[None],
        "temperature": np.zeros(1, np.float32),
        "top_p": np.ones(1, np.float32),
        "uniforms": np.zeros((1, w), np.float32),
        "draft_probs": np.ones((1, t), np.float32),
    }
    feeds = {k: np.ascontiguousarray(feeds[k]) for k in INPUT_NAMES}
    full = _mean_call_ms(_verify_model(feeds, identity=False), feeds, runs)
    empty = _mean_call_ms(_verify_model(feeds, identity=True), feeds, runs)
    return {
        "verify_ms_per_step_est": round(max(full - empty, 0.0), 4),
        "verify_call_ms": round(full, 4),
        "empty_call_ms": round(empty, 4),
        "verify_tree": {"T": t, "P": p, "W": w, "V": vocab},
    }


def _verify_model(feeds: dict[str, np.ndarray], identity: bool):
    import onnx
    from onnx import helper

    from plugins.tree_verify.contract import DOMAIN, OUTPUTS
    from plugins.tree_verify.onnx_op import MIN_OPSET, decompose, make_node

    types = {np.dtype(np.float32): onnx.TensorProto.FLOAT, np.dtype(np.int32): onnx.TensorProto.INT32}
    inputs = [helper.make_tensor_value_info(k, types[v.dtype], list(v.shape)) for k, v in feeds.items()]
    if identity:  # the same inputs bound, one trivial node: what a run call costs without the work
        nodes, outputs = [helper.make_node("Identity", ["tokens"], ["out"])], ["out"]
    else:
        outputs = [s.name for s in OUTPUTS]
        nodes = [make_node(list(feeds), outputs, "greedy")]
    results = [helper.make_tensor_value_info(o, onnx.TensorProto.INT32, None) for o in outputs]  # all int32
    graph = helper.make_graph(nodes, "verify_estimate", inputs, results)
    opsets = [helper.make_opsetid("", MIN_OPSET), helper.make_opsetid(DOMAIN, 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    return model if identity else decompose(model)


def _mean_call_ms(model, feeds: dict[str, np.ndarray], runs: int) -> float:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = 1, 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    io = sess.io_binding()
    for name, arr in feeds.items():
        io.bind_input(name, "cpu", 0, arr.dtype, list(arr.shape), arr.ctypes.data)
    for o in sess.get_outputs():
        io.bind_output(o.name, "cpu")
    for _ in range(20):
        sess.run_with_iobinding(io)
    t0 = time.perf_counter()
    for _ in range(runs):
        sess.run_with_iobinding(io)
    return 1e3 * (time.perf_counter() - t0) / runs
