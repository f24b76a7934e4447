"""Check a `CheckpointRequest` against its inputs and index them: everything known before any tensor is read.

Bad input is a `UserError` naming the request field (the recipe path for tp/pp and the method), the file and the
allowed values. Rules from upstream: tp must split the attention heads, the KV heads (or be a multiple of them:
`dup_kv_weight` asserts tp % num_kv_heads == 0), the MLP and the hidden size of column-split draft
linears; pp <= num_layers (`MappingBase.pp_layers`); a draft's max_draft_len in 1..256. The method must be one
TensorRT-LLM 1.2's engine flow serves (`builder.trtllm.flow`: else its `NotServed` reason); a draft's own rules
(EAGLE: pp 1, "Pipeline parallelism is not supported in EAGLE yet.", `examples/eagle/convert_checkpoint.py`)
and its indexing are its `Draft`'s (`drafts.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from builder.errors import UserError
from builder.model.config import LlamaConfig
from builder.speculative.method import EngineFlow
from builder.trtllm.checkpoint.drafts import Draft, Inputs, draft_of
from builder.trtllm.checkpoint.names import Heads, Quant
from builder.trtllm.checkpoint.sources import SourceFiles, check_shapes, fp8_layout, index_fp8, index_target
from builder.trtllm.flow import engine_flow

if TYPE_CHECKING:
    from builder.trtllm.checkpoint import CheckpointRequest

DTYPES = ("bfloat16", "float16", "float32")
ST_DTYPE = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}
MAX_DRAFT_LEN = 256  # tensorrt_llm/builder.py asserts it for EAGLE; the converter holds every draft to it


def prepare(req: CheckpointRequest) -> Inputs:
    """Validate the request and index its inputs (headers only)."""
    flow, draft = _check_scalars(req)
    base = Path(req.base_dir)
    cfg = LlamaConfig.from_json(base / "config.json")
    check_split(cfg, req.tp, req.pp, "target")
    files = SourceFiles()
    from builder.model.loader import expected_shapes

    expected = expected_shapes(cfg)
    if req.fp8_dir is None:
        if req.kv_cache_fp8:
            raise UserError("an FP8 KV cache needs the quantize stage's checkpoint (its k/v scales)", field="fp8_dir")
        where = index_target(files, base)
        check_shapes(files, "base", expected, where, extra_ok=_tied_head(cfg))
        inputs = Inputs(cfg, files, flow, draft=draft)
    else:
        quant = _index_fp8(files, Path(req.fp8_dir), cfg, expected, req.kv_cache_fp8)
        inputs = Inputs(cfg, files, flow, quant=quant, draft=draft)
    if draft is not None:
        inputs.indexed = draft.index(req, inputs)
    return inputs


def _tied_head(cfg: LlamaConfig) -> frozenset[str]:
    return frozenset({"lm_head.weight"}) if cfg.tie_word_embeddings else frozenset()


def _check_scalars(req: CheckpointRequest) -> tuple[EngineFlow, Draft | None]:
    """The request's own values; returns the method's engine flow and its draft."""
    if req.dtype not in DTYPES:
        raise UserError(f"unsupported dtype {req.dtype!r}", field="dtype", allowed=", ".join(DTYPES))
    flow = engine_flow(req.method, unknown_field="method")
    draft = draft_of(flow)
    for name in ("tp", "pp"):
        value = getattr(req, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UserError(f"{name} must be a positive integer, got {value!r}", field=f"parallelism.{name}")
    if draft is not None:
        if req.draft_dir is None:
            raise UserError(f"{req.method} needs its draft checkpoint directory", field="draft_dir")
        if not 1 <= req.max_draft_len <= MAX_DRAFT_LEN:
            raise UserError(
                f"max_draft_len must be in 1..{MAX_DRAFT_LEN} for {req.method}, got {req.max_draft_len}",
                field="max_draft_len",
                allowed=f"1..{MAX_DRAFT_LEN}",
            )
        draft.check(req)
    elif req.draft_dir is not None:
        raise UserError(f"method {req.method} has no draft weights; draft_dir must be empty", field="draft_dir")
    return flow, draft


def check_split(cfg: LlamaConfig, tp: int, pp: int, what: str) -> None:
    h = Heads.of(cfg)
    kv_ok = h.KV % tp == 0 if h.KV >= tp else tp % h.KV == 0
    problems = [
        (h.H % tp, f"num_attention_heads={h.H}"),
        (not kv_ok, f"num_key_value_heads={h.KV}"),
        (h.I % tp, f"intermediate_size={h.I}"),
        (h.C % tp, f"hidden_size={h.C}"),
    ]
    for bad, what_ in problems:
        if bad:
            ok = [t for t in (1, 2, 4, 8, 16) if _splits(h, t)]
            raise UserError(
                f"tp={tp} does not split the {what}'s {what_}", field="parallelism.tp", allowed=", ".join(map(str, ok))
            )
    if pp > cfg.num_hidden_layers:
        raise UserError(
            f"pp={pp} exceeds the {what}'s num_hidden_layers={cfg.num_hidden_layers}",
            field="parallelism.pp",
            allowed=f"1..{cfg.num_hidden_layers}",
        )


def _splits(h: Heads, tp: int) -> bool:
    kv_ok = h.KV % tp == 0 if h.KV >= tp else tp % h.KV == 0
    return h.H % tp == 0 and kv_ok and h.I % tp == 0 and h.C % tp == 0


def _index_fp8(files: SourceFiles, folder: Path, cfg: LlamaConfig, expected: dict, kv_fp8: bool) -> Quant:
    qcfg = LlamaConfig.from_json(folder / "config.json")
    if qcfg != cfg:
        raise UserError(
            "the quantized checkpoint's config.json describes another model than base_dir's",
            location=str(folder / "config.json"),
            field="fp8_dir",
        )
    index_fp8(files, folder)
    fp8, kv = fp8_layout(files, expected, folder)
    if kv and not kv_fp8:
        raise UserError(
            "the quantized checkpoint has KV cache scales but kv_cache_fp8 is false",
            location=str(folder),
            field="kv_cache_fp8",
            allowed="true",
        )
    if kv_fp8 and set(kv) != set(range(cfg.num_hidden_layers)):
        raise UserError(
            "kv_cache_fp8 needs k/v scales for every layer of the quantized checkpoint",
            location=str(folder),
            field="kv_cache_fp8",
        )
    for i in range(cfg.num_hidden_layers):
        qkv = {f"model.layers.{i}.self_attn.{p}_proj" for p in "qkv"}
        if 0 < len(qkv & fp8) < 3:
            raise UserError(f"layer {i}: q, k and v must be quantized together", location=str(folder))
    return Quant(frozenset(fp8), kv_fp8, kv)
