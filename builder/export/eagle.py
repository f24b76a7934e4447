"""The EAGLE-1 draft step graph (I/O contract: `builder.export`).

fc([embed(t[i+1]); h[i]]) → draft decoder layer(s) (layer 0 without input norm; variant attention, KV
written at past_len + write_offset + i) → `hidden_out` (un-normed, as `EagleDraft.forward`) → the
target's LM head → log_softmax → top-K (with a draft vocabulary, `EagleDraft.set_draft_vocab`: the LM head's rows
for those tokens only, and the top-K ranks gathered back to target token ids). FP8 Q/DQ where the `Fp8Spec`
quantizes (the draft's own names: "fc", "layers.{i}.…"; the LM head is the target's, FP8 when `lm_head_fp8` is given).

`precision` (`builder.export.contract.Precision`): float32 (the CPU form), or bfloat16 / float16 for the GPU
form, where the LM head's logits are cast to float32 before the log-softmax (`topk_logprobs` is float32 in
every form). Inputs and outputs are declared from `builder.export.contract`.

`pick_rows` (the default for the `ort` variant, the graph ONNX Runtime runs): the graph takes `out_rows`
[B, R] and returns `hidden_out` / `topk_*` for those rows only ([B, R, ·]); the draft layer's attention and
KV writes still cover all F new rows, but o_proj, the MLP and the LM head run over R rows
(`builder.export.llama.decoder`'s `rows`). An `extend` needs one row per sequence (its last pair's), so a
step's extend of ~6 pairs costs about one row's MLP and LM head instead of six, and a prompt's pairs (the
draft's prefill) one instead of hundreds; an `expand` asks for all F. The TensorRT form keeps all F rows.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import torch

from builder.errors import UserError
from builder.export.artifacts import ExportResult, data_name, write_models
from builder.export.attention import StepValues, make_variant
from builder.export.contract import CPU, EAGLE, Precision, declared
from builder.export.graph import F32, I64, DataSink, Graph, data_sink
from builder.export.llama import (
    attn_shape,
    check_dtype,
    decoder,
    layer_caches,
    layer_weights,
    operands,
    rope_tables,
    to_numpy,
)
from builder.export.qdq import Fp8Spec, LinearFp8, rows_of, scales_in, single
from builder.speculative.eagle.draft_model import EagleDraft


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
    precision: Precision = CPU,
    pick_rows: bool | None = None,
) -> onnx.ModelProto:
    """The canonical EAGLE draft step graph in `precision` (weights in memory); FP8 Q/DQ where `fp8` quantizes;
    `pick_rows` (None: for the `ort` variant) as the module docstring says."""
    cfg, act = draft.cfg, precision.act
    C, V = cfg.hidden_size, cfg.vocab_size
    check_dtype(draft.dtype, "the EAGLE draft")
    fp8 = None if fp8 is None else scales_in(fp8, act)
    if lm_head_fp8 is not None:
        lm_head_fp8 = scales_in(Fp8Spec({"lm_head": lm_head_fp8}), act).linears["lm_head"]
    if tuple(lm_head_weight.shape) != (V, C):
        raise UserError(
            f"LM head shape {tuple(lm_head_weight.shape)} does not fit the draft ({V}, {C})", field="lm_head"
        )
    vocab = draft.draft_vocab_size or V
    if not 1 <= top_k <= vocab:
        raise UserError(f"top_k must lie in 1..{vocab} (the draft vocabulary), got {top_k}", field="top_k")
    var = make_variant(variant, cfg.head_dim, precision, chain_branch=False)  # a draft step is mostly tree levels
    rows = variant == "ort" if pick_rows is None else pick_rows
    g = Graph("eagle_step", sink)
    fixed = {"KV": cfg.num_key_value_heads, "CAP": max_seq_len, "D": cfg.head_dim, "C": C, "K": top_k}
    g.declare("inputs", declared(EAGLE, "inputs", fixed, precision, layers=cfg.num_hidden_layers, rows=rows))
    with g.scope("step"):
        write_at = g.op("Add", "past_len", "write_offset")  # [B] slot of new row 0
    var.prepare(
        g,
        StepValues("position_ids", "past_len", write_at, "num_new", "tree_mask"),
        *rope_tables(draft.inv_freq, max_seq_len, act),
        attn_shape(cfg),
    )
    with g.scope("fc"):
        emb = g.op("Gather", g.weight("embed_tokens", to_numpy(draft.embed_tokens.weight, act)), "tokens", axis=0)
        fc_fp8 = None if fp8 is None else fp8.linears.get("fc")
        fc = to_numpy(draft.fc.weight.T, act) if fc_fp8 is None else single(fc_fp8)  # [2C, C]
        x = g.op("MatMul", *operands(g, g.op("Concat", emb, "hidden_in", axis=2), fc, "fc", act))
        if draft.fc.bias is not None:
            x = g.op("Add", x, g.weight("fc_bias", to_numpy(draft.fc.bias, act)))  # [B, F, C]
    layers = (layer_weights(layer, fp8, i, act) for i, layer in enumerate(draft.layers))  # type: ignore[arg-type]
    hidden = decoder(
        g,
        var,
        x,
        layers,
        cfg,
        layer_caches(cfg.num_hidden_layers),
        final_norm=None,
        out="hidden_out",
        rows="out_rows" if rows else None,
    )  # [B, F, C] ([B, R, C] with rows)
    ids = None if draft.vocab_ids is None else draft.vocab_ids.numpy()  # the draft vocabulary's target ids
    with g.scope("lm_head"):
        if lm_head_fp8 is None:
            w = lm_head_weight.to(draft.dtype)
            head = to_numpy((w if ids is None else w[torch.from_numpy(ids)]).T, act)  # [C, V] (V: the draft's)
        else:
            head = single(lm_head_fp8 if ids is None else rows_of(lm_head_fp8, ids))
        logits = g.op("MatMul", *operands(g, hidden, head, "lm_head", act))  # [B, F or R, V] (and below)
        if act != "float32":
            logits = g.op("Cast", logits, to=F32)  # [B, F, V] float32 (exact)
        logp = g.op("LogSoftmax", logits, axis=-1)  # [B, F, V]
        if ids is None:
            g.op_n(
                "TopK", logp, g.const([top_k]), outs=["topk_logprobs", "topk_tokens"], axis=-1, largest=1, sorted=1
            )  # [B, F, K] each
        else:  # draft rows -> target token ids
            _, rank = g.op_n("TopK", logp, g.const([top_k]), outs=["topk_logprobs", ""], axis=-1, largest=1, sorted=1)
            tokens = g.op("Gather", g.weight("draft_vocab", ids.astype("int32")), rank, axis=0)  # int32: TensorRT's
            g.op("Cast", tokens, out="topk_tokens", to=I64)
    g.declare("outputs", declared(EAGLE, "outputs", fixed, precision, layers=cfg.num_hidden_layers, rows=rows))
    return g.model(var.opsets, doc=f"trtspec EAGLE draft step ({variant}, {act})")


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
    precision: Precision = CPU,
    pick_rows: bool | None = None,
    nbits: int | None = None,
) -> ExportResult:
    """Export the EAGLE draft step graph to `out_dir` (replaced as a whole): `eagle.onnx`, `eagle.ort.onnx`
    (the same graph in float32: there is no TreeVerify to decompose; the float32 lowering of a GPU-form
    graph, `builder.export.lower`; `nbits` 8 or 4: its weight MatMuls block-quantized, `builder.export.nbits`),
    `eagle.data`, `export.json`."""
    rows = variant == "ort" if pick_rows is None else pick_rows
    settings = {
        "graph": "eagle_step",
        "variant": variant,
        "top_k": top_k,
        "max_seq_len": max_seq_len,
        "pick_rows": rows,
        "draft_vocab": draft.draft_vocab_size,
        "fp8": None
        if fp8 is None and lm_head_fp8 is None
        else {
            "linears": 0 if fp8 is None else len(fp8.linears),
            "kv_layers": 0 if fp8 is None else len(fp8.kv_scales),
            "lm_head": lm_head_fp8 is not None,
        },
        "precision": precision.as_dict(),
    }
    with data_sink(Path(out_dir), data_name("eagle")) as sink:
        proto = build_eagle(
            draft,
            lm_head_weight,
            variant=variant,
            top_k=top_k,
            max_seq_len=max_seq_len,
            fp8=fp8,
            lm_head_fp8=lm_head_fp8,
            sink=sink,
            precision=precision,
            pick_rows=rows,
        )
        return write_models(
            proto, Path(out_dir), "eagle", settings, sink, None if nbits is None else (nbits, lambda _name: True)
        )
