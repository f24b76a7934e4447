"""Check a `CheckpointRequest` against its inputs and index them: everything known before any tensor is read.

Bad input is a `UserError` naming the request field (the recipe path for tp/pp), the file and the allowed
values. Rules from upstream: tp must split the attention heads, the KV heads (or be a multiple of them:
`dup_kv_weight` asserts tp % num_kv_heads == 0), the MLP and the hidden size of column-split draft
linears; pp <= num_layers (`MappingBase.pp_layers`); EAGLE refuses pp > 1 ("Pipeline parallelism is not
supported in EAGLE yet.", `examples/eagle/convert_checkpoint.py`) and max_draft_len > 256.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from builder.errors import UserError
from builder.model.config import LlamaConfig
from builder.trtllm.checkpoint.names import Heads, Quant
from builder.trtllm.checkpoint.sources import SourceFiles, check_shapes, fp8_layout, index_fp8, index_target, read_json

if TYPE_CHECKING:
    from builder.trtllm.checkpoint import CheckpointRequest

DTYPES = ("bfloat16", "float16", "float32")
METHODS = ("none", "medusa", "eagle", "lookahead")
ST_DTYPE = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}


@dataclass
class Inputs:
    """Everything the writer needs, checked."""

    cfg: LlamaConfig
    files: SourceFiles
    quant: Quant = field(default_factory=Quant)
    medusa_heads: int = 0
    medusa_layers: int = 0
    draft: LlamaConfig | None = None  # EAGLE draft
    fc_bias: bool = True


def prepare(req: CheckpointRequest) -> Inputs:
    """Validate the request and index its inputs (headers only)."""
    _check_scalars(req)
    base = Path(req.base_dir)
    cfg = LlamaConfig.from_json(base / "config.json")
    _check_split(cfg, req.tp, req.pp, "target")
    files = SourceFiles()
    from builder.model.loader import expected_shapes

    expected = expected_shapes(cfg)
    if req.fp8_dir is None:
        if req.kv_cache_fp8:
            raise UserError("an FP8 KV cache needs the quantize stage's checkpoint (its k/v scales)", field="fp8_dir")
        where = index_target(files, base)
        check_shapes(files, "base", expected, where, extra_ok=_tied_head(cfg))
        inputs = Inputs(cfg, files)
    else:
        inputs = Inputs(cfg, files, quant=_index_fp8(files, Path(req.fp8_dir), cfg, expected, req.kv_cache_fp8))
    if req.method == "medusa":
        _medusa(inputs, req)
    elif req.method == "eagle":
        _eagle(inputs, req)
    return inputs


def _tied_head(cfg: LlamaConfig) -> frozenset[str]:
    return frozenset({"lm_head.weight"}) if cfg.tie_word_embeddings else frozenset()


def _check_scalars(req: CheckpointRequest) -> None:
    if req.dtype not in DTYPES:
        raise UserError(f"unsupported dtype {req.dtype!r}", field="dtype", allowed=", ".join(DTYPES))
    if req.method not in METHODS:
        raise UserError(f"unknown method {req.method!r}", field="method", allowed=", ".join(METHODS))
    for name in ("tp", "pp"):
        value = getattr(req, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UserError(f"{name} must be a positive integer, got {value!r}", field=f"parallelism.{name}")
    if req.method in ("medusa", "eagle"):
        if req.draft_dir is None:
            raise UserError(f"{req.method} needs its draft checkpoint directory", field="draft_dir")
        if not 1 <= req.max_draft_len <= 256:
            raise UserError(
                f"max_draft_len must be in 1..256 for {req.method}, got {req.max_draft_len}",
                field="max_draft_len",
                allowed="1..256",
            )
    elif req.draft_dir is not None:
        raise UserError(f"method {req.method} has no draft weights; draft_dir must be empty", field="draft_dir")
    if req.method == "eagle":
        if req.pp != 1:
            raise UserError(
                "TensorRT-LLM's EAGLE checkpoint does not support pipeline parallelism",
                field="parallelism.pp",
                allowed="1",
            )
        if req.num_eagle_layers < 1 or req.max_non_leaves_per_layer < 1:
            raise UserError(
                "EAGLE needs num_eagle_layers >= 1 (the tree depth) and max_non_leaves_per_layer >= 1",
                field="num_eagle_layers",
            )


def _check_split(cfg: LlamaConfig, tp: int, pp: int, what: str) -> None:
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


def _medusa(inputs: Inputs, req: CheckpointRequest) -> None:
    from builder.speculative.medusa import heads

    folder = Path(req.draft_dir)  # type: ignore[arg-type]
    raw = read_json(folder / heads.CONFIG, "Medusa", "draft_dir")
    counts = []
    for key in ("medusa_num_heads", "medusa_num_layers"):
        v = raw.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise UserError(f"expected a positive integer, got {v!r}", location=str(folder / heads.CONFIG), field=key)
        counts.append(v)
    n_heads, n_layers = counts
    want_heads = req.medusa_num_heads or n_heads
    if not 1 <= want_heads <= n_heads:
        raise UserError(
            f"medusa_num_heads={want_heads} but the checkpoint has {n_heads} heads",
            field="medusa_num_heads",
            allowed=f"1..{n_heads}",
        )
    if req.medusa_num_layers not in (0, n_layers):
        raise UserError(
            f"medusa_num_layers={req.medusa_num_layers} but the checkpoint has {n_layers}",
            field="medusa_num_layers",
            allowed=str(n_layers),
        )
    file = folder / heads.WEIGHTS
    if not file.is_file():
        pickled = (folder / heads.PICKLED_WEIGHTS).is_file()
        raise UserError(
            f"no {heads.WEIGHTS}" + (f" ({heads.PICKLED_WEIGHTS} is a pickle and is not read)" if pickled else ""),
            location=str(folder),
            field="draft_dir",
        )
    inputs.files.add_file(file, "medusa")
    cfg = inputs.cfg
    check_shapes(
        inputs.files, "medusa", heads.expected_shapes(n_heads, n_layers, cfg.hidden_size, cfg.vocab_size), str(file)
    )
    inputs.medusa_heads, inputs.medusa_layers = want_heads, n_layers


def _eagle(inputs: Inputs, req: CheckpointRequest) -> None:
    import torch

    from builder.speculative.eagle import draft_model

    folder = Path(req.draft_dir)  # type: ignore[arg-type]
    raw = read_json(folder / "config.json", "EAGLE", "draft_dir")
    draft = LlamaConfig.from_hf_dict(raw, str(folder / "config.json"))
    bias = raw.get("bias", True)
    if not isinstance(bias, bool):
        raise UserError(f"expected true or false, got {bias!r}", location=str(folder / "config.json"), field="bias")
    cfg = inputs.cfg
    if (draft.hidden_size, draft.vocab_size) != (cfg.hidden_size, cfg.vocab_size):
        raise UserError(
            f"the draft's (hidden_size, vocab_size) {(draft.hidden_size, draft.vocab_size)} differ from "
            f"the target's {(cfg.hidden_size, cfg.vocab_size)}",
            location=str(folder / "config.json"),
        )
    _check_split(draft, req.tp, 1, "EAGLE draft")
    file = folder / draft_model.WEIGHTS
    if not file.is_file():
        raise UserError(
            f"no {draft_model.WEIGHTS} (pickled checkpoints are not read)", location=str(folder), field="draft_dir"
        )
    inputs.files.add_file(file, "eagle")
    check_shapes(
        inputs.files,
        "eagle",
        draft_model.expected_shapes(draft, bias),
        str(file),
        optional=frozenset({"embed_tokens.weight"}),
    )
    if "eagle:embed_tokens.weight" in inputs.files.tensors:  # as load_eagle: it must be the target's embedding
        stored = inputs.files.read("eagle:embed_tokens.weight").float()
        target = inputs.files.read("base:model.embed_tokens.weight").float()
        if not torch.allclose(stored, target, rtol=1e-2, atol=1e-3):
            raise UserError(
                "embed_tokens.weight differs from the target's embedding: the draft was trained for "
                "another target model",
                location=str(file),
                field="embed_tokens.weight",
            )
    inputs.draft, inputs.fc_bias = draft, bias
