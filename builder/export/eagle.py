"""The EAGLE-1 draft step graph (I/O contract: `builder.export`).

fc([embed(t[i+1]); h[i]]) → draft decoder layer(s) (layer 0 without input norm; variant attention, KV
written at past_len + write_offset + i) → `hidden_out` (un-normed, as `EagleDraft.forward`) → the
target's LM head → log_softmax → top-K. FP8 Q/DQ where the `Fp8Spec` quantizes (the draft's own names:
"fc", "layers.{i}.…"; the LM head is the target's, FP8 when `lm_head_fp8` is given).
"""

from __future__ import annotations

from pathlib import Path

import onnx
import torch

from builder.errors import UserError
from builder.export.artifacts import ExportResult, data_name, write_models
from builder.export.attention import StepValues, make_variant
from builder.export.graph import BOOL, F32, I64, DataSink, Graph, data_sink
from builder.export.llama import (cache_io, check_dtype, declare_present, decoder, layer_weights, operands,
                                  rope_tables, to_numpy)  # fmt: skip
from builder.export.qdq import Fp8Spec, LinearFp8, single
from builder.speculative.eagle.draft_model import EagleDraft

EAGLE_INPUTS = ("tokens", "hidden_in", "position_ids", "past_len", "write_offset", "num_new", "tree_mask")
EAGLE_OUTPUTS = ("hidden_out", "topk_tokens", "topk_logprobs")


def build_eagle(
    draft: EagleDraft,
    lm_head_weight: torch.Tensor,  # [V, C] the target's LM head
    *,
    variant: str,
    top_k: int,
    max_seq_len: int,
    fp8: Fp8Spec | None = None,
    lm_head_fp8: LinearFp8 | None = None,
    sink: DataSink | None = None,
) -> onnx.ModelProto:
    """The canonical EAGLE draft step graph (weights in memory); FP8 Q/DQ where `fp8` quantizes."""
    cfg = draft.cfg
    C, V = cfg.hidden_size, cfg.vocab_size
    check_dtype(draft.dtype, "the EAGLE draft")
    if tuple(lm_head_weight.shape) != (V, C):
        raise UserError(f"LM head shape {tuple(lm_head_weight.shape)} does not fit the draft ({V}, {C})",
                        field="lm_head")  # fmt: skip
    if not 1 <= top_k <= V:
        raise UserError(f"top_k must lie in 1..{V}, got {top_k}", field="top_k")
    var = make_variant(variant, cfg.head_dim)
    g = Graph("eagle_step", sink)
    g.input("tokens", I64, ["B", "F"])
    g.input("hidden_in", F32, ["B", "F", C])
    g.input("position_ids", I64, ["B", "F"])
    for name in ("past_len", "write_offset", "num_new"):
        g.input(name, I64, ["B"])
    g.input("tree_mask", BOOL, ["B", "F", "U"])
    caches = cache_io(g, cfg, max_seq_len)
    with g.scope("step"):
        write_at = g.op("Add", "past_len", "write_offset")  # [B] slot of new row 0
    var.prepare(g, StepValues("position_ids", "past_len", write_at, "num_new", "tree_mask"),
                *rope_tables(draft.inv_freq, max_seq_len))  # fmt: skip
    with g.scope("fc"):
        emb = g.op("Gather", g.weight("embed_tokens", to_numpy(draft.embed_tokens.weight)), "tokens", axis=0)
        fc_fp8 = None if fp8 is None else fp8.linears.get("fc")
        fc = to_numpy(draft.fc.weight.T) if fc_fp8 is None else single(fc_fp8)  # [2C, C]
        x = g.op("MatMul", *operands(g, g.op("Concat", emb, "hidden_in", axis=2), fc, "fc"))
        if draft.fc.bias is not None:
            x = g.op("Add", x, g.weight("fc_bias", to_numpy(draft.fc.bias)))  # [B, F, C]
    layers = (layer_weights(layer, fp8, i) for i, layer in enumerate(draft.layers))  # type: ignore[arg-type]
    hidden = decoder(g, var, x, layers, cfg, caches, final_norm=None, out="hidden_out")  # [B, F, C]
    with g.scope("lm_head"):
        head = to_numpy(lm_head_weight.to(draft.dtype).T) if lm_head_fp8 is None else single(lm_head_fp8)  # [C, V]
        logits = g.op("MatMul", *operands(g, hidden, head, "lm_head"))  # [B, F, V]
        logp = g.op("LogSoftmax", logits, axis=-1)  # [B, F, V]
        g.op_n("TopK", logp, g.const([top_k]), outs=["topk_logprobs", "topk_tokens"], axis=-1, largest=1,
               sorted=1)  # [B, F, K] each  # fmt: skip
    g.output("hidden_out", F32, ["B", "F", C])
    g.output("topk_tokens", I64, ["B", "F", top_k])
    g.output("topk_logprobs", F32, ["B", "F", top_k])
    declare_present(g, cfg, max_seq_len, caches)
    return g.model(var.opsets, doc=f"trtspec EAGLE draft step ({variant})")


def export_eagle(
    draft: EagleDraft,
    lm_head_weight: torch.Tensor,  # [V, C]
    out_dir: str | Path,
    *,
    variant: str,
    top_k: int,
    max_seq_len: int,
    fp8: Fp8Spec | None = None,
    lm_head_fp8: LinearFp8 | None = None,
) -> ExportResult:
    """Export the EAGLE draft step graph to `out_dir` (replaced as a whole): `eagle.onnx`,
    `eagle.ort.onnx` (the same graph: there is no TreeVerify to decompose), `eagle.data`, `export.json`."""
    settings = {"graph": "eagle_step", "variant": variant, "top_k": top_k, "max_seq_len": max_seq_len,
                "fp8": None if fp8 is None and lm_head_fp8 is None else {
                    "linears": 0 if fp8 is None else len(fp8.linears), "kv_layers": 0 if fp8 is None else
                    len(fp8.kv_scales), "lm_head": lm_head_fp8 is not None}}  # fmt: skip
    with data_sink(Path(out_dir), data_name("eagle")) as sink:
        proto = build_eagle(draft, lm_head_weight, variant=variant, top_k=top_k, max_seq_len=max_seq_len, fp8=fp8,
                            lm_head_fp8=lm_head_fp8, sink=sink)  # fmt: skip
        return write_models(proto, Path(out_dir), "eagle", settings, sink)
