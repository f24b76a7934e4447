"""The EAGLE-3 draft step graph (I/O contract: `builder.export`, the EAGLE draft graph's, unchanged).

emb = embed(t[i+1]) (the target's embedding) → a = [input_norm(emb); hidden_norm(h[i])] [B, F, 2C] → attention with
q/k/v over 2C (variant attention, the tree mask, KV written at past_len + write_offset + i, RoPE from the DRAFT's
config: its rope_theta may differ from the target's) → x = h[i] + o_proj(attn) → x + MLP(post_norm(x)) =
`hidden_out` (pre-norm, as `Eagle3Draft.forward`) → the draft's own LM head over its vocabulary (Vd rows) on
norm(x) → log_softmax → top-K, the ranks mapped to target ids (draft id + d2t) (SafeAILab/EAGLE
`eagle/model/cnets.py` @ cb7e0841, `../shared/EAGLE3.md` §1).

Why `hidden_in` is C wide, not 3·C: the draft's fc is folded into the target step graph
(`builder.export.target.Features`): the target's `hidden` output is already fc(concat of the three target
features), and later tree levels feed the draft's own `hidden_out` (C wide, which upstream passes without fc too).
fc is linear and per position, so the rows the engine keeps of fc(features) are fc of the rows kept. The draft
graph's contract is then EAGLE-1's to the byte: `OrtEagleNet` / `EagleHost`, the EAGLE drafter (static trees,
EAGLE-2's dynamic expansion, the draft budget) and the TensorRT bindings serve EAGLE-3 as they are.

Structure as `builder.export.eagle`: `pick_rows` (the `ort` variant's default: the outputs for `out_rows` only,
o_proj / MLP / LM head over R rows), `precision` (float32 CPU form; bfloat16 / float16 GPU form, logits cast to
float32 before the log-softmax), `nbits` (the ORT twin's weight MatMuls block-quantized). No FP8: the draft's
modules stay in the model dtype (`quantization.exclude_modules`), and it has no use for the target's LM head —
`lm_head_weight` / `lm_head_fp8` are accepted for the exporter's common signature (`Method.export_draft`) and
not read.
"""

from __future__ import annotations

import dataclasses
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
from builder.export.qdq import Fp8Spec, LinearFp8
from builder.speculative.eagle3.draft_model import Eagle3Draft

LAYERS = 1  # the midlayer (the draft's config may say otherwise: `random_draft` copies the target's)


def build_eagle3(
    draft: Eagle3Draft,
    *,
    variant: str,
    top_k: int,
    max_seq_len: int,
    sink: DataSink | None = None,
    precision: Precision = CPU,
    pick_rows: bool | None = None,
) -> onnx.ModelProto:
    """The canonical EAGLE-3 draft step graph in `precision` (weights in memory or streamed to `sink`);
    `pick_rows` (None: for the `ort` variant) as `builder.export.eagle` says."""
    cfg = dataclasses.replace(draft.cfg, num_hidden_layers=LAYERS)
    act, C = precision.act, cfg.hidden_size
    check_dtype(draft.dtype, "the EAGLE-3 draft")
    vocab = draft.lm_head.out_features  # Vd
    if not 1 <= top_k <= vocab:
        raise UserError(f"top_k must lie in 1..{vocab} (the draft vocabulary), got {top_k}", field="top_k")
    var = make_variant(variant, cfg.head_dim, precision, chain_branch=False)  # a draft step is mostly tree levels
    rows = variant == "ort" if pick_rows is None else pick_rows
    g = Graph("eagle_step", sink)
    fixed = {"KV": cfg.num_key_value_heads, "CAP": max_seq_len, "D": cfg.head_dim, "C": C, "K": top_k}
    g.declare("inputs", declared(EAGLE, "inputs", fixed, precision, layers=LAYERS, rows=rows))
    with g.scope("step"):
        write_at = g.op("Add", "past_len", "write_offset")  # [B] slot of new row 0
    var.prepare(
        g,
        StepValues("position_ids", "past_len", write_at, "num_new", "tree_mask"),
        *rope_tables(draft.inv_freq, max_seq_len, act),  # the draft's own RoPE
        attn_shape(cfg),
    )
    layer = draft.midlayer
    eps = cfg.rms_norm_eps
    with g.scope("input"):
        emb = g.op("Gather", g.weight("embed_tokens", to_numpy(draft.embed_tokens.weight, act)), "tokens", axis=0)
        a = g.op(
            "Concat",
            var.norm(g, emb, g.weight("input_norm", to_numpy(layer.input_layernorm.weight, act)), eps),
            var.norm(g, "hidden_in", g.weight("hidden_norm", to_numpy(layer.hidden_norm.weight, act)), eps),
            axis=2,
        )  # [B, F, 2C]
    w = dataclasses.replace(layer_weights(layer, None, 0, act), input_norm=None)  # type: ignore[arg-type]
    hidden = decoder(
        g,
        var,
        "hidden_in",  # the residual stream: h itself, not normed
        [w],
        cfg,
        layer_caches(LAYERS),
        final_norm=None,
        out="hidden_out",
        rows="out_rows" if rows else None,
        attn_in=a,
    )  # [B, F, C] ([B, R, C] with rows)
    ids = draft.vocab_ids  # [Vd] target ids of the draft rows; None: the whole vocabulary
    with g.scope("lm_head"):
        normed = var.norm(g, hidden, g.weight("norm", to_numpy(draft.norm.weight, act)), eps)  # [B, R, C]
        head = to_numpy(draft.lm_head.weight.T, act)  # [C, Vd]
        logits = g.op("MatMul", *operands(g, normed, head, "lm_head", act))  # [B, R, Vd]
        if act != "float32":
            logits = g.op("Cast", logits, to=F32)  # [B, R, Vd] float32 (exact)
        logp = g.op("LogSoftmax", logits, axis=-1)  # [B, R, Vd]
        if ids is None:
            g.op_n(
                "TopK", logp, g.const([top_k]), outs=["topk_logprobs", "topk_tokens"], axis=-1, largest=1, sorted=1
            )  # [B, R, K] each
        else:  # draft rows -> target token ids (draft id + d2t)
            _, rank = g.op_n("TopK", logp, g.const([top_k]), outs=["topk_logprobs", ""], axis=-1, largest=1, sorted=1)
            table = g.weight("draft_vocab", ids.numpy().astype("int32"))  # [Vd] int32: TensorRT's gather index type
            g.op("Cast", g.op("Gather", table, rank, axis=0), out="topk_tokens", to=I64)  # [B, R, K]
    g.declare("outputs", declared(EAGLE, "outputs", fixed, precision, layers=LAYERS, rows=rows))
    return g.model(var.opsets, doc=f"trtspec EAGLE-3 draft step ({variant}, {act})")


def export_eagle3(
    draft: Eagle3Draft,
    lm_head_weight: torch.Tensor | None,  # [V, C] the target's: not read (module docstring)
    out_dir: str | Path,
    *,
    variant: str,
    top_k: int,
    max_seq_len: int,
    fp8: Fp8Spec | None = None,
    lm_head_fp8: LinearFp8 | None = None,  # the target's LM head: not read
    precision: Precision = CPU,
    pick_rows: bool | None = None,
    nbits: int | None = None,
) -> ExportResult:
    """Export the EAGLE-3 draft step graph to `out_dir` (replaced as a whole): `eagle.onnx`, `eagle.ort.onnx` (the
    float32 twin; `nbits` 8 or 4: its weight MatMuls block-quantized), `eagle.data`, `export.json` — the files
    `builder.export.eagle.export_eagle` writes, so the engine stages take them as they are."""
    if fp8 is not None and fp8.linears:
        raise UserError(
            "the EAGLE-3 draft is exported unquantized (its modules stay in the model dtype); FP8 draft linears "
            "were given",
            field="quantization.exclude_modules",
            allowed="the draft's module (eagle3_draft) excluded from FP8",
        )
    rows = variant == "ort" if pick_rows is None else pick_rows
    settings = {
        "graph": "eagle_step",
        "method": "eagle3",
        "variant": variant,
        "top_k": top_k,
        "max_seq_len": max_seq_len,
        "pick_rows": rows,
        "draft_vocab": draft.draft_vocab_size,
        "aux_layers": list(draft.aux_layers),  # the target graph computes fc of their outputs (`Features`)
        "fp8": None,
        "precision": precision.as_dict(),
    }
    with data_sink(Path(out_dir), data_name("eagle")) as sink:
        proto = build_eagle3(
            draft, variant=variant, top_k=top_k, max_seq_len=max_seq_len, sink=sink, precision=precision, pick_rows=rows
        )
        return write_models(
            proto, Path(out_dir), "eagle", settings, sink, None if nbits is None else (nbits, lambda _name: True)
        )
