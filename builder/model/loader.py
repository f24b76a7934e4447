"""Load an HF Llama 3 checkpoint from a local directory, strictly.

Layouts: `model.safetensors`, or shards listed in `model.safetensors.index.json`. Pickled
`pytorch_model.bin` checkpoints (or `pytorch_model.bin.index.json` shards) are refused unless the caller
passes `allow_pickle=True` — the recipe's `model.allow_pickle` / `speculative.allow_pickle`, whose name the
refusal gives (`opt_in`) — and then read with `torch.load(map_location="cpu", weights_only=True)`; which
names are read, and the upstream files they mirror, is `builder.model.pickled`. Key sets and shapes are
checked against the config, as nanoGPT's `from_pretrained` does: a missing key, an unexpected key, a wrong
shape, a truncated or corrupt file or a broken index is a `UserError` that names the file and the key.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable

import torch

from builder.errors import UserError
from builder.model.config import LlamaConfig
from builder.model.llama import Llama
from builder.model.pickled import TARGET, Layout, check_shard_name, no_weights_error, opt_in_error, pickle_to_read

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PICKLE_INDEX, PICKLE = TARGET.pickles  # pytorch_model.bin.index.json, pytorch_model.bin (opt-in only)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

Sources = dict[str, tuple[torch.Tensor, str]]  # checkpoint key -> (tensor, file it came from)


def layer_shapes(cfg: LlamaConfig, prefix: str, input_norm: bool = True) -> dict[str, tuple[int, ...]]:
    """The keys and shapes of one Llama decoder layer under `prefix` (e.g. "model.layers.3.")."""
    C, D, I = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size
    shapes: dict[str, tuple[int, ...]] = {prefix + "input_layernorm.weight": (C,)} if input_norm else {}
    shapes[prefix + "self_attn.q_proj.weight"] = (cfg.num_attention_heads * D, C)
    shapes[prefix + "self_attn.k_proj.weight"] = (cfg.num_key_value_heads * D, C)
    shapes[prefix + "self_attn.v_proj.weight"] = (cfg.num_key_value_heads * D, C)
    shapes[prefix + "self_attn.o_proj.weight"] = (C, cfg.num_attention_heads * D)
    shapes[prefix + "post_attention_layernorm.weight"] = (C,)
    shapes[prefix + "mlp.gate_proj.weight"] = (I, C)
    shapes[prefix + "mlp.up_proj.weight"] = (I, C)
    shapes[prefix + "mlp.down_proj.weight"] = (C, I)
    return shapes


def read_draft_weights(
    directory: Path, layout: Layout, allow_pickle: bool = False, opt_in: str = "allow_pickle"
) -> tuple[dict[str, torch.Tensor], str]:
    """A draft's weights → (tensors, file): its safetensors file, else upstream's pickled file (`layout.pickles`)
    with `allow_pickle` only (refused naming the `opt_in` field otherwise). Key names are the same in both."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    file = directory / layout.weights
    if file.is_file():
        try:
            return load_file(str(file)), str(file)
        except (SafetensorError, OSError) as exc:
            raise UserError(f"unreadable safetensors file: {exc}", location=str(file)) from exc
    pickled = pickle_to_read(directory, layout)
    if pickled is None:
        raise no_weights_error(directory, layout, allow_pickle)
    sources = read_pickled(directory, layout, allow_pickle, opt_in)
    return {key: tensor for key, (tensor, _) in sources.items()}, str(pickled)


def read_pickled(directory: Path, layout: Layout, allow_pickle: bool, opt_in: str) -> Sources:
    """The tensors of the pickled file loading `directory` reads (`pickle_to_read`: upstream's names only, and only
    when no safetensors file is there), as stored; refused naming `opt_in` unless `allow_pickle`."""
    pickled = pickle_to_read(directory, layout)
    if pickled is None:
        present = [name for name in layout.safetensors if (directory / name).is_file()]
        why = f"it holds {present[0]}, which is read instead" if present else f"no {' or '.join(layout.pickles)}"
        raise UserError(f"no pickled {layout.what} weights to read: {why}", location=str(directory))
    if not allow_pickle:
        raise opt_in_error(pickled, opt_in)
    if pickled.name == layout.index:
        return _read_sharded(pickled, _read_pickle, pickled_shards=True)
    return _read_pickle(pickled)


def check_keys(
    tensors: dict[str, torch.Tensor],
    expected: dict[str, tuple[int, ...]],
    source: str,
    what: str,
    optional: frozenset[str] = frozenset(),
) -> None:
    """Missing keys (except `optional`), unexpected keys and wrong shapes → UserError naming the key."""
    missing = sorted(expected.keys() - tensors.keys() - optional)
    if missing:
        raise UserError(
            f"missing key(s): {', '.join(missing[:8])}" + (" …" if len(missing) > 8 else ""),
            location=source,
            field=missing[0],
        )
    for key in sorted(tensors):
        if key not in expected:
            raise UserError(
                f"unexpected key {key!r}", location=source, field=key, allowed=f"the {what} keys implied by config.json"
            )
        if tuple(tensors[key].shape) != expected[key]:
            raise UserError(
                f"wrong shape for {key!r}: {tuple(tensors[key].shape)}, config.json implies {expected[key]}",
                location=source,
                field=key,
            )


def expected_shapes(cfg: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Every key an HF LlamaForCausalLM checkpoint with this config holds, with its shape."""
    C = cfg.hidden_size
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (cfg.vocab_size, C)}
    for i in range(cfg.num_hidden_layers):
        shapes.update(layer_shapes(cfg, f"model.layers.{i}."))
    shapes["model.norm.weight"] = (C,)
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, C)
    return shapes


def resolve_dtype(dtype: torch.dtype | str) -> torch.dtype:
    """torch dtype from a dtype or its name; only fp32, bf16 and fp16 are accepted."""
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise UserError(f"unsupported dtype {dtype!r}", field="dtype", allowed=", ".join(DTYPES))
        return DTYPES[dtype]
    if dtype not in DTYPES.values():
        raise UserError(f"unsupported dtype {dtype}", field="dtype", allowed=", ".join(DTYPES))
    return dtype


def load_state_dict(
    path: str | Path,
    cfg: LlamaConfig,
    dtype: torch.dtype | str = torch.float32,
    allow_pickle: bool = False,
    opt_in: str = "allow_pickle",
) -> dict[str, torch.Tensor]:
    """Checked tensors of the checkpoint in `path`, keyed as in `Llama` (no `model.` prefix)."""
    dtype = resolve_dtype(dtype)
    sources = checked_sources(Path(path), cfg, allow_pickle, opt_in)
    return {key.removeprefix("model."): tensor.to(dtype) for key, (tensor, _) in sources.items()}


def checked_sources(path: Path, cfg: LlamaConfig, allow_pickle: bool = False, opt_in: str = "allow_pickle") -> Sources:
    """The checkpoint's tensors as stored (HF keys, stored dtype), each checked against `cfg`; a tied
    checkpoint's redundant `lm_head.weight` is dropped once found equal to the embedding."""
    sources, weights_file = _read_tensors(path, allow_pickle, opt_in)
    _check_tied_head(sources, cfg)
    expected = expected_shapes(cfg)
    missing = sorted(expected.keys() - sources.keys())
    if missing:
        raise UserError(
            f"missing key(s) in checkpoint: {', '.join(missing[:8])}"
            + (f" and {len(missing) - 8} more" if len(missing) > 8 else ""),
            location=weights_file,
            field=missing[0],
        )
    for key, (tensor, file) in sorted(sources.items()):
        if key not in expected:
            raise UserError(
                f"unexpected key {key!r} in checkpoint",
                location=file,
                field=key,
                allowed="the keys of LlamaForCausalLM for this config.json",
            )
        if tuple(tensor.shape) != expected[key]:
            raise UserError(
                f"wrong shape for {key!r}: {tuple(tensor.shape)}, config.json implies {expected[key]}",
                location=file,
                field=key,
            )
        if not tensor.is_floating_point():
            raise UserError(
                f"{key!r} has dtype {tensor.dtype}, expected a floating-point tensor", location=file, field=key
            )
    return sources


def load_model(
    path: str | Path, dtype: torch.dtype | str = torch.float32, allow_pickle: bool = False, opt_in: str = "allow_pickle"
) -> Llama:
    """Config and checked weights from `path` as an eval-mode `Llama` on the CPU (`allow_pickle`: see the module
    docstring; `opt_in` names the setting that allows it in the refusal)."""
    cfg = LlamaConfig.from_json(Path(path) / "config.json")
    state = load_state_dict(path, cfg, dtype, allow_pickle, opt_in)
    if cfg.tie_word_embeddings:
        state["lm_head.weight"] = state["embed_tokens.weight"]
    with torch.device("meta"):  # no random init of weights that are overwritten anyway
        model = Llama(cfg)
    model.load_state_dict(state, strict=True, assign=True)
    if cfg.tie_word_embeddings:  # `assign` replaced the shared Parameter; share it again
        model.lm_head.weight = model.embed_tokens.weight
    return model.eval()


def _check_tied_head(sources: Sources, cfg: LlamaConfig) -> None:
    """Tied checkpoints may still carry `lm_head.weight`; accept it only if it equals the embeddings."""
    if not cfg.tie_word_embeddings or "lm_head.weight" not in sources:
        return
    head, file = sources.pop("lm_head.weight")
    embed = sources.get("model.embed_tokens.weight")
    if embed is not None and (head.shape != embed[0].shape or not torch.equal(head, embed[0])):
        raise UserError(
            "tie_word_embeddings is true but lm_head.weight differs from model.embed_tokens.weight",
            location=file,
            field="lm_head.weight",
        )


def _read_tensors(path: Path, allow_pickle: bool, opt_in: str) -> tuple[Sources, str]:
    """All tensors of the checkpoint, and the file that lists them (the index or the single file)."""
    if not path.is_dir():
        raise UserError("checkpoint directory not found", location=str(path))
    if (path / SAFETENSORS_INDEX).is_file():
        return _read_sharded(path / SAFETENSORS_INDEX, _read_safetensors), str(path / SAFETENSORS_INDEX)
    if (path / SAFETENSORS).is_file():
        return _read_safetensors(path / SAFETENSORS), str(path / SAFETENSORS)
    pickled = pickle_to_read(path, TARGET)
    if pickled is None:
        raise no_weights_error(path, TARGET, allow_pickle)
    return read_pickled(path, TARGET, allow_pickle, opt_in), str(pickled)


def _read_sharded(index_path: Path, read_one: Callable[[Path], Sources], pickled_shards: bool = False) -> Sources:
    """Read every shard an index names; each key must sit in the shard the index says (a pickled index may
    name transformers' `pytorch_model-NNNNN-of-NNNNN.bin` shards only)."""
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"index is not valid JSON: {exc}", location=str(index_path)) from exc
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise UserError(
            "index has no weight_map object of key -> shard file", location=str(index_path), field="weight_map"
        )
    sources: Sources = {}
    for shard in sorted(set(weight_map.values())):
        if pickled_shards:
            check_shard_name(shard, index_path)
        shard_path = index_path.parent / shard
        if Path(shard).name != shard or not shard_path.is_file():
            raise UserError(
                f"shard {shard!r} named in the index is missing",
                location=str(index_path),
                field=f"weight_map.{next(k for k, v in weight_map.items() if v == shard)}",
            )
        for key, entry in read_one(shard_path).items():
            if weight_map.get(key) != shard:
                raise UserError(
                    f"key {key!r} is in {shard} but the index places it in {weight_map.get(key, 'no shard')}",
                    location=str(shard_path),
                    field=key,
                )
            sources[key] = entry
    absent = sorted(weight_map.keys() - sources.keys())
    if absent:
        raise UserError(
            f"key {absent[0]!r} is listed in the index but absent from {weight_map[absent[0]]}",
            location=str(index_path.parent / weight_map[absent[0]]),
            field=absent[0],
        )
    return sources


def _read_safetensors(file: Path) -> Sources:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(file), framework="pt", device="cpu") as f:
            return {key: (f.get_tensor(key), str(file)) for key in f.keys()}
    except SafetensorError as exc:
        raise UserError(f"corrupt or truncated safetensors file: {exc}", location=str(file)) from exc


def _read_pickle(file: Path) -> Sources:
    """A pickled state dict through `torch.load(weights_only=True)`: its restricted unpickler builds tensors,
    containers and plain values, and refuses any other global (a class, a function) before running it."""
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch.load raises many types (UnpicklingError, RuntimeError, EOFError)
        raise UserError(
            f"cannot read the pickle with torch.load(weights_only=True): {_why(exc)}", location=str(file)
        ) from exc
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(t, torch.Tensor) for k, t in state.items()
    ):
        raise UserError("the pickle is not a flat dict of name -> tensor (a state dict)", location=str(file))
    return {key: (tensor, str(file)) for key, tensor in state.items()}


def _why(exc: Exception) -> str:
    """torch.load's failure in one line, without its advice to retry with weights_only=False (never taken here)."""
    text = str(exc)
    found = re.search(r"GLOBAL ([\w.]+)", text)
    if found:
        return f"it refers to {found.group(1)}, which is not a tensor or a plain container (refused unexecuted)"
    if "Weights only load failed" in text:
        return "it holds objects other than tensors and plain containers (refused unexecuted)"
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__
