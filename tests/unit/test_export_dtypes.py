"""The GPU form of the graphs in the GPU's types (`builder.export.contract.Precision`), checked on the CPU.

ONNX Runtime 1.32 runs the float16 graph natively (probed op by op; `builder.export.lower`), but has no
bfloat16 kernels for MatMul / Add / Mul / ... and no TensorScatter over FLOAT8E4M3FN: those graphs run
as their float32 lowering, which rounds every stored tensor as the GPU form does. Both are compared with
the torch reference (`builder.model.llama`) run in the same dtype and in float64 on the same weights:

    min(err(torch), u·scale) / K_ORT  <=  err(ours)  <=  K_ORT · max(err(torch), u·scale)

(`tests.unit.numerics.assert_rounds_like`, u the unit roundoff of the dtype, K_ORT the export harness's
factor for ONNX Runtime against torch). The upper side catches a wrong formula; the lower one a graph
that computes in a wider type than it claims (shown failing on the float32 graph of the same weights).
Rankings (node_argmax, top-K) may differ from float64's only at near-ties within twice the upper bound.

FP8 (weights, activations, KV cache stored as FLOAT8E4M3FN): the graph's scales are the checkpoint's
rounded to bfloat16 (`qdq.scales_in`), and rounding to E4M3 is discontinuous, so as in
`test_quantize_qdq` the reference takes ONNX Runtime's own FP8 codes at every Q/DQ site after checking
each is the E4M3 rounding of a value within the bfloat16 bound of the float64 pre-quant activation.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

from builder.errors import UserError
from builder.export.artifacts import write_models
from builder.export.contract import FP8, Precision
from builder.export.eagle import export_eagle
from builder.export.graph import ELEM, F32, dedupe, prune, save_sharing_data
from builder.export.lower import LoweringError, lower
from builder.export.qdq import FP8_MAX, Fp8Spec, ort_foldable, scales_in
from builder.export.target import build_target, export_target
from builder.export.tensorrt import check, to_tensorrt
from builder.model.kv_cache import KVCache
from builder.quantize.checkpoint import read_fp8_checkpoint
from builder.quantize.reference import Fp8KVCache, e4m3_round, fake_quant_model
from plugins.tree_verify import onnx_op
from tests.unit.numerics import assert_rounds_like, error_bound, unit_roundoff
from tests.unit.test_export_eagle import eagle_draft_pair
from tests.unit.test_export_harness import K_ORT, ancestors, f64, leaf_paths, pad_paths, sequence_mask, tiny_target
from tests.unit.test_quantize_ptq import fixture_fp8

CAP, PROMPT, NODES = 64, 11, 6
TORCH = {"bfloat16": torch.bfloat16, "float16": torch.float16}


class DSession:
    """An ORT session through IOBinding whose caches (numpy, `cache_dtype`) are bound as past and present."""

    def __init__(self, path: Path, layers: int, kv_heads: int, head_dim: int, cache_dtype: type = np.float32) -> None:
        so = ort.SessionOptions()
        so.intra_op_num_threads = so.inter_op_num_threads = 1
        so.log_severity_level = 3
        self.sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        self.k = np.zeros((layers, 1, kv_heads, CAP, head_dim), cache_dtype)  # (L, B, KV, CAP, D)
        self.v = np.zeros_like(self.k)
        self.outputs = [o.name for o in self.sess.get_outputs() if not o.name.startswith("present_")]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        io = self.sess.io_binding()
        for name, value in feeds.items():
            io.bind_cpu_input(name, np.ascontiguousarray(value))
        for i in range(len(self.k)):
            for kind, buf in (("key", self.k[i]), ("value", self.v[i])):
                shared = ort.OrtValue.ortvalue_from_numpy(buf)
                io.bind_ortvalue_input(f"past_{kind}_{i}", shared)
                io.bind_ortvalue_output(f"present_{kind}_{i}", shared)
        for name in self.outputs:
            io.bind_output(name)
        self.sess.run_with_iobinding(io)
        values = io.get_outputs()
        return {name: values[2 * len(self.k) + j].numpy() for j, name in enumerate(self.outputs)}


def run_scenario(sess: DSession, vocab: int, seed: int = 7):
    """Prefill PROMPT tokens, then one step of a random NODES-node tree; both calls' outputs and the whole
    sequence (tokens, positions, [S, S] mask) for the reference."""
    gen = np.random.default_rng(seed)
    prompt = gen.integers(0, vocab, PROMPT)
    first = sess.run(
        dict(
            tokens=prompt[None],
            position_ids=np.arange(PROMPT)[None],
            tree_mask=np.tril(np.ones((PROMPT, PROMPT), bool))[None],
            past_len=np.array([0]),
            num_nodes=np.array([PROMPT]),
            verify_index=np.array([[PROMPT - 1]]),
            paths=np.zeros((1, 1, 1), np.int32),
        )
    )
    parents = [-1] + [int(gen.integers(max(0, i - 2), i)) for i in range(1, NODES)]
    mask, depth = ancestors(parents)
    nodes = gen.integers(0, vocab, NODES)
    second = sess.run(
        dict(
            tokens=nodes[None],
            position_ids=(PROMPT + depth)[None],
            tree_mask=mask[None],
            past_len=np.array([PROMPT]),
            num_nodes=np.array([NODES]),
            verify_index=np.arange(NODES)[None],
            paths=pad_paths([leaf_paths(parents)]),
        )
    )
    return (
        first,
        second,
        np.concatenate([prompt, nodes]),
        np.concatenate([np.arange(PROMPT), PROMPT + depth]),
        sequence_mask(PROMPT, mask),
    )


def reference(model, tokens, positions, seq_mask, cache=None) -> dict[str, torch.Tensor]:
    """The torch model (in its own dtype) over the whole sequence: logits [S, V], hidden [S, C], K / V
    [L, KV, S, D], as float64 tensors."""
    cfg, s = model.cfg, len(tokens)
    cache = cache or KVCache(cfg.num_hidden_layers, 1, cfg.num_key_value_heads, cfg.head_dim, s, model.dtype)
    with torch.no_grad():
        logits, hidden = model(torch.tensor(tokens)[None], torch.tensor(positions)[None], seq_mask[None], cache, 0)
    return {
        "logits": logits[0].double(),
        "hidden": hidden[0].double(),
        "k": cache.k[:, 0].double(),
        "v": cache.v[:, 0].double(),
    }


def check_against(first, second, sess: DSession, theirs, ref64, dtype: torch.dtype, caches: bool = True) -> None:
    """Hidden states, caches (unless the reference took them from ours) and node_argmax of both calls against
    the references (module docstring)."""
    s = PROMPT + NODES
    t = lambda a: torch.from_numpy(np.asarray(a, np.float64))  # noqa: E731
    for what, ours, sl in (
        ("prefill hidden", first["hidden"][0], slice(0, PROMPT)),
        ("step hidden", second["hidden"][0], slice(PROMPT, s)),
    ):
        assert_rounds_like(t(ours), theirs["hidden"][sl], ref64["hidden"][sl], what=what, dtype=dtype, k=K_ORT)
    for kind in ("k", "v") if caches else ():
        ours = getattr(sess, kind)[:, 0, :, :s]
        assert_rounds_like(t(ours), theirs[kind], ref64[kind], what=f"{kind} cache", dtype=dtype, k=K_ORT)
    _, _, bound = error_bound(theirs["logits"][PROMPT:], ref64["logits"][PROMPT:], what="logits", dtype=dtype)
    bound *= K_ORT / 4  # numerics' K = 4 -> K_ORT
    got = torch.from_numpy(second["node_argmax"][0])  # [NODES]
    exact = ref64["logits"][PROMPT:]  # [NODES, V]
    gap = exact.max(-1).values - exact.gather(1, got[:, None])[:, 0]
    assert float(gap.max()) <= 2 * bound, f"node_argmax {got.tolist()} trails the float64 top logit by {gap.tolist()}"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_gpu_form_lowered_in_ort_rounds_like_torch_in_that_dtype(dtype: str, tmp_path: Path) -> None:
    model = tiny_target(3, scaling=True, tied=False, head_dim=16).to(TORCH[dtype])
    res = export_target(
        model, tmp_path / "t", variant="standard", mode="greedy", max_seq_len=CAP, precision=Precision(dtype, dtype)
    )
    canonical = onnx.load(str(res.canonical), load_external_data=False)
    assert {i.name: i.type.tensor_type.elem_type for i in canonical.graph.input}["past_key_0"] == ELEM[dtype]
    cfg = model.cfg
    sess = DSession(res.ort, cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim)  # the lowering: float32
    first, second, tokens, positions, seq_mask = run_scenario(sess, cfg.vocab_size)
    theirs = reference(model, tokens, positions, seq_mask)
    ref64 = reference(f64(model), tokens, positions, seq_mask)
    check_against(first, second, sess, theirs, ref64, TORCH[dtype])
    for value in (second["hidden"], sess.k, sess.v):  # every stored value is a value of the dtype
        np.testing.assert_array_equal(torch.from_numpy(value).to(TORCH[dtype]).float().numpy(), value)


def test_float16_gpu_form_runs_natively_in_ort(tmp_path: Path) -> None:
    """No lowering: the float16 graph (TreeVerify decomposed) in ONNX Runtime's own float16 kernels."""
    model = tiny_target(3, scaling=True, tied=False, head_dim=16).half()
    res = export_target(
        model,
        tmp_path / "t",
        variant="standard",
        mode="greedy",
        max_seq_len=CAP,
        precision=Precision("float16", "float16"),
    )
    native = ort_foldable(prune(dedupe(onnx_op.decompose(onnx.load(str(res.canonical), load_external_data=False)))))
    save_sharing_data(native, tmp_path / "t" / "target.native.onnx")
    cfg = model.cfg
    sess = DSession(
        tmp_path / "t" / "target.native.onnx", cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim, np.float16
    )
    first, second, tokens, positions, seq_mask = run_scenario(sess, cfg.vocab_size)
    assert first["hidden"].dtype == np.float16
    theirs = reference(model, tokens, positions, seq_mask)
    check_against(first, second, sess, theirs, reference(f64(model), tokens, positions, seq_mask), torch.float16)


def test_a_float32_graph_fails_the_bfloat16_check(tmp_path: Path) -> None:
    """The lower side can fail: the CPU form (float32) of the same bfloat16 weights is too exact."""
    model = tiny_target(3, scaling=True, tied=False, head_dim=16).to(torch.bfloat16)
    res = export_target(model, tmp_path / "t", variant="standard", mode="greedy", max_seq_len=CAP)
    cfg = model.cfg
    sess = DSession(res.ort, cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim)
    first, second, tokens, positions, seq_mask = run_scenario(sess, cfg.vocab_size)
    theirs = reference(model, tokens, positions, seq_mask)
    with pytest.raises(AssertionError, match="wider type"):
        check_against(first, second, sess, theirs, reference(f64(model), tokens, positions, seq_mask), torch.bfloat16)


# -- FP8 weights and activations, FP8 KV cache stored as such, bfloat16 elsewhere -------------------------


def _bf16_fp8_model(ckpt, spec: Fp8Spec):
    """The dequantized model with the graph's weights: code · bfloat16(scale), then everything in bfloat16."""
    model = fake_quant_model(ckpt.model, Fp8Spec())  # a copy
    with torch.no_grad():
        for name, lin in spec.linears.items():
            model.get_submodule(name).weight.copy_(torch.from_numpy(lin.dequantized()))
    return model.to(torch.bfloat16)


def _forced_reference(model, spec, dtype, tokens, positions, seq_mask, forced):
    seen: dict[str, torch.Tensor] = {}

    def quant(site: str, x: torch.Tensor, _scale: float) -> torch.Tensor:
        seen.setdefault(site, x.detach().clone())
        return torch.from_numpy(forced[site]).to(x.dtype)

    ref = fake_quant_model(model, spec, quant).to(dtype)
    cfg = model.cfg
    cache = Fp8KVCache(
        spec, cfg.num_hidden_layers, 1, cfg.num_key_value_heads, cfg.head_dim, len(tokens), dtype, quant=quant
    )
    return reference(ref, tokens, positions, seq_mask, cache), seen


def _legit(site: str, x64: torch.Tensor, theirs: torch.Tensor, y: np.ndarray, scale: float) -> int:
    """ORT's FP8 codes at `site` are E4M3 roundings of values within the bfloat16 bound of x64; returns
    how many differ from the float64 rounding (near-ties)."""
    err, sc, _ = error_bound(theirs, x64, what=site, dtype=torch.bfloat16)
    bound = K_ORT * max(err, unit_roundoff(torch.bfloat16) * sc)
    code = lambda z: e4m3_round((z / scale).clamp(-FP8_MAX, FP8_MAX))  # noqa: E731
    q_ort = e4m3_round(torch.from_numpy(y).double() / scale)  # y = code · scale, exact in float32
    lo, hi = code(x64 - bound), code(x64 + bound)
    ok = (q_ort >= torch.minimum(lo, hi)) & (q_ort <= torch.maximum(lo, hi))
    assert bool(ok.all()), f"{site}: ORT rounded {int((~ok).sum())} values beyond the bfloat16 bound {bound:.2e}"
    return int((q_ort != code(x64)).sum())


def test_fp8_weights_and_a_stored_fp8_kv_cache_in_bfloat16(tmp_path: Path) -> None:
    ckpt = read_fp8_checkpoint(fixture_fp8()[0])
    cfg, prec = ckpt.cfg, Precision("bfloat16", FP8)
    spec = scales_in(ckpt.spec, "bfloat16")
    proto = build_target(ckpt.model, variant="standard", mode="greedy", max_seq_len=CAP, fp8=ckpt.spec, precision=prec)
    caches = {
        i.name: i.type.tensor_type.elem_type for i in proto.graph.input if i.name.startswith(("past_key", "past_value"))
    }
    assert set(caches.values()) == {TensorProto.FLOAT8E4M3FN}  # one byte per element
    tags = {p.key.removeprefix("fp8/"): p.value for p in proto.metadata_props if p.key.startswith("fp8/")}
    for site, value in tags.items():  # the sites as extra outputs: Q/DQ'd activations [B, T, ·] (bfloat16),
        kv = site.endswith("_cache")  # the FP8 keys / values [B, KV, T, D] written (the lowering: dequantized)
        elem = TensorProto.FLOAT8E4M3FN if kv else TensorProto.BFLOAT16
        proto.graph.output.append(helper.make_tensor_value_info(value, elem, [None] * (4 if kv else 3)))
    path = write_models(proto, tmp_path / "fp8", "target", {}).ort
    sess = DSession(path, cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim)
    first, second, tokens, positions, seq_mask = run_scenario(sess, cfg.vocab_size)
    forced = {
        site: np.concatenate([first[v], second[v]], axis=2 if site.endswith("_cache") else 1)
        for site, v in tags.items()
    }
    model = _bf16_fp8_model(ckpt, spec)
    ref64, seen64 = _forced_reference(model, spec, torch.float64, tokens, positions, seq_mask, forced)
    theirs, seen = _forced_reference(model, spec, torch.bfloat16, tokens, positions, seq_mask, forced)
    scales = {
        f"layer{i}/{s}": float(spec.linears[f"layers.{i}.{m}"].input_scale)
        for i in range(cfg.num_hidden_layers)
        for s, m in (
            ("qkv", "self_attn.q_proj"),
            ("o_proj", "self_attn.o_proj"),
            ("gate_up", "mlp.gate_proj"),
            ("down_proj", "mlp.down_proj"),
        )
    }
    for i, (ks, vs) in spec.kv_scales.items():
        scales[f"layer{i}/k_cache"], scales[f"layer{i}/v_cache"] = ks, vs
    assert set(seen64) == set(forced) == set(scales)
    flips = sum(_legit(s, seen64[s], seen[s].double(), forced[s], scales[s]) for s in forced)
    check_against(first, second, sess, theirs, ref64, torch.bfloat16, caches=False)  # the caches hold ORT's codes
    print(f"{flips} near-tie FP8 rounding flips")


# -- the EAGLE draft graph ----------------------------------------------------------------------------------


def test_eagle_gpu_form_in_bfloat16(tmp_path: Path) -> None:
    draft, lm_head = eagle_draft_pair(0, 1, fc_bias=True)
    draft, lm_head = draft.to(torch.bfloat16), lm_head.to(torch.bfloat16)
    draft.set_lm_head(lm_head)
    res = export_eagle(
        draft,
        lm_head,
        tmp_path / "e",
        variant="standard",
        top_k=5,
        max_seq_len=CAP,
        precision=Precision("bfloat16", "bfloat16"),
    )
    cfg, n = draft.cfg, 7
    sess = DSession(res.ort, cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim)
    gen = np.random.default_rng(1)
    tokens = gen.integers(0, cfg.vocab_size, n)
    hidden = torch.from_numpy(gen.standard_normal((n, cfg.hidden_size)).astype(np.float32)).to(torch.bfloat16)
    out = sess.run(
        dict(
            tokens=tokens[None],
            hidden_in=hidden.float().numpy()[None],
            position_ids=np.arange(n)[None],
            past_len=np.zeros(1, np.int64),
            write_offset=np.zeros(1, np.int64),
            num_new=np.array([n]),
            tree_mask=np.tril(np.ones((n, n), bool))[None],
        )
    )
    refs = []
    for d in (draft, f64(draft)):
        cache = d.new_cache(CAP)
        with torch.no_grad():
            h = d(
                torch.tensor(tokens)[None],
                hidden.to(d.dtype)[None],
                torch.arange(n)[None],
                torch.ones(n, n, dtype=torch.bool).tril()[None],
                cache,
                0,
            )[0]
            logp = torch.log_softmax(d.logits(h).to(torch.promote_types(d.dtype, torch.float32)), dim=-1)  # graph: fp32
        refs.append({"hidden": h.double(), "logp": logp.double(), "k": cache.k[:, 0, :, :n].double()})
    theirs, ref64 = refs
    t = lambda a: torch.from_numpy(np.asarray(a, np.float64))  # noqa: E731
    assert_rounds_like(
        t(out["hidden_out"][0]), theirs["hidden"], ref64["hidden"], what="hidden_out", dtype=torch.bfloat16, k=K_ORT
    )
    assert_rounds_like(t(sess.k[:, 0, :, :n]), theirs["k"], ref64["k"], what="k cache", dtype=torch.bfloat16, k=K_ORT)
    ids = torch.from_numpy(out["topk_tokens"][0])  # [n, K]
    _, _, bound = error_bound(theirs["logp"], ref64["logp"], what="logp", dtype=torch.bfloat16)
    picked = ref64["logp"].gather(1, ids)
    top = ref64["logp"].topk(ids.shape[1], dim=-1).values
    assert float((top - picked).abs().max()) <= 2 * bound * K_ORT / 4, "top-K ids beyond a near-tie"
    assert float((t(out["topk_logprobs"][0]) - picked).abs().max()) <= bound * K_ORT / 4


# -- structure ----------------------------------------------------------------------------------------------


def test_gpu_form_types_and_its_tensorrt_form(tmp_path: Path) -> None:
    """Every float value of the bfloat16 GPU form is bfloat16 (logits for the argmax and TreeVerify's own
    work excepted), the caches FP8; the TensorRT form refuses FP8 caches (TensorRT's KV-cache update takes
    float32/float16/bfloat16 only) and, with bfloat16 caches, keeps the types (a bfloat16 additive mask) and
    passes onnx.checker; the lowering leaves no narrow / FP8 value and rounds every bfloat16 value of the GPU
    form once (one Cast pair per value)."""
    ckpt = read_fp8_checkpoint(fixture_fp8()[0])
    proto = build_target(
        ckpt.model,
        variant="standard",
        mode="greedy",
        max_seq_len=CAP,
        fp8=ckpt.spec,
        precision=Precision("bfloat16", FP8),
    )
    floats = {TensorProto.FLOAT, TensorProto.BFLOAT16, TensorProto.FLOAT16}
    inferred = onnx.shape_inference.infer_shapes(onnx_op.decompose(proto)).graph
    wide = [v.name for v in inferred.value_info if v.type.tensor_type.elem_type == F32]
    assert all(w.startswith(("verify/", "tree_verify")) for w in wide), wide  # fp32 only around verification
    assert {t.data_type for t in proto.graph.initializer} & floats == {TensorProto.BFLOAT16}
    with pytest.raises(UserError, match="FP8 KV cache"):
        to_tensorrt(proto)
    trt = to_tensorrt(
        build_target(
            ckpt.model,
            variant="standard",
            mode="greedy",
            max_seq_len=CAP,
            fp8=ckpt.spec,
            precision=Precision("bfloat16", "bfloat16"),
        )
    )
    check(trt)
    scatter = [n for n in trt.graph.node if n.op_type == "TensorScatter"]
    assert scatter and all(n.input[0].startswith("past_") for n in scatter)
    where = [n for n in trt.graph.node if n.op_type == "Where" and n.output[0].endswith("/additive")]
    consts = {t.name: t.data_type for t in trt.graph.initializer}
    assert where and {consts[n.input[1]] for n in where} == {TensorProto.BFLOAT16}
    low = lower(onnx_op.decompose(proto))
    lowered = onnx.shape_inference.infer_shapes(low).graph
    kinds = {v.type.tensor_type.elem_type for v in (*lowered.input, *lowered.output, *lowered.value_info)}
    assert TensorProto.FLOAT8E4M3FN not in {v.type.tensor_type.elem_type for v in (*lowered.input, *lowered.output)}
    assert TensorProto.BFLOAT16 in kinds  # only inside the rounding pairs
    narrow = [v.name for v in inferred.value_info if v.type.tensor_type.elem_type == TensorProto.BFLOAT16]
    producer = {o: n for n in low.graph.node for o in n.output}
    for name in narrow:  # the GPU form's value, rounded: Cast(to float32) of Cast(to bfloat16)
        node = producer[name]
        if node.op_type == "Identity":  # Cast(to float32) of a bfloat16 value: already rounded
            continue
        inner = producer[node.input[0]]
        assert (node.op_type, inner.op_type) == ("Cast", "Cast"), name
        assert [a.i for a in inner.attribute] == [TensorProto.BFLOAT16], name


def _fp8_graph(nodes: list[onnx.NodeProto], out_type: int) -> onnx.ModelProto:
    """A graph over an FP8 cache input [2] with a bfloat16 scale `s` (and a second one `s2`)."""
    inits = [
        helper.make_tensor("s", TensorProto.BFLOAT16, [], [0.5]),
        helper.make_tensor("s2", TensorProto.BFLOAT16, [], [0.25]),
        helper.make_tensor("zp", TensorProto.FLOAT8E4M3FN, [], [0]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2])],
        [helper.make_tensor_value_info("y", out_type, [2])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize(
    "second,message",
    [
        (helper.make_node("DequantizeLinear", ["q", "s2"], ["y"], name="dq"), "quantized with"),
        (helper.make_node("Cast", ["q"], ["y"], name="cast", to=TensorProto.BFLOAT16), "Cast to / from FP8"),
    ],
)
def test_lowering_refuses_what_it_cannot_round_exactly(second, message):
    q = helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], name="q", saturate=1)
    model = _fp8_graph([q, second], TensorProto.BFLOAT16)
    onnx.checker.check_model(model, full_check=True)
    with pytest.raises(LoweringError, match=message):
        lower(model)
    ok = _fp8_graph([q, helper.make_node("DequantizeLinear", ["q", "s"], ["y"], name="dq")], TensorProto.BFLOAT16)
    low = lower(ok)  # Q → DQ in float32, rounded to bfloat16: ORT's output is the bfloat16 DQ value
    x = np.array([0.3, -700.0], np.float32)  # 0.3 / 0.5 → 0.625 (E4M3), -1400 saturates to -448
    y = ort.InferenceSession(low.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(y, np.array([0.3125, -224.0], np.float32))
