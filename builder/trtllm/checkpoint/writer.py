"""Write the TensorRT-LLM checkpoint: config.json + rank{N}.safetensors, streaming, tensor by tensor.

For each rank the tensor list (`names.py`) is known before any data is read, so the rank file's header
is written first and each tensor is then read (only the rows / columns that rank needs, through
`safe_open(...).get_slice`), cast, written and dropped: peak memory is about one source tensor plus its
converted copy, not a rank's shard. Everything is written into a temporary folder beside `out` and
renamed into place at the end, so a failed conversion leaves nothing behind. Each rank file is then
opened with `safetensors.safe_open` and its keys, dtypes and shapes compared with the plan.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from builder.errors import UserError
from builder.trtllm.checkpoint import config as cfgjson
from builder.trtllm.checkpoint.drafts import Inputs
from builder.trtllm.checkpoint.fp8 import fuse, shared_scale
from builder.trtllm.checkpoint.mapping import Mapping, pad_vocab_size
from builder.trtllm.checkpoint.names import FP8, Heads, Part, base_parts
from builder.trtllm.checkpoint.prepare import ST_DTYPE, prepare
from builder.trtllm.checkpoint.safetensors_stream import Entry, write_file

if TYPE_CHECKING:
    import torch

    from builder.trtllm.checkpoint import CheckpointRequest

TORCH_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn"}


def rank_parts(req: CheckpointRequest, inputs: Inputs, m: Mapping) -> list[Part]:
    """Every tensor of rank `m`'s file, in file order: the target's, then the draft's."""
    dt = ST_DTYPE[req.dtype]
    parts = base_parts(inputs.cfg, m, dt, inputs.quant, req.use_parallel_embedding)
    if inputs.draft is not None:
        parts += inputs.draft.parts(req, inputs, m, dt)
    return parts


def config_dict(req: CheckpointRequest, inputs: Inputs) -> dict[str, Any]:
    """config.json (see `config.py`): the target's Llama dict under the method's architecture, plus the draft's."""
    q, draft = inputs.quant, inputs.draft
    if draft is not None:
        draft.check_quant(q)
    exclude = draft.exclude if draft is not None else None
    quant = cfgjson.quantization(bool(q.fp8_modules), q.kv_cache, "lm_head" in q.fp8_modules, exclude)
    base = cfgjson.llama_config(
        inputs.cfg, inputs.flow.architecture, req.dtype, req.tp, req.pp, quant, req.use_parallel_embedding
    )
    return base if draft is None else draft.config(base, req, inputs)


def convert(req: CheckpointRequest, out: Path, say: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """Convert (see `builder.trtllm.checkpoint.convert_checkpoint`); returns the manifest facts."""
    inputs = prepare(req)
    config = config_dict(req, inputs)
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError("the output folder exists and is not empty", location=str(out))
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        ranks = []
        for m in Mapping(req.tp, req.pp).ranks():
            parts = rank_parts(req, inputs, m)
            say(f"rank {m.rank} (tp {m.tp_rank}, pp {m.pp_rank}): {len(parts)} tensors")
            ranks.append(_write_rank(tmp / f"rank{m.rank}.safetensors", parts, inputs, m))
        (tmp / "config.json").write_text(json.dumps(config, indent=4) + "\n", encoding="utf-8")
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return _facts(req, inputs, config, ranks)


def _write_rank(path: Path, parts: list[Part], inputs: Inputs, m: Mapping) -> dict[str, Any]:
    entries = [Entry(p.name, p.dtype, p.shape) for p in parts]
    by_name = {p.name: p for p in parts}
    size = write_file(path, entries, lambda e: make(by_name[e.name], inputs, m))
    _verify(path, entries)
    return {
        "rank": m.rank,
        "tp_rank": m.tp_rank,
        "pp_rank": m.pp_rank,
        "file": path.name,
        "bytes": size,
        "tensors": len(entries),
        "largest_tensor_bytes": max(e.nbytes for e in entries),
    }


def _verify(path: Path, entries: list[Entry]) -> None:
    """The written file opens with safetensors and holds exactly the planned keys, dtypes and shapes."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt", device="cpu") as f:
        found = {k: (str(f.get_slice(k).get_dtype()), tuple(f.get_slice(k).get_shape())) for k in f.keys()}
    want = {e.name: (e.dtype, e.shape) for e in entries}
    if found != want:
        raise RuntimeError(f"{path.name}: written tensors differ from the plan")


def make(part: Part, inputs: Inputs, m: Mapping) -> torch.Tensor:
    """Produce one planned tensor for rank `m` (ops in `names.Part`)."""
    import torch

    files, op = inputs.files, part.op
    if op in ("scale", "max_scale", "rcp_max_scale"):
        s = shared_scale([files.read(k) for k in part.src])
        return torch.reciprocal(s) if op == "rcp_max_scale" else s
    if op == "ones":
        return torch.ones(1, dtype=torch.float32)
    dtype = getattr(torch, TORCH_DTYPES[part.dtype])
    if op == "zeros":
        return torch.zeros(part.shape, dtype=dtype)
    if op == "qkv_fp8":
        w = [_qkv_slice(k, i, inputs, m) for i, k in enumerate(part.src[:3])]
        return fuse(w, [files.read(k) for k in part.src[3:]])
    if op == "qkv":
        t = torch.cat([_qkv_slice(k, i, inputs, m).to(dtype) for i, k in enumerate(part.src)], dim=0)
    elif op == "copy":
        t = files.read(part.src[0])
    elif op == "rows":
        n = part.shape[0]
        t = files.read(part.src[0], slice(m.tp_rank * n, (m.tp_rank + 1) * n))
    elif op == "cols":
        n = part.shape[1]
        t = files.read(part.src[0], (slice(None), slice(m.tp_rank * n, (m.tp_rank + 1) * n)))
    elif op == "vocab_rows":
        t = _vocab_rows(part, inputs, m)
    else:
        raise ValueError(f"unknown op {op!r}")
    return t if part.dtype == FP8 else t.to(dtype)


def _qkv_slice(key: str, which: int, inputs: Inputs, m: Mapping) -> torch.Tensor:
    """Rank m's rows of q (which=0), k or v: whole heads; with KV < tp, KV head tp_rank // (tp / KV)."""
    h = Heads.of(inputs.stack(key))
    if which == 0:
        n = h.H // m.tp * h.D
        return inputs.files.read(key, slice(m.tp_rank * n, (m.tp_rank + 1) * n))
    head = m.tp_rank // (m.tp // h.KV) if h.KV < m.tp else None
    if head is not None:  # `dup_kv_weight` then split: rank r holds KV head r // reps
        return inputs.files.read(key, slice(head * h.D, (head + 1) * h.D))
    n = h.KV // m.tp * h.D
    return inputs.files.read(key, slice(m.tp_rank * n, (m.tp_rank + 1) * n))


def _vocab_rows(part: Part, inputs: Inputs, m: Mapping) -> torch.Tensor:
    """Rank m's rows of a [V, C] table padded with zero rows to pad_vocab_size(V, tp)."""
    import torch

    V = inputs.files.info(part.src[0]).shape[0]
    n = part.shape[0]
    assert n * m.tp == pad_vocab_size(V, m.tp) or m.tp == 1
    start, stop = m.tp_rank * n, min((m.tp_rank + 1) * n, V)
    t = inputs.files.read(part.src[0], slice(start, stop)) if stop > start else None
    have = 0 if t is None else t.shape[0]
    if have == n:
        return t  # type: ignore[return-value]
    pad = torch.zeros((n - have, part.shape[1]), dtype=torch.float32 if t is None else t.dtype)
    if t is None:
        return pad
    if t.dtype == torch.float8_e4m3fn:  # cat on float8: go through the raw bytes (zero bytes are +0.0)
        return torch.cat([t.view(torch.uint8), pad.view(torch.uint8)]).view(torch.float8_e4m3fn)
    return torch.cat([t, pad])


def _facts(req: CheckpointRequest, inputs: Inputs, config: dict[str, Any], ranks: list[dict]) -> dict[str, Any]:
    m = Mapping(req.tp, req.pp)
    return {
        "architecture": config["architecture"],
        "dtype": req.dtype,
        "method": req.method,
        "mapping": {
            "tp_size": req.tp,
            "pp_size": req.pp,
            "world_size": m.world_size,
            "pp_layers": [
                Mapping(req.tp, req.pp, p * req.tp).pp_layers(inputs.cfg.num_hidden_layers) for p in range(req.pp)
            ],
        },
        "vocab_size": inputs.cfg.vocab_size,
        "vocab_size_padded": pad_vocab_size(inputs.cfg.vocab_size, req.tp),
        "quantization": {
            k: config["quantization"][k] for k in ("quant_algo", "kv_cache_quant_algo", "exclude_modules")
        },
        "fp8_linears": len(inputs.quant.fp8_modules),
        "max_draft_len": req.max_draft_len,
        "ranks": ranks,
        "tensors": sum(r["tensors"] for r in ranks),
        "bytes": sum(r["bytes"] for r in ranks),
    }
