"""Checkpoint loading: layouts agree, and every broken checkpoint is a precise UserError."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from builder.errors import UserError
from builder.model.config import LlamaConfig
from builder.model.loader import load_model, load_state_dict
from tests.unit.model_utils import TINY, hf_model, save_checkpoint, torch_threads

ATOL = 0.0  # same weights, same code: loading must not change a single bit


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def hf():
    return hf_model(seed=3, **TINY["gqa_llama3_untied_headdim"])


@pytest.fixture(scope="module")
def single(hf, tmp_path_factory) -> Path:
    return save_checkpoint(hf, tmp_path_factory.mktemp("single"))


@pytest.fixture(scope="module")
def sharded(hf, tmp_path_factory) -> Path:
    path = save_checkpoint(hf, tmp_path_factory.mktemp("sharded"), max_shard_size="40KB")
    assert (path / "model.safetensors.index.json").is_file() and not (path / "model.safetensors").exists()
    return path


def copy_of(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def rewrite(file: Path, edit) -> None:  # type: ignore[no-untyped-def]
    """Load a safetensors file, apply `edit` to its dict, save it back (HF's `format: pt` metadata)."""
    tensors = load_file(file)
    edit(tensors)
    save_file(tensors, file, metadata={"format": "pt"})


def test_sharded_equals_single_equals_hf(hf, single, sharded) -> None:
    a, b = load_model(single), load_model(sharded)
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        torch.testing.assert_close(sa[key], sb[key], rtol=0, atol=ATOL, msg=key)
    for key, value in hf.state_dict().items():
        torch.testing.assert_close(sa[key.removeprefix("model.")], value, rtol=0, atol=ATOL, msg=key)


def test_tied_checkpoint_has_no_lm_head_and_shares_embeddings(tmp_path) -> None:
    path = save_checkpoint(hf_model(seed=4, **TINY["gqa_llama3_tied"]), tmp_path / "tied")
    assert "lm_head.weight" not in load_file(path / "model.safetensors")
    model = load_model(path)
    assert model.lm_head.weight is model.embed_tokens.weight


def test_tied_checkpoint_with_a_different_lm_head_is_rejected(tmp_path) -> None:
    path = save_checkpoint(hf_model(seed=4, **TINY["gqa_llama3_tied"]), tmp_path / "tied")
    rewrite(
        path / "model.safetensors",
        lambda t: t.__setitem__("lm_head.weight", torch.zeros_like(t["model.embed_tokens.weight"])),
    )
    with pytest.raises(UserError, match="lm_head.weight differs") as info:
        load_model(path)
    assert info.value.field == "lm_head.weight"


@pytest.mark.parametrize(
    ("edit", "field", "needle"),
    [
        (lambda t: t.pop("model.layers.1.mlp.up_proj.weight"), "model.layers.1.mlp.up_proj.weight", "missing key"),
        (lambda t: t.pop("lm_head.weight"), "lm_head.weight", "missing key"),
        (
            lambda t: t.__setitem__("model.layers.0.self_attn.rotary_emb.inv_freq", torch.ones(8)),
            "model.layers.0.self_attn.rotary_emb.inv_freq",
            "unexpected key",
        ),
        (
            lambda t: t.__setitem__("model.layers.0.self_attn.k_proj.weight", torch.zeros(16, 64)),
            "model.layers.0.self_attn.k_proj.weight",
            "wrong shape for 'model.layers.0.self_attn.k_proj.weight': (16, 64), config.json implies (32, 64)",
        ),
        (
            lambda t: t.__setitem__("model.norm.weight", torch.zeros(64, dtype=torch.int32)),
            "model.norm.weight",
            "expected a floating-point tensor",
        ),
    ],
    ids=["missing", "missing_lm_head", "unexpected", "wrong_shape", "int_dtype"],
)
def test_key_and_shape_errors_name_file_and_key(single, tmp_path, edit, field, needle) -> None:
    path = copy_of(single, tmp_path / "ckpt")
    rewrite(path / "model.safetensors", edit)
    with pytest.raises(UserError, match=needle.replace("(", r"\(").replace(")", r"\)")) as info:
        load_model(path)
    assert info.value.field == field
    assert info.value.location == str(path / "model.safetensors")
    assert field in str(info.value) and "model.safetensors" in str(info.value)


@pytest.mark.parametrize("damage", ["truncate", "garbage_header", "empty"])
def test_truncated_or_corrupt_file(single, tmp_path, damage) -> None:
    path = copy_of(single, tmp_path / "ckpt")
    file = path / "model.safetensors"
    data = file.read_bytes()
    file.write_bytes(
        {"truncate": data[: len(data) - 100], "garbage_header": b"\xff" * 64 + data[64:], "empty": b""}[damage]
    )
    with pytest.raises(UserError, match="corrupt or truncated safetensors file") as info:
        load_model(path)
    assert info.value.location == str(file)


def test_sharded_index_errors(sharded, tmp_path) -> None:
    path = copy_of(sharded, tmp_path / "ckpt")
    index_file = path / "model.safetensors.index.json"
    index = json.loads(index_file.read_text())
    key = "model.layers.1.self_attn.o_proj.weight"
    shard = index["weight_map"][key]

    (path / shard).rename(path / "gone.safetensors")
    with pytest.raises(UserError, match=f"shard '{shard}' named in the index is missing") as info:
        load_model(path)
    assert info.value.location == str(index_file)
    (path / "gone.safetensors").rename(path / shard)

    assert list(index["weight_map"].values()).count(shard) == 1, "test expects a shard holding only `key`"
    other_key, other = next((k, s) for k, s in sorted(index["weight_map"].items()) if s > shard)
    index_file.write_text(json.dumps({"weight_map": {**index["weight_map"], key: other}}))
    with pytest.raises(UserError, match=f"'{key}' is listed in the index but absent from {other}") as info:
        load_model(path)
    assert info.value.field == key and info.value.location == str(path / other)

    swapped = {**index["weight_map"], key: other, other_key: shard}  # shards are read in sorted order
    index_file.write_text(json.dumps({"weight_map": swapped}))
    with pytest.raises(UserError, match=f"key '{key}' is in {shard} but the index places it in {other}") as info:
        load_model(path)
    assert info.value.field == key and info.value.location == str(path / shard)

    index_file.write_text("{")
    with pytest.raises(UserError, match="index is not valid JSON"):
        load_model(path)


def test_pickle_refused_unless_allowed(hf, single, tmp_path) -> None:
    path = tmp_path / "bin"
    path.mkdir()
    shutil.copy(single / "config.json", path)
    torch.save(hf.state_dict(), path / "pytorch_model.bin")
    with pytest.raises(UserError, match="pytorch_model.bin is a pickle") as info:
        load_model(path, opt_in="model.allow_pickle")
    assert info.value.location == str(path / "pytorch_model.bin")
    assert (info.value.field, info.value.allowed) == ("model.allow_pickle", "true")
    model = load_model(path, allow_pickle=True)
    torch.testing.assert_close(model.lm_head.weight, hf.lm_head.weight, rtol=0, atol=0)


def test_no_weights_and_bad_dtype(single, tmp_path) -> None:
    path = tmp_path / "empty"
    path.mkdir()
    shutil.copy(single / "config.json", path)
    with pytest.raises(UserError, match="no target weights found"):
        load_model(path)
    with pytest.raises(UserError, match="unsupported dtype 'int8'") as info:
        load_state_dict(single, LlamaConfig.from_json(single), dtype="int8")
    assert "bfloat16" in str(info.value)


def test_dtype_conversion(single) -> None:
    cfg = LlamaConfig.from_json(single)
    for name, dtype in (("bfloat16", torch.bfloat16), ("float16", torch.float16), (torch.float32, torch.float32)):
        state = load_state_dict(single, cfg, dtype=name)
        assert {t.dtype for t in state.values()} == {dtype}
