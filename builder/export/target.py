"""The target step graph: one graph for prefill and decoding steps (I/O contract: `builder.export`).

embed → decoder layers (variant attention, KV written at past_len + j) → final norm = `hidden` →
LM head on the verify nodes only → `node_argmax` and trtspec::TreeVerify → (optionally) the Medusa
heads' top-K at the last accepted node. With an `Fp8Spec` (modelopt's FP8 checkpoint) the quantized
linears become Q/DQ + FP8 weights (`builder.export.qdq`), the LM head too if it is quantized.

`precision` (`builder.export.contract.Precision`): the CPU form is float32 (the default); the GPU form
computes in bfloat16 / float16 (the logits are cast to float32 for `node_argmax`, and by TreeVerify
itself) and may store an FP8 KV cache. Inputs and outputs are declared from `builder.export.contract`.

EAGLE-3 (`Features`, a method with `Method.target_features`): `hidden` is the draft's fc folded in,
fc(concat(residual stream after layers a, b, c)) [B, T, C], instead of the final norm's output (which the LM head
still reads). Why fold it here rather than export the 3·C-wide features: fc is linear and per position, so the
rows the engine keeps (the accepted chain's, the prefill's) of fc(features) are fc of those rows — the same
numbers; and then `hidden` has the width C that the EAGLE draft-graph contract's `hidden_in` has (the draft's:
the target's, or its own where a draft is narrower or wider), so the draft graph (`builder.export.eagle3`), the
engines' bindings, `EagleHost` and the drafter run unchanged, and the host copies a third of the bytes per accepted
row. fc stays in the activation dtype (never FP8: the draft's modules are excluded from quantization).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import onnx
import torch

from builder.errors import UserError
from builder.export.artifacts import ExportResult, data_name, write_models
from builder.export.attention import StepValues, make_variant
from builder.export.contract import CPU, TARGET, Precision, declared
from builder.export.graph import F32, I32, I64, DataSink, Graph, data_sink
from builder.export.llama import attn_shape, check_dtype, decoder, layer_caches, layer_weights, rope_tables, to_numpy
from builder.export.medusa import SCOPE as MEDUSA_SCOPE
from builder.export.medusa import medusa_topk as emit_medusa
from builder.export.qdq import Fp8Spec, fake_quant, scales_in, single
from builder.export.qdq import weight as fp8_weight
from builder.model.llama import Llama
from builder.speculative.medusa.heads import MedusaHeads
from plugins.tree_verify import onnx_op
from plugins.tree_verify.contract import DOMAIN, OP_VERSION

Mode = Literal["greedy", "rejection"]
MODES = ("greedy", "rejection")
SAMPLING_INPUTS = ("temperature", "top_p", "uniforms")
VERIFY_OUTPUTS = ("accepted_len", "best_path", "output_tokens")


@dataclass(frozen=True)
class Features:
    """EAGLE-3's target features with the draft's fc folded in (module docstring)."""

    layers: tuple[int, ...]  # output-of-layer ids (0-based), low to high: the concatenation's order
    fc: torch.Tensor  # [Cd, n·C] the draft's fc weight (nn.Linear layout, no bias); Cd the draft's width

    @property
    def width(self) -> int:
        return int(self.fc.shape[0])

    def check(self, num_layers: int, hidden: int) -> None:
        n = len(self.layers)
        if not n or len(set(self.layers)) != n or min(self.layers) < 0 or max(self.layers) >= num_layers:
            raise UserError(
                f"feature layers {list(self.layers)} must be distinct layers of the {num_layers}-layer target",
                field="speculative.aux_layers",
                allowed=f"distinct ids in 0..{num_layers - 1}",
            )
        if self.fc.dim() != 2 or self.fc.shape[1] != n * hidden:
            raise UserError(
                f"the draft's fc is {tuple(self.fc.shape)}; over {n} features of the {hidden}-wide target it must "
                f"be (draft width, {n * hidden})",
                field="fc.weight",
            )

    def as_dict(self) -> dict[str, object]:
        return {"layers": list(self.layers), "width": self.width}


def build_target(
    model: Llama,
    *,
    variant: str,
    mode: Mode,
    max_seq_len: int,
    medusa: MedusaHeads | None = None,
    medusa_topk: int | None = None,
    fp8: Fp8Spec | None = None,
    sink: DataSink | None = None,
    precision: Precision = CPU,
    features: Features | None = None,
) -> onnx.ModelProto:
    """The canonical target step graph in `precision`; FP8 Q/DQ where `fp8` quantizes; `hidden` = fc of the
    `features` where given (module docstring). Weights in memory, or streamed to `sink` (the proto then refers to
    its file)."""
    cfg, act = model.cfg, precision.act
    check_dtype(model.dtype, "the target model")
    fp8 = None if fp8 is None else scales_in(fp8, act)
    if mode not in MODES:
        raise UserError(f"unknown verification mode {mode!r}", field="mode", allowed=", ".join(MODES))
    if (medusa is None) != (medusa_topk is None):
        raise ValueError("pass medusa and medusa_topk together")
    if features is not None:
        features.check(cfg.num_hidden_layers, cfg.hidden_size)
        if medusa is not None:
            raise ValueError("Medusa heads read the final hidden state: no features with them")
    if medusa is not None and (medusa.hidden_size, medusa.vocab_size) != (cfg.hidden_size, cfg.vocab_size):
        raise UserError("the Medusa heads do not fit the target (hidden_size / vocab_size)", field="medusa")
    var = make_variant(variant, cfg.head_dim, precision)
    g = Graph("target_step", sink)
    fixed = {
        "KV": cfg.num_key_value_heads,
        "CAP": max_seq_len,
        "D": cfg.head_dim,
        "C": cfg.hidden_size if features is None else features.width,  # `hidden`'s width
        "Hm": 0 if medusa is None else medusa.num_heads,
        "K": medusa_topk or 0,
    }
    layers_n, rejection, fused = cfg.num_hidden_layers, mode == "rejection", medusa is not None
    g.declare(
        "inputs", declared(TARGET, "inputs", fixed, precision, layers=layers_n, rejection=rejection, medusa=fused)
    )
    step = StepValues("position_ids", "past_len", write_at="past_len", num_new="num_nodes", tree_mask="tree_mask")
    var.prepare(g, step, *rope_tables(model.inv_freq, max_seq_len, act), attn_shape(cfg))
    with g.scope("embed"):
        embed = g.weight("embed_tokens", to_numpy(model.embed_tokens.weight, act))  # [V, C]
        x = g.op("Gather", embed, "tokens", axis=0)  # [B, T, C]
    layers = (layer_weights(block, fp8, i, act) for i, block in enumerate(model.layers))  # type: ignore[arg-type]
    residuals: list[str] | None = None if features is None else []
    hidden = decoder(
        g,
        var,
        x,
        layers,
        cfg,
        layer_caches(cfg.num_hidden_layers),
        to_numpy(model.norm.weight, act),
        out="hidden" if features is None else "final_hidden",
        residuals=residuals,
    )  # [B, T, C] after the final norm
    if features is not None and residuals is not None:
        with g.scope("features"):
            cat = g.op("Concat", *(residuals[i] for i in features.layers), axis=2)  # [B, T, n·C]
            g.op("MatMul", cat, g.weight("fc", to_numpy(features.fc.T, act)), out="hidden")  # [B, T, C]
    with g.scope("verify"):
        head_fp8 = None if fp8 is None else fp8.linears.get("lm_head")
        if head_fp8 is not None:
            head_w = single(head_fp8, transposed=True)  # [V, C] FP8
            head, head_scale = fp8_weight(g, "lm_head", head_w, act), head_w.input_scale
        elif cfg.tie_word_embeddings:
            head, head_scale = embed, None  # [V, C]
        elif var.name == "ort":  # [C, V]: one MatMul on [B, Tv, C], no reshapes (measured ~7 % faster than Gemm)
            head, head_scale = g.weight("lm_head_t", to_numpy(model.lm_head.weight.T, act)), None
        else:
            head, head_scale = g.weight("lm_head", to_numpy(model.lm_head.weight, act)), None  # [V, C]
        _verify(
            g,
            model,
            hidden,
            head,
            "verify_index",
            "paths",
            mode,
            head_scale,
            act,
            transposed=var.name == "ort" and head_fp8 is None and not cfg.tie_word_embeddings,
        )
    if medusa is not None and medusa_topk is not None:
        with g.scope("medusa_in"):
            h = _last_accepted_hidden(g, hidden, "verify_index", "paths")  # [B, C]
        emit_medusa(g, var, h, medusa, medusa_topk, out="medusa_topk")
    g.declare(
        "outputs", declared(TARGET, "outputs", fixed, precision, layers=layers_n, rejection=rejection, medusa=fused)
    )
    return g.model({**var.opsets, DOMAIN: OP_VERSION}, doc=f"trtspec target step ({variant}, {mode}, {act})")


def export_target(
    model: Llama,
    out_dir: str | Path,
    *,
    variant: str,
    mode: Mode,
    max_seq_len: int,
    medusa: MedusaHeads | None = None,
    medusa_topk: int | None = None,
    fp8: Fp8Spec | None = None,
    precision: Precision = CPU,
    medusa_nbits: int | None = None,
    features: Features | None = None,
) -> ExportResult:
    """Export the target step graph to `out_dir` (replaced as a whole): `target.onnx` (canonical, with
    trtspec::TreeVerify, in `precision`), `target.ort.onnx` (TreeVerify decomposed for ONNX Runtime; the
    float32 lowering of a bfloat16 / float16 / FP8-cache graph, `builder.export.lower`; `medusa_nbits` 8 or 4:
    the Medusa heads' weight MatMuls block-quantized there, `builder.export.nbits`), `target.data`,
    `export.json` (with `features`: `hidden` is the EAGLE-3 draft's fc of them, module docstring)."""
    settings = {
        "graph": "target_step",
        "variant": variant,
        "mode": mode,
        "max_seq_len": max_seq_len,
        "medusa_heads": None if medusa is None else medusa.num_heads,
        "medusa_topk": medusa_topk,
        "fp8": fp8_summary(fp8),
        "precision": precision.as_dict(),
        "features": None if features is None else features.as_dict(),
    }
    with data_sink(Path(out_dir), data_name("target")) as sink:
        proto = build_target(
            model,
            variant=variant,
            mode=mode,
            max_seq_len=max_seq_len,
            medusa=medusa,
            medusa_topk=medusa_topk,
            fp8=fp8,
            sink=sink,
            precision=precision,
            features=features,
        )
        heads = None if medusa is None or medusa_nbits is None else (medusa_nbits, _in_medusa_heads)
        return write_models(proto, Path(out_dir), "target", settings, sink, heads)


def _in_medusa_heads(node_name: str) -> bool:
    return node_name.startswith(MEDUSA_SCOPE + "/")


def fp8_summary(fp8: Fp8Spec | None) -> dict[str, int] | None:
    if fp8 is None:
        return None
    return {"linears": len(fp8.linears), "kv_layers": len(fp8.kv_scales)}


def _verify(
    g: Graph,
    model: Llama,
    hidden: str,
    head: str,
    verify_index: str,
    paths: str,
    mode: Mode,
    head_scale: np.ndarray | None = None,
    act: str = "float32",
    transposed: bool = False,
) -> None:
    """LM head on the verify nodes, `node_argmax`, TreeVerify (`accepted_len`, `best_path`, `output_tokens`).

    `head` is the LM head value [V, C] (the embedding itself when tied: Gemm with transB=1; the
    DequantizeLinear of the FP8 head when quantized, then `head_scale` is its input scale), or [C, V] when
    `transposed` (a MatMul on [B, Tv, C]). The logits are in the activation dtype `act` (TreeVerify takes them
    as they are and computes in float32)."""
    hv = g.op("GatherND", hidden, g.op("Unsqueeze", verify_index, g.const([2])), batch_dims=1)  # [B, Tv, C]
    bt = g.op("Shape", verify_index)  # [2] = (B, Tv)
    if transposed:
        logits = g.op("MatMul", hv, head)  # [B, Tv, V]
    else:
        flat = g.op("Reshape", hv, g.const([-1, model.cfg.hidden_size]))  # [B·Tv, C]
        if head_scale is not None:
            flat = fake_quant(g, flat, head_scale, "lm_head", act)
        logits = g.op("Gemm", flat, head, transB=1)  # [B·Tv, V]
        logits = g.op("Reshape", logits, g.op("Concat", bt, g.const([-1]), axis=0))  # [B, Tv, V]
    # ArgMax of Cast(logits, FLOAT) exactly as the TreeVerify decomposition computes its own, so that ORT's
    # common-subexpression elimination keeps one ArgMax over [B, Tv, V] (measured ~1 ns per element).
    same = g.op("Cast", logits, to=F32)  # [B, Tv, V] (identity for fp32)
    g.op("ArgMax", same, out="node_argmax", axis=2, keepdims=0, select_last_index=0)  # [B, Tv]
    tokens_v = g.op("Cast", g.op("GatherElements", "tokens", verify_index, axis=1), to=I32)  # [B, Tv]
    draft_probs = _filled(g, bt, 1.0)  # [B, Tv]: our drafters are deterministic (q = 1)
    if mode == "rejection":
        sampling = list(SAMPLING_INPUTS)
    else:  # TreeVerify takes every input; greedy mode reads none of these (pruned from the ORT graph)
        b = g.op("Shape", "past_len")  # [1]
        bw = g.op("Concat", b, g.op("Shape", paths, start=2), axis=0)  # [2] = (B, W)
        sampling = [_filled(g, b, 0.0), _filled(g, b, 1.0), _filled(g, bw, 0.0)]  # temperature, top_p, uniforms
    g.add(
        onnx_op.make_node(
            [logits, tokens_v, paths, *sampling, draft_probs], VERIFY_OUTPUTS, mode, name=g.fresh("TreeVerify")
        )
    )


def _filled(g: Graph, shape: str, value: float) -> str:  # -> float32 tensor of `shape` holding `value`
    return g.op("ConstantOfShape", shape, value=onnx.numpy_helper.from_array(np.full(1, value, np.float32)))


def _last_accepted_hidden(g: Graph, hidden: str, verify_index: str, paths: str) -> str:
    """hidden[b, verify_index[b, paths[b, best_path[b], accepted_len[b] - 1]]] → [B, C]."""
    best = g.op("Unsqueeze", g.op("Cast", "best_path", to=I64), g.const([1]))  # [B, 1]
    row = g.op("GatherND", paths, best, batch_dims=1)  # [B, W] int32
    last = g.op("Sub", g.op("Unsqueeze", g.op("Cast", "accepted_len", to=I64), g.const([1])), g.const(1))  # [B, 1]
    vnode = g.op("Cast", g.op("GatherElements", row, last, axis=1), to=I64)  # [B, 1] verify-node index
    node = g.op("GatherElements", verify_index, vnode, axis=1)  # [B, 1] node index
    return g.op("GatherND", hidden, node, batch_dims=1)  # [B, C]
