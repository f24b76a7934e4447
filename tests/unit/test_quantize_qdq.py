"""The FP8 Q/DQ target graph in ONNX Runtime against the float64 reference of the dequantized model.

The FP8 rounding is part of the model: the reference (`builder.quantize.reference`) holds the weights as
fp8 · weight_scale (the checkpoint's codes, exactly what DequantizeLinear produces) and rounds every
quantized activation and the KV cache to E4M3. Rounding is discontinuous, so an fp32 pre-quant value a
hair from a rounding midpoint may legitimately round the other way than the float64 one. The test
therefore reads ONNX Runtime's own Q/DQ outputs (the graph's tagged sites) and

1. checks each is legitimate: ORT's code must be the E4M3 rounding of some value within the fp32 error
   bound of the float64 pre-quant activation (bound as `tests.unit.test_export_harness.ort_bound`:
   K_ORT · max(err(torch fp32), u · scale), measured on the same site) — so a wrong scale, a missing
   clamp or a quantizer at the wrong place fails, a near-tie does not;
2. continues the float64 (and the fp32) reference with ORT's codes at those sites, and then requires
   the graph's hidden states, caches and greedy tokens to follow fp32 arithmetic exactly as the fp32
   export tests do (`assert_close`, `assert_ranked_like`).

Model: the tiny fixture quantized by modelopt (`test_quantize_ptq.fixture_fp8`), FP8 weights and
activations, with and without the FP8 KV cache, both attention variants; a prefill then a tree step.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import helper

from builder.export.artifacts import write_models
from builder.export.graph import F32
from builder.export.qdq import FP8, FP8_MAX, Fp8Spec
from builder.export.target import build_target
from builder.quantize.checkpoint import read_fp8_checkpoint
from builder.quantize.reference import Fp8KVCache, e4m3_round, fake_quant_model
from tests.unit.test_export_harness import (
    Session,
    ancestors,
    assert_close,
    assert_ranked_like,
    leaf_paths,
    ort_bound,
    pad_paths,
    sequence_mask,
)
from tests.unit.test_quantize_ptq import fixture_fp8

CAP = 64
PROMPT, NODES = 11, 6


def export_tagged(model, spec: Fp8Spec, variant: str, out: Path) -> tuple[Path, dict[str, str]]:
    """The greedy target graph with every FP8 site's dequantized value as an extra output."""
    proto = build_target(model, variant=variant, mode="greedy", max_seq_len=CAP, fp8=spec)
    tags = {p.key.removeprefix("fp8/"): p.value for p in proto.metadata_props if p.key.startswith("fp8/")}
    for value in tags.values():  # rank 3 or 4 (KV in the standard variant), dims left symbolic
        rank = 4 if value in _kv_values(proto, tags) else 3
        proto.graph.output.append(helper.make_tensor_value_info(value, F32, [None] * rank))
    return write_models(proto, out, "target", {}).ort, tags


def _kv_values(proto: onnx.ModelProto, tags: dict[str, str]) -> set[str]:
    """Tagged KV values of rank 4 (the standard variant's [B, KV, T, D]; the ort variant's are [B, T, KV·D])."""
    standard = not any(n.op_type == "GroupQueryAttention" for n in proto.graph.node)
    return {v for k, v in tags.items() if k.endswith("_cache")} if standard else set()


def _kv_layout(a: np.ndarray, kv_heads: int) -> np.ndarray:  # [1, T, KV·D] (ort variant) -> [1, KV, T, D]
    return a if a.ndim == 4 else a.reshape(a.shape[0], a.shape[1], kv_heads, -1).transpose(0, 2, 1, 3)


def _forced(tags: dict[str, str], first: dict, second: dict, kv_heads: int) -> dict[str, np.ndarray]:
    """Each site's ORT values over the whole sequence (both calls' rows), in the reference's layout."""
    out = {}
    for site, value in tags.items():
        a, b = first[value], second[value]
        if site.endswith("_cache"):
            a, b = _kv_layout(a, kv_heads), _kv_layout(b, kv_heads)
        out[site] = np.concatenate([a, b], axis=2 if site.endswith("_cache") else 1)
    return out


def _run_scenario(sess: Session, gen: np.random.Generator, vocab: int):
    """Prefill PROMPT tokens, then one step of a random NODES-node tree; returns both calls' outputs and
    the whole sequence (tokens, positions, [S, S] mask) for the reference."""
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
    tokens = np.concatenate([prompt, nodes])
    positions = np.concatenate([np.arange(PROMPT), PROMPT + depth])
    return first, second, tokens, positions, sequence_mask(PROMPT, mask)


def _reference(model, spec, dtype, tokens, positions, seq_mask, forced: dict[str, np.ndarray]):
    """The FP8 reference in `dtype` over the whole sequence, taking ORT's values at every site; returns
    (logits [S, V], hidden [S, C], K, V [L, KV, S, D], pre-quant activations by site)."""
    seen: dict[str, torch.Tensor] = {}

    def quant(site: str, x: torch.Tensor, _scale: float) -> torch.Tensor:
        seen.setdefault(site, x.detach().clone())
        y = torch.from_numpy(forced[site]).to(x.dtype)
        assert y.shape == x.shape, (site, tuple(y.shape), tuple(x.shape))
        return y

    ref = fake_quant_model(model, spec, quant).to(dtype)
    cfg, s = model.cfg, len(tokens)
    cache = Fp8KVCache(spec, cfg.num_hidden_layers, 1, cfg.num_key_value_heads, cfg.head_dim, s, dtype, quant=quant)
    with torch.no_grad():
        logits, hidden = ref(torch.tensor(tokens)[None], torch.tensor(positions)[None], seq_mask[None], cache, 0)
    return logits[0].numpy(), hidden[0].numpy(), cache.k[:, 0].numpy(), cache.v[:, 0].numpy(), seen


def _check_rounding(site: str, x64: torch.Tensor, x32: torch.Tensor, y: np.ndarray, scale: float) -> int:
    """ORT's codes at `site` are E4M3 roundings of values within the fp32 bound of x64; returns how many
    differ from the float64 rounding (near-ties)."""
    bound = ort_bound(x32.numpy(), x64.numpy(), site)
    q_ort = e4m3_round(torch.from_numpy(y).double() / scale)  # y = code · s in fp32: the code comes back exactly
    q64 = e4m3_round((x64 / scale).clamp(-FP8_MAX, FP8_MAX))
    lo = e4m3_round(((x64 - bound) / scale).clamp(-FP8_MAX, FP8_MAX))
    hi = e4m3_round(((x64 + bound) / scale).clamp(-FP8_MAX, FP8_MAX))
    legit = (q_ort >= torch.minimum(lo, hi)) & (q_ort <= torch.maximum(lo, hi))
    assert bool(legit.all()), f"{site}: ORT rounded {int((~legit).sum())} values beyond the fp32 bound {bound:.2e}"
    flips = int((q_ort != q64).sum())
    assert flips <= max(2, q64.numel() // 100), f"{site}: {flips} near-tie flips of {q64.numel()}: not rounding noise"
    return flips


@pytest.mark.parametrize("kv", ["fp8", "model_dtype"])
@pytest.mark.parametrize("variant", ["standard", "ort"])
def test_qdq_graph_follows_the_float64_fp8_reference(tmp_path: Path, variant: str, kv: str) -> None:
    ckpt = read_fp8_checkpoint(fixture_fp8()[0])
    spec = ckpt.spec if kv == "fp8" else Fp8Spec(ckpt.spec.linears, {})
    model, cfg = ckpt.model, ckpt.cfg
    path, tags = export_tagged(model, spec, variant, tmp_path / variant)
    assert len(tags) == cfg.num_hidden_layers * (4 + 2 * bool(spec.kv_scales))
    sess = Session(path, 1, cfg.num_hidden_layers, cfg.num_key_value_heads, CAP, cfg.head_dim)
    first, second, tokens, positions, seq_mask = _run_scenario(sess, np.random.default_rng(7), cfg.vocab_size)
    forced = _forced(tags, first, second, cfg.num_key_value_heads)
    *ref64, seen64 = _reference(model, spec, torch.float64, tokens, positions, seq_mask, forced)
    *ref32, seen32 = _reference(model, spec, torch.float32, tokens, positions, seq_mask, forced)
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
    flips = sum(_check_rounding(s, seen64[s], seen32[s], forced[s], scales[s]) for s in forced)
    logits64, hidden64, k64, v64 = ref64
    logits32, hidden32, k32, v32 = ref32
    assert_close(first["hidden"][0], hidden32[:PROMPT], hidden64[:PROMPT], "prefill hidden")
    assert_close(second["hidden"][0], hidden32[PROMPT:], hidden64[PROMPT:], "step hidden")
    s = PROMPT + NODES
    assert_close(sess.k[:, 0, :, :s], k32, k64, "key cache")
    assert_close(sess.v[:, 0, :, :s], v32, v64, "value cache")
    assert_ranked_like(second["node_argmax"][0][:, None], logits32[PROMPT:], logits64[PROMPT:], "node_argmax")
    print(f"{variant}/{kv}: {flips} near-tie rounding flips")


def test_canonical_graph_holds_fp8_weights_and_standard_qdq(tmp_path: Path) -> None:
    ckpt = read_fp8_checkpoint(fixture_fp8()[0])
    proto = build_target(ckpt.model, variant="standard", mode="greedy", max_seq_len=CAP, fp8=ckpt.spec)
    fp8_inits = [t for t in proto.graph.initializer if t.data_type == FP8 and len(t.dims) == 2]
    assert len(fp8_inits) == 4 * ckpt.cfg.num_hidden_layers  # packed qkv, o, gate_up, down per layer
    ops = {(n.domain, n.op_type) for n in proto.graph.node}
    assert ("", "QuantizeLinear") in ops and ("", "DequantizeLinear") in ops
    assert not any(d == "trt" or op.startswith("TRT_") for d, op in ops)  # no modelopt trt::TRT_FP8* ops
    for n in proto.graph.node:
        if n.op_type == "QuantizeLinear":
            assert helper.get_attribute_value(next(a for a in n.attribute if a.name == "saturate")) == 1
    res = write_models(proto, tmp_path / "g", "target", {})
    ort_model = onnx.load(str(res.ort), load_external_data=False)
    weight_dq = [
        n
        for n in ort_model.graph.node
        if n.op_type == "DequantizeLinear" and n.input[0] in {t.name for t in ort_model.graph.initializer}
    ]
    assert not weight_dq  # the ORT twin spells them Cast · scale (folded by ORT at load)
    casts = [n for n in ort_model.graph.node if n.op_type == "Cast" and n.name.endswith("/cast")]
    assert len(casts) == len(fp8_inits)


def test_a_wrong_input_scale_is_caught(tmp_path: Path) -> None:
    """The rounding check is no rubber stamp: the graph exported with layer 1's o_proj input scale off by
    1 % (the reference keeps the checkpoint's) fails it."""
    from dataclasses import replace

    ckpt = read_fp8_checkpoint(fixture_fp8()[0])
    lin = ckpt.spec.linears["layers.1.self_attn.o_proj"]
    bad = Fp8Spec(
        {**ckpt.spec.linears, "layers.1.self_attn.o_proj": replace(lin, input_scale=lin.input_scale * 1.01)},
        ckpt.spec.kv_scales,
    )
    cfg = ckpt.cfg
    path, tags = export_tagged(ckpt.model, bad, "standard", tmp_path / "bad")
    sess = Session(path, 1, cfg.num_hidden_layers, cfg.num_key_value_heads, CAP, cfg.head_dim)
    first, second, tokens, positions, seq_mask = _run_scenario(sess, np.random.default_rng(7), cfg.vocab_size)
    site = "layer1/o_proj"
    forced = _forced(tags, first, second, cfg.num_key_value_heads)
    *_, seen64 = _reference(ckpt.model, ckpt.spec, torch.float64, tokens, positions, seq_mask, forced)
    *_, seen32 = _reference(ckpt.model, ckpt.spec, torch.float32, tokens, positions, seq_mask, forced)
    with pytest.raises(AssertionError, match="beyond the fp32 bound"):
        _check_rounding(site, seen64[site], seen32[site], forced[site], float(lin.input_scale))
