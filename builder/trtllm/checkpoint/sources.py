"""The converter's inputs, indexed from safetensors headers and read one tensor (slice) at a time.

* target: the HF Llama 3 checkpoint (`model.safetensors` or `model.safetensors.index.json` shards), keys
  and shapes checked against config.json as `builder.model.loader` does; or, when FP8, the quantize
  stage's modelopt unified checkpoint (every `*.safetensors` of the folder), read with the layout
  `builder.quantize.checkpoint.read_fp8_checkpoint` accepts: FP8 weights with per-tensor
  `weight_scale` / `input_scale`, `…self_attn.{k_proj.k_scale,v_proj.v_scale}` (or the older
  `…self_attn.{k,v}_scale`), every other tensor under its HF name.
* Medusa heads (`medusa_lm_head.safetensors`, `builder.speculative.medusa.heads` layout) and the EAGLE
  draft (`model.safetensors`, `builder.speculative.eagle.draft_model` layout).

Every key is namespaced ("base:", "medusa:", "eagle:"). `read` opens the file with `safe_open` for that one
tensor and closes it again, so no mapping of the whole input stays resident. Pickled weights are never read.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builder.errors import UserError
from builder.model.config import read_json_object

if TYPE_CHECKING:
    import torch

KV_SCALE = re.compile(r"^model\.layers\.(\d+)\.self_attn\.(?:[kv]_proj\.)?([kv])_scale$")


@dataclass(frozen=True)
class TensorInfo:
    file: Path
    key: str  # name inside the file
    dtype: str  # safetensors dtype name (F32, BF16, F8_E4M3, …)
    shape: tuple[int, ...]


@dataclass
class SourceFiles:
    """Namespaced key -> where the tensor lies; `read` loads one tensor or a slice of it."""

    tensors: dict[str, TensorInfo] = field(default_factory=dict)

    def add_file(self, file: Path, namespace: str) -> dict[str, TensorInfo]:
        """Index every tensor of `file` under `namespace:`; a corrupt or truncated file is a UserError."""
        from safetensors import SafetensorError, safe_open

        found: dict[str, TensorInfo] = {}
        try:
            with safe_open(str(file), framework="pt", device="cpu") as f:
                for key in f.keys():
                    sl = f.get_slice(key)
                    found[key] = TensorInfo(file, key, str(sl.get_dtype()), tuple(int(d) for d in sl.get_shape()))
        except (SafetensorError, OSError) as exc:
            raise UserError(f"corrupt or truncated safetensors file: {exc}", location=str(file)) from exc
        for key, info in found.items():
            self.tensors[f"{namespace}:{key}"] = info
        return found

    def info(self, key: str) -> TensorInfo:
        return self.tensors[key]

    def read(self, key: str, index: Any = None) -> torch.Tensor:
        """The tensor `key` (or `tensor[index]`, reading only that slice), from a freshly opened file."""
        from safetensors import SafetensorError, safe_open

        info = self.tensors[key]
        try:
            with safe_open(str(info.file), framework="pt", device="cpu") as f:
                if index is None or not info.shape:
                    return f.get_tensor(info.key)
                return f.get_slice(info.key)[index]
        except (SafetensorError, OSError) as exc:
            raise UserError(f"cannot read {info.key!r}: {exc}", location=str(info.file)) from exc


def index_target(files: SourceFiles, folder: Path) -> str:
    """Index the HF checkpoint in `folder` (single file or sharded index); returns the file to blame."""
    if not folder.is_dir():
        raise UserError("checkpoint directory not found", location=str(folder), field="base_dir")
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        _index_shards(files, index)
        return str(index)
    single = folder / "model.safetensors"
    if single.is_file():
        files.add_file(single, "base")
        return str(single)
    raise UserError(
        "no model.safetensors or model.safetensors.index.json (pickled checkpoints are not read)",
        location=str(folder),
        field="base_dir",
    )


def _index_shards(files: SourceFiles, index: Path) -> None:
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map")
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as exc:
        raise UserError(f"index is not a JSON object: {exc}", location=str(index)) from exc
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise UserError("index has no weight_map object of key -> shard file", location=str(index), field="weight_map")
    for shard in sorted(set(weight_map.values())):
        path = index.parent / shard
        if Path(shard).name != shard or not path.is_file():
            raise UserError(f"shard {shard!r} named in the index is missing", location=str(index))
        for key in files.add_file(path, "base"):
            if weight_map.get(key) != shard:
                raise UserError(
                    f"key {key!r} is in {shard} but the index places it in {weight_map.get(key)}",
                    location=str(path),
                    field=key,
                )
    absent = sorted(k for k in weight_map if f"base:{k}" not in files.tensors)
    if absent:
        raise UserError(f"key {absent[0]!r} is listed in the index but absent from its shard", location=str(index))


def index_fp8(files: SourceFiles, folder: Path) -> None:
    """Index every safetensors file of the quantize stage's output folder."""
    shards = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if not shards:
        raise UserError("no safetensors file in the quantized checkpoint", location=str(folder), field="fp8_dir")
    for shard in shards:
        files.add_file(shard, "base")


def check_shapes(
    files: SourceFiles,
    namespace: str,
    expected: dict[str, tuple[int, ...]],
    where: str,
    optional: frozenset[str] = frozenset(),
    extra_ok: frozenset[str] = frozenset(),
) -> None:
    """Missing keys (except `optional`), unexpected keys (except `extra_ok`) and wrong shapes -> UserError."""
    have = {k.split(":", 1)[1]: v for k, v in files.tensors.items() if k.startswith(namespace + ":")}
    missing = sorted(expected.keys() - have.keys() - optional)
    if missing:
        raise UserError(
            f"missing tensor(s): {', '.join(missing[:4])}" + (" …" if len(missing) > 4 else ""),
            location=where,
            field=missing[0],
        )
    for key, info in sorted(have.items()):
        if key in extra_ok:
            continue
        if key not in expected:
            raise UserError(
                f"unexpected tensor {key!r}",
                location=str(info.file),
                field=key,
                allowed="the tensors config.json implies",
            )
        if info.shape != expected[key]:
            raise UserError(
                f"wrong shape for {key!r}: {info.shape}, config.json implies {expected[key]}",
                location=str(info.file),
                field=key,
            )
        if info.dtype not in ("F32", "F16", "BF16", "F8_E4M3"):
            raise UserError(
                f"{key!r} has dtype {info.dtype}, expected a floating-point tensor", location=str(info.file), field=key
            )


def fp8_layout(
    files: SourceFiles, expected: dict[str, tuple[int, ...]], folder: Path
) -> tuple[set[str], dict[int, tuple[str, str]]]:
    """FP8 linears (HF module names) and KV scale keys of the quantized checkpoint; the rest must be expected."""
    fp8: set[str] = set()
    kv: dict[int, dict[str, str]] = {}
    scales: set[str] = set()
    for nk, info in files.tensors.items():
        if not nk.startswith("base:"):
            continue
        key = nk[5:]
        if (hit := KV_SCALE.match(key)) is not None:
            kv.setdefault(int(hit.group(1)), {})[hit.group(2)] = nk
            scales.add(key)
        elif info.dtype == "F8_E4M3" and key in expected:
            fp8.add(key.removesuffix(".weight"))
    for module in sorted(fp8):
        for name in ("weight_scale", "input_scale"):
            scale = files.tensors.get(f"base:{module}.{name}")
            if scale is None:
                raise UserError(f"FP8 weight without {module}.{name}", location=str(folder), field=f"{module}.{name}")
            if len(scale.shape) > 1 or (scale.shape and scale.shape[0] != 1):
                raise UserError(
                    f"{module}.{name} has shape {scale.shape}: TensorRT-LLM's FP8 linears take per-tensor scales",
                    location=str(scale.file),
                    field=f"{module}.{name}",
                    allowed="[] or [1]",
                )
            scales.add(f"{module}.{name}")
    if any(set(s) != {"k", "v"} for s in kv.values()):
        raise UserError("a layer has a k_scale without its v_scale (or the reverse)", location=str(folder))
    check_shapes(files, "base", expected, str(folder), extra_ok=frozenset(scales))
    return fp8, {i: (s["k"], s["v"]) for i, s in sorted(kv.items())}


def read_json(path: Path, what: str, field_name: str) -> dict[str, Any]:
    if not path.is_file():
        raise UserError(f"no config.json in the {what} directory", location=str(path.parent), field=field_name)
    return read_json_object(path)
