"""Medusa heads in the TensorRT-LLM checkpoint (`MedusaForCausalLM`): Medusa's `EngineFlow.checkpoint`.

Sources (TensorRT-LLM, `tensorrt_llm/models/medusa/`):
* `config.py`: `MedusaConfig.to_dict` = the Llama dict + num_medusa_heads, num_medusa_layers, max_draft_len.
* `model.py` + `weight.py` `load_medusa_hf`: `medusa_heads.{h}.medusa_layers.{l}.linear.{weight,bias}` and
  `medusa_heads.{h}.lm_head.weight`, column-split, on every rank (the heads are built on every rank). The heads'
  lm_head is a ColumnLinear of the padded vocabulary: rows padded here as for the base LM head (upstream's
  `split` would leave vocab % tp != 0 unloadable).
* `quantization/quantize_by_modelopt.py` adds '*medusa_heads*' to exclude_modules for unquantized heads: the
  heads stay in the model dtype (the quantize stage's rule).

The heads are read in FasterDecoding's layout (`builder.speculative.medusa.heads`: config.json with
medusa_num_heads / medusa_num_layers, `medusa_lm_head.safetensors`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builder.errors import UserError
from builder.trtllm.checkpoint.drafts import Draft, Inputs
from builder.trtllm.checkpoint.mapping import Mapping, pad_vocab_size
from builder.trtllm.checkpoint.names import Part
from builder.trtllm.checkpoint.sources import check_shapes, read_json

if TYPE_CHECKING:
    from builder.speculative.medusa.config import MedusaConfig
    from builder.trtllm.checkpoint import CheckpointRequest

SOURCE = "medusa"


@dataclass(frozen=True)
class Heads:
    """What the converter writes of the checkpoint's heads."""

    count: int  # heads written: the request's medusa_num_heads, else every head of the checkpoint
    layers: int  # residual blocks per head


def request(c: MedusaConfig) -> dict[str, Any]:
    return {"medusa_num_heads": c.num_heads, "medusa_num_layers": c.num_layers}


def check(_req: CheckpointRequest) -> None:
    return None  # the head counts are checked against the checkpoint (`index`)


def index(req: CheckpointRequest, inputs: Inputs) -> Heads:
    """The heads' config.json against the request, their weights' shapes against the target."""
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
    inputs.files.add_file(file, SOURCE)
    cfg = inputs.cfg
    check_shapes(
        inputs.files, SOURCE, heads.expected_shapes(n_heads, n_layers, cfg.hidden_size, cfg.vocab_size), str(file)
    )
    return Heads(want_heads, n_layers)


def config(base: dict[str, Any], req: CheckpointRequest, inputs: Inputs) -> dict[str, Any]:
    h: Heads = inputs.indexed
    return {**base, "num_medusa_heads": h.count, "num_medusa_layers": h.layers, "max_draft_len": req.max_draft_len}


def parts(_req: CheckpointRequest, inputs: Inputs, m: Mapping, dtype: str) -> list[Part]:
    """The heads (every rank): residual blocks and each head's own LM head, all column-split."""
    h: Heads = inputs.indexed
    C, V = inputs.cfg.hidden_size, inputs.cfg.vocab_size
    out: list[Part] = []
    for head in range(h.count):
        for layer in range(h.layers):
            src, name = f"{SOURCE}:{head}.{layer}.linear.", f"medusa_heads.{head}.medusa_layers.{layer}.linear."
            out.append(Part(name + "weight", (C // m.tp, C), dtype, "rows", (src + "weight",)))
            out.append(Part(name + "bias", (C // m.tp,), dtype, "rows", (src + "bias",)))
        out.append(
            Part(
                f"medusa_heads.{head}.lm_head.weight",
                (pad_vocab_size(V, m.tp) // m.tp, C),
                dtype,
                "vocab_rows",
                (f"{SOURCE}:{head}.{h.layers}.weight",),
            )
        )
    return out


DRAFT = Draft(
    source=SOURCE,
    exclude="*medusa_heads*",
    request=request,
    check=check,
    index=index,
    config=config,
    parts=parts,
)
