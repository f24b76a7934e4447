"""The EAGLE-1 draft step graph (I/O contract: `builder.export`).

fc([embed(t[i+1]); h[i]]) → draft decoder layer(s) (layer 0 without input norm; variant attention, KV
written at past_len + write_offset + i) → `hidden_out` (un-normed, as `EagleDraft.forward`) → the
target's LM head → log_softmax → top-K.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import torch

from builder.errors import UserError
from builder.export.artifacts import ExportResult, write_models
from builder.export.attention import StepValues, make_variant
from builder.export.graph import BOOL, F32, I64, Graph
from builder.export.llama import cache_io, check_dtype, declare_present, decoder, layer_weights, rope_tables, to_numpy
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
) -> onnx.ModelProto:
    """The canonical EAGLE draft step graph (weights in memory)."""
    cfg = draft.cfg
    C, V = cfg.hidden_size, cfg.vocab_size
    check_dtype(draft.dtype, "the EAGLE draft")
    if tuple(lm_head_weight.shape) != (V, C):
        raise UserError(f"LM head shape {tuple(lm_head_weight.shape)} does not fit the draft ({V}, {C})",
                        field="lm_head")  # fmt: skip
    if not 1 <= top_k <= V:
        raise UserError(f"top_k must lie in 1..{V}, got {top_k}", field="top_k")
    var = make_variant(variant, cfg.head_dim)
    g = Graph("eagle_step")
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
        x = g.op("MatMul", g.op("Concat", emb, "hidden_in", axis=2), g.weight("fc", to_numpy(draft.fc.weight.T)))
        if draft.fc.bias is not None:
            x = g.op("Add", x, g.weight("fc_bias", to_numpy(draft.fc.bias)))  # [B, F, C]
    layers = [layer_weights(layer) for layer in draft.layers]  # type: ignore[arg-type]
    hidden = decoder(g, var, x, layers, cfg, caches, final_norm=None, out="hidden_out")  # [B, F, C]
    with g.scope("lm_head"):
        logits = g.op("MatMul", hidden, g.weight("lm_head", to_numpy(lm_head_weight.to(draft.dtype).T)))  # [B, F, V]
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
) -> ExportResult:
    """Export the EAGLE draft step graph to `out_dir` (replaced as a whole): `eagle.onnx`,
    `eagle.ort.onnx` (the same graph: there is no TreeVerify to decompose), `eagle.data`, `export.json`."""
    proto = build_eagle(draft, lm_head_weight, variant=variant, top_k=top_k, max_seq_len=max_seq_len)
    settings = {"graph": "eagle_step", "variant": variant, "top_k": top_k, "max_seq_len": max_seq_len}
    return write_models(proto, Path(out_dir), "eagle", settings)
