"""What a modelopt unified HF checkpoint says about its quantization (torch-free: `prequantized.detect` runs at
plan time, `checkpoint.read_fp8_checkpoint` at build time; both read it here).

hf_quant_config.json when present; published checkpoints without it carry the same facts in config.json's
`quantization_config` (modelopt 0.47 writes quant_algo, `ignore`, `kv_cache_scheme`; older releases
kv_cache_quant_algo and exclude_modules).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from builder.errors import UserError

QUANT_CONFIG = "hf_quant_config.json"


def quant_config_of(folder: Path) -> dict[str, Any]:
    """hf_quant_config.json, or the same facts from config.json's `quantization_config` (modelopt 0.47 writes
    quant_algo, `ignore`, `kv_cache_scheme`; older releases kv_cache_quant_algo and exclude_modules)."""
    path = Path(folder) / QUANT_CONFIG
    if path.is_file():
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not isinstance(data.get("quantization"), dict):
            raise UserError("expected an object with a 'quantization' object", location=str(path))
        return data
    raw = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8")).get("quantization_config")
    if not isinstance(raw, dict):
        raise UserError(f"neither {QUANT_CONFIG} nor a quantization_config in config.json", location=str(folder))
    kv = raw.get("kv_cache_quant_algo")
    scheme = raw.get("kv_cache_scheme")
    if kv is None and isinstance(scheme, dict) and scheme.get("type") == "float" and scheme.get("num_bits") == 8:
        kv = "FP8"
    quant = {
        "quant_algo": raw.get("quant_algo"),
        "kv_cache_quant_algo": kv,
        "exclude_modules": list(raw.get("exclude_modules") or raw.get("ignore") or []),
    }
    return {"producer": raw.get("producer", {}), "quantization": quant}
