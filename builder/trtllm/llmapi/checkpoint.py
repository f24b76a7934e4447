"""The folders TensorRT-LLM's PyTorch flow serves: `model/` (a Hugging Face checkpoint: modelopt's unified FP8 one
when the recipe quantizes) and `draft/` (the EAGLE-3 draft), as hard links into the build cache.

    model/   the quantize stage's output (config.json with quantization_config, hf_quant_config.json,
             model*.safetensors with FP8 weights, weight/input scales, k/v scales) — or, unquantized, the load
             stage's checkpoint — plus the tokenizer's files where the checkpoint has none: `LLM(model=…)` reads
             the tokenizer from the model folder
    draft/   the draft's safetensors (the load stage's copy of a pickled one) and its config.json, rewritten with
             what TensorRT-LLM reads: `draft_vocab_size` (its model registry picks EAGLE3LlamaForCausalLM only when
             the key is there, `_torch/models/modeling_auto.py` @ 01bffee125e2) and
             `eagle_config.eagle_aux_hidden_state_layer_ids` = the resolved aux layers (output-of-layer ids, the
             convention of its `eagle3_layers_to_capture` and modelopt's; the options file names them too)

Nothing here converts weights: TensorRT-LLM's PyTorch flow loads a modelopt HF checkpoint as it is (TP/PP shards are
made when it loads). `checkpoint.json` records the files and the facts the repo stage and `trtspec deploy` read.
"""

# trtllm: this module is the trtllm-llmapi backend's (builder/trtllm/llmapi)

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from builder.files import link_or_copy

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")
INFO = "checkpoint.json"
SKIP = {"quantize.json", "manifest.json"}  # trtspec's own records in the quantize stage's folder


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name not in SKIP and not p.name.startswith("."))


def draft_config(raw: dict[str, Any], aux_layers: tuple[int, ...], draft_vocab: int) -> dict[str, Any]:
    """The draft's config.json with `draft_vocab_size` and the aux ids set (module docstring); other keys kept."""
    cfg = dict(raw)
    cfg["draft_vocab_size"] = int(draft_vocab)
    eagle = dict(cfg.get("eagle_config") or {})
    eagle["eagle_aux_hidden_state_layer_ids"] = sorted(int(i) for i in aux_layers)
    cfg["eagle_config"] = eagle
    return cfg


def assemble(
    out: Path,
    model_src: Path,
    tokenizer_dir: Path,
    draft_src: Path | None = None,
    aux_layers: tuple[int, ...] | None = None,
    draft_vocab: int | None = None,
) -> dict[str, Any]:
    """Write model/ (and draft/) into `out`; the facts (files and bytes, quantization, aux ids)."""
    model = out / "model"
    model.mkdir(parents=True)
    for f in _files(model_src):
        link_or_copy(f, model / f.name)
    for name in TOKENIZER_FILES:
        src = tokenizer_dir / name
        if src.is_file() and not (model / name).exists():
            link_or_copy(src, model / name)
    facts: dict[str, Any] = {"model": _listing(model), "quantization": _quantization(model)}
    if draft_src is not None:
        if aux_layers is None or draft_vocab is None:
            raise ValueError("an EAGLE-3 draft needs its aux layers and draft vocabulary size")
        draft = out / "draft"
        draft.mkdir()
        for f in _files(draft_src):
            if f.name != "config.json" and f.suffix != ".bin":
                link_or_copy(f, draft / f.name)
        raw = json.loads((draft_src / "config.json").read_text(encoding="utf-8"))
        cfg = draft_config(raw, aux_layers, draft_vocab)
        (draft / "config.json").write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")
        facts["draft"] = _listing(draft)
        facts["aux_layers"] = sorted(aux_layers)
        facts["draft_vocab_size"] = int(draft_vocab)
    (out / INFO).write_text(json.dumps(facts, indent=2) + "\n", encoding="utf-8")
    return facts


def _listing(folder: Path) -> list[dict[str, Any]]:
    return [{"path": p.name, "bytes": p.stat().st_size} for p in sorted(folder.iterdir()) if p.is_file()]


def _quantization(model: Path) -> dict[str, Any] | None:
    """What modelopt's unified checkpoint says of its quantization (None: not quantized)."""
    from builder.quantize.hf_quant import quant_config_of

    cfg = json.loads((model / "config.json").read_text(encoding="utf-8"))
    if not (model / "hf_quant_config.json").is_file() and "quantization_config" not in cfg:
        return None
    return quant_config_of(model).get("quantization")
