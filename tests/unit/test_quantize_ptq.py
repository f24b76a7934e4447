"""modelopt FP8 PTQ on the CPU (builder.quantize): calibration text, the modelopt config the recipe
makes, and the unified checkpoint modelopt writes, read back by our strict reader.

The checkpoint is made once per test session (`fixture_fp8`, cached) from the tiny fixture: 8 × 64
calibration tokens from `builtin:stdlib`, FP8 weights, activations and KV cache.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from builder.errors import UserError
from builder.quantize import ptq
from builder.quantize.calibration import HELDOUT, calibration_ids, documents
from builder.quantize.checkpoint import read_fp8_checkpoint
from builder.quantize.reference import e4m3_round
from builder.stages.decoders import load_tokenizer
from tests.unit.scratch import scratch_dir

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "tests" / "fixtures" / "tiny-llama3" / "base"
EXCLUDE = ["lm_head", "embed_tokens", "medusa_heads", "eagle_draft"]


@functools.lru_cache(maxsize=None)
def fixture_fp8(kv: str = "fp8", exclude: tuple[str, ...] = tuple(EXCLUDE)):
    """(checkpoint folder, {module: modelopt's fake-quantized weight}, {module: weight amax}) — cached."""
    tok = load_tokenizer(BASE)
    samples = calibration_ids(tok, "builtin:stdlib", REPO, num_samples=8, seq_len=64)
    model = ptq.load_hf(BASE)
    ptq.calibrate(model, ptq.quant_config("fp8", kv, list(exclude)), samples)
    fake, amax = {}, {}
    with torch.no_grad():
        for name, mod in model.named_modules():
            q = getattr(mod, "weight_quantizer", None)
            if q is not None and q.is_enabled:
                fake[name.removeprefix("model.")] = q(mod.weight).detach().clone()
                amax[name.removeprefix("model.")] = float(q.amax)
    out = scratch_dir("trtspec-fp8-")
    ptq.export(model, out)
    return out, fake, amax


def test_calibration_shapes_and_sources(tmp_path: Path) -> None:
    tok = load_tokenizer(BASE)
    ids = calibration_ids(tok, "builtin:stdlib", REPO, num_samples=3, seq_len=32)
    assert [len(s) for s in ids] == [32, 32, 32]
    (tmp_path / "cal.jsonl").write_text(
        "\n".join(json.dumps({"text": f"def f{i}(x):\n    return x * {i}\n"}) for i in range(40)) + "\n"
    )
    ids = calibration_ids(tok, "cal.jsonl", tmp_path, num_samples=2, seq_len=16)
    assert [len(s) for s in ids] == [16, 16]
    with pytest.raises(UserError, match="needs num_samples"):
        calibration_ids(tok, "cal.jsonl", tmp_path, num_samples=500, seq_len=64)
    with pytest.raises(UserError, match="missing"):
        calibration_ids(tok, "nope.jsonl", tmp_path, num_samples=1, seq_len=4)
    (tmp_path / "bad.jsonl").write_text('{"txt": 1}\n')
    with pytest.raises(UserError, match="'text'"):
        calibration_ids(tok, "bad.jsonl", tmp_path, num_samples=1, seq_len=4)


def test_humaneval_calibration_never_reads_the_heldout_prompts() -> None:
    from builder.data.humaneval import heldout_prompts

    held = heldout_prompts(HELDOUT)
    cal = list(documents("builtin:humaneval", REPO, 8))
    assert cal and not any(p in doc for p in held for doc in cal)


def test_quant_config_follows_exclude_modules() -> None:
    def disabled(cfg):
        return {e["quantizer_name"] for e in cfg["quant_cfg"] if e.get("enable") is False}

    cfg = ptq.quant_config("fp8", "fp8", EXCLUDE)
    assert {"*lm_head*", "*eagle_draft*"} <= disabled(cfg)
    assert any(e["quantizer_name"] == "*[kv]_bmm_quantizer" and e.get("enable") is not False for e in cfg["quant_cfg"])
    no_head = ptq.quant_config("fp8", "model_dtype", ["embed_tokens"])
    assert "*lm_head*" not in disabled(no_head)  # the recipe decides, not modelopt's default
    assert not any("bmm" in e["quantizer_name"] and e.get("enable") is not False for e in no_head["quant_cfg"])
    kv_only = ptq.quant_config("none", "fp8", EXCLUDE)
    assert kv_only["quant_cfg"][0] == {"quantizer_name": "*", "enable": False}


def test_unified_checkpoint_holds_modelopts_quantized_weights() -> None:
    folder, fake, amax = fixture_fp8()
    ckpt = read_fp8_checkpoint(folder)
    layers = ckpt.cfg.num_hidden_layers
    assert set(ckpt.spec.linears) == set(fake)  # every quantized linear, nothing else (lm_head excluded)
    assert len(ckpt.spec.linears) == 7 * layers and "lm_head" not in ckpt.spec.linears
    assert sorted(ckpt.spec.kv_scales) == list(range(layers))
    for name, lin in ckpt.spec.linears.items():
        assert lin.weight.dtype.name == "float8_e4m3fn"
        assert float(lin.weight_scale) == pytest.approx(amax[name] / 448, rel=1e-6)
        # modelopt's fake-quantized weight (what its quantized model computes with) holds exactly the
        # exported FP8 codes: dividing by the scale and rounding to E4M3 gives the stored bits back ...
        codes = e4m3_round(fake[name].double() / float(lin.weight_scale))
        np.testing.assert_array_equal(lin.weight.astype(np.float64), codes.numpy())
        # ... and it is code · scale within two fp32 ulps: modelopt's eager FP8 path multiplies by the
        # rounded 448 / amax and back by its rounded reciprocal (tensor_quant._fp8_eager), the checkpoint
        # (and the graph's DequantizeLinear) by amax / 448 once
        deq = lin.dequantized()
        err = np.abs(deq.astype(np.float64) - fake[name].double().numpy())
        assert (err <= 2 * np.spacing(np.maximum(np.abs(deq), np.abs(fake[name].numpy())))).all()
    q = json.loads((folder / "hf_quant_config.json").read_text())["quantization"]
    assert q["quant_algo"] == "FP8" and q["kv_cache_quant_algo"] == "FP8"
    assert "lm_head" in q["exclude_modules"]


def test_scales_positive_finite_and_qkv_share_an_input_scale() -> None:
    ckpt = read_fp8_checkpoint(fixture_fp8()[0])
    scales = [float(s) for lin in ckpt.spec.linears.values() for s in (lin.weight_scale, lin.input_scale)]
    scales += [s for pair in ckpt.spec.kv_scales.values() for s in pair]
    assert all(np.isfinite(s) and s > 0 for s in scales)
    for i in range(ckpt.cfg.num_hidden_layers):
        qkv = {float(ckpt.spec.linears[f"layers.{i}.self_attn.{p}_proj"].input_scale) for p in "qkv"}
        assert len(qkv) == 1  # modelopt unifies the input amax of linears reading one tensor


def test_exclude_modules_keep_layers_unquantized() -> None:
    folder, fake, _ = fixture_fp8("model_dtype", (*EXCLUDE, "layers.1.mlp"))
    ckpt = read_fp8_checkpoint(folder)
    assert not any(n.startswith("layers.1.mlp") for n in ckpt.spec.linears)
    assert "layers.1.self_attn.q_proj" in ckpt.spec.linears and not ckpt.spec.kv_scales


def test_reader_refuses_a_damaged_checkpoint(tmp_path: Path) -> None:
    import shutil

    from safetensors.torch import load_file, save_file

    src = fixture_fp8()[0]
    for f in src.iterdir():
        shutil.copy(f, tmp_path / f.name)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    tensors["model.layers.0.mlp.up_proj.input_scale"] = torch.tensor(float("nan"))
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(UserError, match="positive and finite"):
        read_fp8_checkpoint(tmp_path)
    del tensors["model.layers.0.mlp.up_proj.input_scale"]
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(UserError, match="without"):
        read_fp8_checkpoint(tmp_path)


# ---------------------------------------------------------------- modelopt's config forms (dict ≤ 0.39, list 0.47)

# nvidia-modelopt 0.37.0 (TensorRT-LLM 1.2.x's line), modelopt/torch/quantization/config.py: lines 147-161
# (_default_disabled_quantizer_cfg), 181-188 (FP8_DEFAULT_CFG), 336-346 (FP8_KV_CFG), as data.
_OLD_DISABLED = {
    "nn.BatchNorm1d": {"*": {"enable": False}},
    "nn.BatchNorm2d": {"*": {"enable": False}},
    "nn.BatchNorm3d": {"*": {"enable": False}},
    "nn.LeakyReLU": {"*": {"enable": False}},
    "*lm_head*": {"enable": False},
    "*proj_out.*": {"enable": False},
    "*block_sparse_moe.gate*": {"enable": False},
    "*router*": {"enable": False},
    "*mlp.gate.*": {"enable": False},
    "*mlp.shared_expert_gate.*": {"enable": False},
    "*output_layer*": {"enable": False},
    "output.*": {"enable": False},
    "default": {"enable": False},
}
OLD_FP8_DEFAULT_CFG = {
    "quant_cfg": {
        "*weight_quantizer": {"num_bits": (4, 3), "axis": None},
        "*input_quantizer": {"num_bits": (4, 3), "axis": None},
        **_OLD_DISABLED,
    },
    "algorithm": "max",
}
OLD_FP8_KV_CFG = {
    "quant_cfg": {
        "*[kv]_bmm_quantizer": {"num_bits": (4, 3), "axis": None, "enable": True},
        "default": {"enable": False},
    },
    "algorithm": "max",
}

# the quantizers modelopt puts on an HF Llama layer and the LM head (TensorQuantizer module names)
LINEARS = (
    [f"model.layers.0.self_attn.{p}_proj" for p in "qkvo"]
    + [f"model.layers.0.mlp.{p}_proj" for p in ("gate", "up", "down")]
    + ["lm_head"]
)
QUANTIZERS = [f"{m}.{q}_quantizer" for m in LINEARS for q in ("weight", "input", "output")] + [
    f"model.layers.0.self_attn.{p}_bmm_quantizer" for p in "qkv"
]


def enabled(cfg: dict) -> dict[str, tuple]:
    """Quantizer name -> num_bits for the quantizers `cfg` leaves enabled, by modelopt's matching rules: dict
    form (0.37 `conversion.py` `set_quantizer_by_cfg`): "default" on every quantizer first, then each wildcard
    in order, `nn.*` class keys only for children of those classes (none here); list form (0.47
    `set_quantizer_by_cfg`): the entries in order, entries with a parent_class only under that class. A later
    match overrides an earlier one; an entry without "enable": False enables."""
    import fnmatch

    entries = cfg["quant_cfg"]
    if isinstance(entries, dict):
        order = [("*", entries["default"])] if "default" in entries else []
        order += [(k, v) for k, v in entries.items() if k != "default" and not k.startswith("nn.")]
    else:
        order = [
            (
                e["quantizer_name"],
                {"enable": e["enable"]}
                if "enable" in e and "cfg" not in e
                else {**e.get("cfg", {}), **({"enable": e["enable"]} if "enable" in e else {})},
            )
            for e in entries
            if "parent_class" not in e
        ]
    state: dict[str, tuple | None] = {q: None for q in QUANTIZERS}
    for pattern, attrs in order:
        for q in QUANTIZERS:
            if fnmatch.fnmatch(q, pattern):
                state[q] = None if attrs.get("enable") is False else tuple(attrs.get("num_bits", (4, 3)))
    return {q: v for q, v in state.items() if v is not None}


@pytest.mark.parametrize("mode,kv", [("fp8", "fp8"), ("fp8", "model_dtype"), ("none", "fp8")])
@pytest.mark.parametrize("exclude", [EXCLUDE, ["embed_tokens"], [*EXCLUDE, "layers.0.mlp"]])
def test_quant_config_dict_form_of_modelopt_037_matches_the_list_form(mode, kv, exclude) -> None:
    """The same recipe gives the same enabled quantizers, with E4M3 numerics, in 0.37's dict form (from its
    source, as data) and 0.47's list form (installed); both follow the recipe."""
    old = ptq.quant_config(mode, kv, exclude, defaults=(OLD_FP8_DEFAULT_CFG, OLD_FP8_KV_CFG))
    new = ptq.quant_config(mode, kv, exclude)
    assert ptq.config_form(old) == "dict" and ptq.config_form(new) == "list"
    assert isinstance(OLD_FP8_DEFAULT_CFG["quant_cfg"]["*lm_head*"], dict)  # the defaults are not mutated
    got = enabled(old)
    assert got == enabled(new)
    assert set(got.values()) <= {(4, 3)}
    linears = [m for m in LINEARS if not any(p in m for p in exclude)] if mode == "fp8" else []
    want = {f"{m}.{q}_quantizer" for m in linears for q in ("weight", "input")}
    want |= {f"model.layers.0.self_attn.{p}_bmm_quantizer" for p in "kv"} if kv == "fp8" else set()
    assert set(got) == want


def test_supported_modelopt_range_is_stated() -> None:
    assert ptq.MODELOPT_RANGE in (ptq.__doc__ or "")
    assert ptq.in_supported_range("0.37.0") and ptq.in_supported_range("0.47.0")
    assert not ptq.in_supported_range("0.36.1") and not ptq.in_supported_range("0.48.0")
    assert ptq.in_supported_range(ptq.modelopt_version())  # this machine's


def test_load_hf_reads_safetensors_only_unless_allow_pickle(tmp_path: Path) -> None:
    """`model.allow_pickle` off: a checkpoint with only pytorch_model.bin is refused by transformers'
    use_safetensors=True; on: read (transformers' torch.load(weights_only=True) path)."""
    from tests.unit.model_utils import hf_model

    model = hf_model(seed=3, num_hidden_layers=1)
    model.config.save_pretrained(tmp_path)
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")  # the upstream pickle layout
    assert (tmp_path / "pytorch_model.bin").is_file() and not (tmp_path / "model.safetensors").exists()
    with pytest.raises(OSError, match="safetensors"):
        ptq.load_hf(tmp_path)
    got = ptq.load_hf(tmp_path, allow_pickle=True)
    assert all(torch.equal(a, b) for a, b in zip(got.state_dict().values(), model.state_dict().values()))
