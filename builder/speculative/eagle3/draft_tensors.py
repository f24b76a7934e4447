"""An EAGLE-3 draft's tensors against its config.json: key set of either layout, shapes, dtypes, the safetensors
header read without torch, and fc's width against the target. The layouts' table: the module docstring of
`builder.speculative.eagle3.checkpoint` and docs/eagle3-checkpoints.md.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Mapping

from builder.errors import UserError
from builder.model.pickled import EAGLE3
from builder.speculative.eagle3.draft_config import DraftShape
from builder.speculative.eagle3.vocab_map import check_vocab_map

MODELOPT_PREFIX, SAFEAILAB_PREFIX = "layers.0.", "midlayer."
OPTIONAL = frozenset({"embed_tokens.weight", "t2d", "d2t"})
# safetensors header dtype names (`dtype` of each entry) each kind of tensor may be stored as
FLOAT_DTYPES = ("F32", "F16", "BF16")
D2T_DTYPES = ("I64", "I32")
T2D_DTYPES = ("BOOL",)


def expected_shapes(shape: DraftShape) -> dict[str, tuple[int, ...]]:
    """Every key of the SafeAILab layout with its shape (module docstring)."""
    c = shape.cfg
    H, D, I, V = c.hidden_size, c.head_dim, c.intermediate_size, c.vocab_size
    m = SAFEAILAB_PREFIX
    return {
        "fc.weight": (H, 3 * shape.target_hidden),
        m + "self_attn.q_proj.weight": (c.num_attention_heads * D, 2 * H),
        m + "self_attn.k_proj.weight": (c.num_key_value_heads * D, 2 * H),
        m + "self_attn.v_proj.weight": (c.num_key_value_heads * D, 2 * H),
        m + "self_attn.o_proj.weight": (H, c.num_attention_heads * D),
        m + "mlp.gate_proj.weight": (I, H),
        m + "mlp.up_proj.weight": (I, H),
        m + "mlp.down_proj.weight": (H, I),
        m + "input_layernorm.weight": (H,),
        m + "hidden_norm.weight": (H,),
        m + "post_attention_layernorm.weight": (H,),
        "norm.weight": (H,),
        "lm_head.weight": (shape.draft_vocab, H),
        "d2t": (shape.draft_vocab,),
        "t2d": (V,),
        "embed_tokens.weight": (V, H),
    }


def canonical_name(key: str) -> str:
    """A stored key under SafeAILab's names (modelopt's `layers.0.` → `midlayer.`)."""
    return SAFEAILAB_PREFIX + key[len(MODELOPT_PREFIX) :] if key.startswith(MODELOPT_PREFIX) else key


def check_entries(
    entries: Mapping[str, tuple[tuple[int, ...], str]], shape: DraftShape, source: str
) -> dict[str, tuple[tuple[int, ...], str]]:
    """A checkpoint's tensors as {stored key: (shape, safetensors dtype name)} against its config.json: the key set
    of either layout (not both), every shape, every dtype; returns them under SafeAILab's names. No torch."""
    table = {canonical_name(k): v for k, v in entries.items()}
    if len(table) != len(entries):
        raise UserError("the draft holds both midlayer.* and layers.0.* tensors", location=source, field="midlayer")
    expected = expected_shapes(shape)
    optional = OPTIONAL - {"embed_tokens.weight"} if shape.own_embedding else OPTIONAL
    missing = sorted(expected.keys() - table.keys() - optional)
    if missing:
        why = (
            " (a draft of another width than its target carries its own embedding)"
            if missing[0].startswith("embed")
            else ""
        )
        raise UserError(f"missing key(s): {', '.join(missing[:8])}{why}", location=source, field=missing[0])
    for key in sorted(table):
        dims, dtype = table[key]
        if key not in expected:
            raise UserError(
                f"unexpected key {key!r}",
                location=source,
                field=key,
                allowed="the EAGLE-3 draft keys implied by config.json",
            )
        if tuple(dims) != expected[key]:
            raise UserError(
                f"wrong shape for {key!r}: {tuple(dims)}, config.json implies {expected[key]}",
                location=source,
                field=key,
            )
        allowed = D2T_DTYPES if key == "d2t" else T2D_DTYPES if key == "t2d" else FLOAT_DTYPES
        if dtype not in allowed:
            raise UserError(f"{key} is stored as {dtype}", location=source, field=key, allowed=", ".join(allowed))
    if "d2t" not in table and shape.draft_vocab != shape.cfg.vocab_size:
        raise UserError(
            f"a draft vocabulary of {shape.draft_vocab} < {shape.cfg.vocab_size} tokens needs d2t",
            location=source,
            field="d2t",
        )
    return table


def safetensors_header(file: Path) -> dict[str, Any]:
    """The safetensors header (name -> {dtype, shape, data_offsets}) without reading the tensors (no torch)."""
    with open(file, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise UserError("not a safetensors file (too short)", location=str(file))
        (n,) = struct.unpack("<Q", head)
        if n > 1 << 28:
            raise UserError("not a safetensors file (header too large)", location=str(file))
        try:
            header = json.loads(f.read(n))
        except ValueError as exc:
            raise UserError(f"not a safetensors file: {exc}", location=str(file)) from exc
    if not isinstance(header, dict):
        raise UserError("not a safetensors file (header is not an object)", location=str(file))
    header.pop("__metadata__", None)
    return header


def header_entries(header: Mapping[str, Any]) -> dict[str, tuple[tuple[int, ...], str]]:
    """{name: (shape, dtype)} of a safetensors header."""
    return {k: (tuple(v["shape"]), str(v["dtype"])) for k, v in header.items()}


_NUMPY = {"I64": "<i8", "I32": "<i4", "BOOL": "|b1"}


def read_small_tensor(file: Path, header: Mapping[str, Any], key: str):
    """One integer/bool tensor of a safetensors file as numpy (d2t, t2d), read without torch."""
    import numpy as np

    entry = header[key]
    start, end = entry["data_offsets"]
    with open(file, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        f.seek(8 + n + start)
        data = f.read(end - start)
    return np.frombuffer(data, dtype=_NUMPY[entry["dtype"]]).reshape(entry["shape"])


def check_folder_header(
    folder: Path, shape: DraftShape, source: str | None = None
) -> dict[str, tuple[tuple[int, ...], str]] | None:
    """The folder's model.safetensors against its config.json without torch: keys, shapes, dtypes, and d2t/t2d's
    values (`check_vocab_map`). None when the folder has no safetensors file (a pickle is read at load time)."""
    file = folder / EAGLE3.weights
    if not file.is_file():
        return None
    header = safetensors_header(file)
    stored = header_entries(header)
    table = check_entries(stored, shape, source or str(file))
    if "d2t" in table:
        t2d = read_small_tensor(file, header, "t2d") if "t2d" in header else None
        check_vocab_map(read_small_tensor(file, header, "d2t"), t2d, shape.cfg.vocab_size, str(file))
    return table


def check_fc_width(folder: Path, shape: DraftShape, target_hidden: int) -> None:
    """fc must take 3 × the target's hidden size (read from the safetensors header when there is one)."""
    file = folder / EAGLE3.weights
    want = (shape.cfg.hidden_size, 3 * target_hidden)
    if file.is_file():
        fc = safetensors_header(file).get("fc.weight")
        if fc is not None and tuple(fc["shape"]) != want:
            raise UserError(
                f"fc.weight is {tuple(fc['shape'])}: an EAGLE-3 draft for this target takes the three "
                f"{target_hidden}-wide hidden states, {want}",
                location=str(file),
                field="fc.weight",
                allowed=str(want),
            )
    if shape.target_hidden != target_hidden:
        raise UserError(
            f"the draft was made for a {shape.target_hidden}-wide target, this one is {target_hidden}-wide",
            location=str(folder / "config.json"),
            field="target_hidden_size",
            allowed=str(target_hidden),
        )
