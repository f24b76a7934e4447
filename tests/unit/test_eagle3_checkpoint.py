"""EAGLE-3 draft checkpoints: both layouts written and read back, the published drafts' layouts, and every refusal.

Oracles: the tensors written (bit-equal after a round trip through a stored dtype: the stored values cast back);
the published drafts' config.json as upstream wrote them (keys verbatim from the cited files, numbers scaled down,
the vocabulary/draft-vocabulary ratio kept) with tensors built as upstream's module names them; upstream's default
aux layers for 32/80-layer targets. We cannot download the published drafts: these are their layouts, not their
weights.

Published layouts (sources, as stored here):
- yuhuili/EAGLE3-LLaMA3.1-Instruct-8B: config.json = SafeAILab/EAGLE `eagle/traineagle3/config.json`
  @9666a8182d9bed8b5b637fd4a126c90d9b9c3db2 (no rope_theta, no eagle_config, max_position_embeddings 2048,
  draft_vocab_size 32000; architectures `LlamaForCausalLM` in the template, `LlamaForCausalLMEagle3` per
  ../shared/EAGLE3.md: both read); weights pytorch_model.bin (fetched as such by llama.cpp's EAGLE-3 scripts) with
  SafeAILab's names and no embed_tokens (EAGLE issue #249).
- SpecForge's Llama 3 70B EAGLE-3 config: sgl-project/SpecForge `configs/llama3-70B-ealge3.json`
  @82b62f6ebe950866925384d4c90f62aa3594934f (hidden 8192 = the target's, llama3 RoPE scaling, rope_theta 500000).
- yuhuili/EAGLE3-LLaMA3.3-Instruct-70B: its draft is narrower than its target (`target_hidden_size`, sgl-project/
  sglang PR #4716) and ships its own `embed_tokens.weight` (vllm-project/vllm issue #18906: "KeyError:
  'embed_tokens.weight'"; SafeAILab `cnets.py` loads the target's embedding only without target_hidden_size). Its
  exact widths are not in the stored sources: the 8B template's keys plus target_hidden_size, widths made up.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from builder.errors import UserError
from builder.model.config import LlamaConfig
from builder.speculative.eagle3.checkpoint import (
    VARIANT_FLAGS,
    check_folder_header,
    default_aux_layers,
    parse_config,
    read_shape,
)
from builder.speculative.eagle3.draft_model import Eagle3Draft, load_eagle3, random_draft

V, H = 512, 64  # the scaled-down vocabulary and width (Llama 3: 128256, 4096)
VD = 128  # 32000 / 128256 ≈ 1/4 of the vocabulary, as upstream's


def small_cfg(hidden: int = H, vocab: int = V, **kw) -> LlamaConfig:
    base = dict(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=8,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=hidden // 4,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        rope_scaling=None,
        tie_word_embeddings=False,
        max_position_embeddings=1024,
    )
    base.update(kw)
    return LlamaConfig(**base)


def embedding(vocab: int = V, hidden: int = H, seed: int = 7) -> torch.Tensor:
    return torch.randn(vocab, hidden, generator=torch.Generator().manual_seed(seed))


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys(), a.keys() ^ b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k


def rewrite(folder: Path, **changes) -> None:
    """Rewrite model.safetensors with tensors replaced (None: removed)."""
    file = folder / "model.safetensors"
    t = load_file(file)
    for k, v in changes.items():
        if v is None:
            t.pop(k, None)
        else:
            t[k] = v
    save_file(t, file)


def edit_config(folder: Path, **changes) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (folder / "config.json").write_text(json.dumps(cfg))


# --- our two layouts ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["safeailab", "modelopt"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_round_trip_in_both_layouts_and_stored_dtypes(tmp_path, layout, dtype):
    embed = embedding()
    d = random_draft(small_cfg(), (1, 3, 4), draft_vocab=VD, base_embed=embed)
    d.save(tmp_path, layout=layout, dtype=dtype)
    stored = load_file(tmp_path / "model.safetensors")
    mid = "midlayer." if layout == "safeailab" else "layers.0."
    assert {k for k in stored if k.startswith(("midlayer.", "layers.0."))} == {
        mid + k.removeprefix("midlayer.") for k in d.state_dict() if k.startswith("midlayer.")
    }
    assert ("t2d" in stored) == (layout == "safeailab") and "embed_tokens.weight" not in stored
    assert stored["d2t"].dtype == torch.int64 and stored["fc.weight"].dtype == dtype
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["torch_dtype"] == str(dtype).removeprefix("torch.") and cfg["draft_vocab_size"] == VD
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]  # vLLM's key: input-of-layer
    back = load_eagle3(tmp_path, embed, 8)
    want = {k: (v if k == "d2t" else v.to(dtype).float()) for k, v in d.state_dict().items()}
    want["embed_tokens.weight"] = embed
    same(back.state_dict(), want)
    assert back.aux_layers == (1, 3, 4) and torch.equal(back.vocab_ids, d.vocab_ids)


def test_modelopt_layout_is_what_modelopts_exporter_accepts(tmp_path):
    """The key set modelopt 0.47's `EagleExporter._check_valid_sd` demands of an export (its own constant)."""
    from modelopt.torch.export.plugins.hf_spec_export import LLAMA_EAGLE_SINGLE_LAYER as keys

    for vd in (VD, V):
        d = random_draft(small_cfg(), (1, 3, 4), draft_vocab=vd)
        stored = set(d.state_for("modelopt"))
        modules = {k.rsplit(".", 1)[0] if k.endswith(".weight") else k for k in stored}
        assert keys["required"] <= modules <= keys["required"] | keys["optional"]
        assert ("d2t" in stored) == (vd < V)  # EagleModule registers d2t only for a reduced vocabulary


def test_whole_vocabulary_needs_no_d2t(tmp_path):
    embed = embedding()
    d = random_draft(small_cfg(), (1, 3, 4), base_embed=embed)  # Vd = V
    for layout in ("safeailab", "modelopt"):
        d.save(tmp_path / layout, layout=layout)
        back = load_eagle3(tmp_path / layout, embed, 8)
        assert back.vocab_ids is None and back.draft_vocab_size is None
        same(back.state_dict(), d.state_dict())
    assert "d2t" not in load_file(tmp_path / "modelopt" / "model.safetensors")
    edit_config(tmp_path / "modelopt", draft_vocab_size=None)  # absent: the whole vocabulary
    assert read_shape(tmp_path / "modelopt").draft_vocab == V


def test_d2t_int32_and_its_checks(tmp_path):
    embed = embedding()
    d = random_draft(small_cfg(), (1, 3, 4), draft_vocab=VD, base_embed=embed)
    d.save(tmp_path)
    rewrite(tmp_path, d2t=d.d2t.to(torch.int32))  # TensorRT-LLM's parameter dtype
    same(load_eagle3(tmp_path, embed, 8).state_dict(), d.state_dict())
    outside = d.d2t.clone()
    outside[-1] = V  # draft id VD-1 -> token VD-1+V: outside
    rewrite(tmp_path, d2t=outside, t2d=None)
    with pytest.raises(UserError, match="outside the target's vocabulary") as e:
        load_eagle3(tmp_path, embed, 8)
    assert e.value.field == "d2t"
    rewrite(tmp_path, d2t=torch.zeros(VD, dtype=torch.int64) + torch.tensor([0, 1] * (VD // 2)))  # 0,2,2,4,4,…
    with pytest.raises(UserError, match="draft ids 1 and 2 both to token 2") as e:
        load_eagle3(tmp_path, embed, 8)
    assert e.value.field == "d2t"
    rewrite(tmp_path, d2t=d.d2t.float())
    with pytest.raises(UserError, match="stored as F32") as e:
        load_eagle3(tmp_path, embed, 8)
    assert e.value.field == "d2t"
    rewrite(tmp_path, d2t=None)
    with pytest.raises(UserError, match="needs d2t") as e:
        load_eagle3(tmp_path, embed, 8)


def test_t2d_must_be_d2ts_membership(tmp_path):
    embed = embedding()
    d = random_draft(small_cfg(), (1, 3, 4), draft_vocab=VD, base_embed=embed)
    d.save(tmp_path)
    t2d = load_file(tmp_path / "model.safetensors")["t2d"]
    assert int(t2d.sum()) == VD and torch.equal(t2d.nonzero().flatten(), d.vocab_ids)  # written as SafeAILab's
    wrong = t2d.clone()
    j = int((~t2d).nonzero()[0])
    wrong[j] = True
    rewrite(tmp_path, t2d=wrong)
    for check in (lambda: load_eagle3(tmp_path, embed, 8), lambda: check_folder_header(tmp_path, read_shape(tmp_path))):
        with pytest.raises(UserError, match=rf"t2d\[{j}\] is True") as e:
            check()
        assert e.value.field == "t2d"
    rewrite(tmp_path, t2d=t2d.to(torch.uint8))
    with pytest.raises(UserError, match="stored as U8"):
        load_eagle3(tmp_path, embed, 8)


def test_a_stored_copy_of_the_targets_embedding(tmp_path):
    embed = embedding()
    d = random_draft(small_cfg(), (1, 3, 4), draft_vocab=VD, base_embed=embed)
    d.save(tmp_path)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):  # a copy rounded to the stored dtype is the same
        rewrite(tmp_path, **{"embed_tokens.weight": embed.to(dtype)})
        same(load_eagle3(tmp_path, embed, 8).state_dict(), d.state_dict())
    other = embed.clone()
    other[3, 5] += 0.05  # one entry: far beyond bf16 rounding of a ~1-magnitude value (2^-8 relative)
    rewrite(tmp_path, **{"embed_tokens.weight": other.to(torch.bfloat16)})
    with pytest.raises(UserError, match="another target") as e:
        load_eagle3(tmp_path, embed, 8)
    assert e.value.field == "embed_tokens.weight"


def test_a_draft_narrower_than_its_target_carries_its_own_embedding(tmp_path):
    Ht = 96
    d = Eagle3Draft(small_cfg(), Ht, VD, (1, 3, 4))
    with torch.no_grad():
        for p in d.parameters():
            p.normal_(0, 0.05)
    d.set_vocab_ids(torch.arange(0, V, V // VD))
    d.save(tmp_path)
    stored = load_file(tmp_path / "model.safetensors")
    assert stored["embed_tokens.weight"].shape == (V, H) and stored["fc.weight"].shape == (H, 3 * Ht)
    back = load_eagle3(tmp_path, embedding(V, Ht), 8)  # the target's [V, Ht] embedding is not used
    same(back.state_dict(), d.state_dict())
    with pytest.raises(ValueError, match="modelopt's layout has no embed_tokens"):
        d.save(tmp_path / "mo", layout="modelopt")
    with pytest.raises(UserError, match="the three 64-wide hidden states") as e:  # over a target of its own width
        load_eagle3(tmp_path, embedding(V, H), 8)
    assert e.value.field == "fc.weight"
    rewrite(tmp_path, **{"embed_tokens.weight": None})
    with pytest.raises(UserError, match="carries its own embedding") as e:
        load_eagle3(tmp_path, embedding(V, Ht), 8)
    assert e.value.field == "embed_tokens.weight"


def test_fc_width_is_three_target_widths(tmp_path):
    embed = embedding()
    d = random_draft(small_cfg(), (1, 3, 4), draft_vocab=VD, base_embed=embed)
    d.save(tmp_path)
    rewrite(tmp_path, **{"fc.weight": torch.zeros(H, 2 * H)})  # two features: modelopt's collapsed default ids
    with pytest.raises(UserError, match=r"wrong shape for 'fc.weight'") as e:
        load_eagle3(tmp_path, embed, 8)
    assert e.value.field == "fc.weight"


# --- config.json ----------------------------------------------------------------------------------------------------


def good_config() -> dict:
    return random_draft(small_cfg(), (1, 3, 4), draft_vocab=VD).config_dict()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        *[({flag: True}, flag) for flag in VARIANT_FLAGS],
        *[({"eagle_config": {flag: True}}, f"eagle_config.{flag}") for flag in VARIANT_FLAGS],
        ({"eagle_config": {"use_aux_hidden_state": False}}, "eagle_config.use_aux_hidden_state"),
        ({"bias": True}, "bias"),
        ({"tie_word_embeddings": True}, "tie_word_embeddings"),
        ({"num_hidden_layers": 2}, "num_hidden_layers"),
        ({"draft_vocab_size": V + 1}, "draft_vocab_size"),
        ({"draft_vocab_size": True}, "draft_vocab_size"),
        ({"target_hidden_size": 0}, "target_hidden_size"),
        ({"architectures": ["MedusaModel"]}, "architectures"),
        (
            {"rope_scaling": {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 2048}},
            "rope_scaling.rope_type",
        ),
        (
            {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3]}},
            "eagle_config.eagle_aux_hidden_state_layer_ids",
        ),
        (
            {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 1, 3]}},
            "eagle_config.eagle_aux_hidden_state_layer_ids",
        ),
        ({"eagle_aux_hidden_state_layer_ids": [1, 3, 4]}, "eagle_aux_hidden_state_layer_ids"),  # not +1: disagrees
        ({"eagle_aux_hidden_state_layer_ids": [0, 3, 4], "eagle_config": {}}, "eagle_aux_hidden_state_layer_ids"),
        ({"eagle_aux_layer_semantics": "tl"}, "eagle_aux_layer_semantics"),
    ],
)
def test_config_refusals_name_the_key(change, field):
    cfg = good_config()
    for k, v in change.items():
        cfg[k] = v if not isinstance(v, dict) or k != "eagle_config" or not v else {**cfg["eagle_config"], **v}
        if k == "eagle_config" and not v:
            cfg[k] = {}
    with pytest.raises(UserError) as e:
        parse_config(cfg, "config.json")
    assert e.value.field == field, e.value


def test_aux_ids_in_either_convention():
    """eagle_config's ids are output-of-layer; vLLM's top-level key input-of-layer (one more) unless it declares
    sglang semantics; either alone gives the same ids, ascending (every runtime concatenates in layer order)."""
    cfg = good_config()
    assert parse_config(cfg, "c").aux_layers == (1, 3, 4)
    only_vllm = {**cfg, "eagle_config": {}}
    assert parse_config(only_vllm, "c").aux_layers == (1, 3, 4)
    sglang = {**only_vllm, "eagle_aux_hidden_state_layer_ids": [4, 1, 3], "eagle_aux_layer_semantics": "sglang"}
    assert parse_config(sglang, "c").aux_layers == (1, 3, 4)
    neither = {k: v for k, v in only_vllm.items() if k != "eagle_aux_hidden_state_layer_ids"}
    assert parse_config(neither, "c").aux_layers is None


@pytest.mark.parametrize(
    ("rope", "theta"),
    [
        ({}, 10000.0),  # no RoPE key at all (the official 8B draft): HF's default
        ({"rope_scaling": {"rope_type": "default", "rope_theta": 5e5}}, 5e5),  # modelopt's template, transformers 5
        ({"rope_parameters": {"rope_type": "default", "rope_theta": 5e5}}, 5e5),
    ],
)
def test_the_drafts_own_rope_theta(rope, theta):
    cfg = {k: v for k, v in good_config().items() if k != "rope_theta"}
    assert parse_config({**cfg, **rope}, "c").cfg.rope_theta == theta


def test_torch_dtype_is_not_trusted(tmp_path):
    """modelopt 0.47 writes torch_dtype "bfloat16" (its architecture default) over float32 weights: the stored
    dtype is what loads."""
    embed = embedding()
    d = random_draft(small_cfg(), (1, 3, 4), draft_vocab=VD, base_embed=embed)
    d.save(tmp_path, layout="modelopt")
    edit_config(tmp_path, torch_dtype="bfloat16")
    same(load_eagle3(tmp_path, embed, 8).state_dict(), d.state_dict())


# --- pickles and the published layouts ------------------------------------------------------------------------------


class _Attention(nn.Module):  # cnets.py LlamaAttention of EAGLE-3: q/k/v over 2H
    def __init__(self, c: dict) -> None:
        super().__init__()
        C, nH, nKV = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
        D = c.get("head_dim") or C // nH
        self.q_proj = nn.Linear(2 * C, nH * D, bias=False)
        self.k_proj = nn.Linear(2 * C, nKV * D, bias=False)
        self.v_proj = nn.Linear(2 * C, nKV * D, bias=False)
        self.o_proj = nn.Linear(nH * D, C, bias=False)


class _MLP(nn.Module):
    def __init__(self, c: dict) -> None:
        super().__init__()
        C, I = c["hidden_size"], c["intermediate_size"]
        self.gate_proj, self.up_proj = nn.Linear(C, I, bias=False), nn.Linear(C, I, bias=False)
        self.down_proj = nn.Linear(I, C, bias=False)


class _Norm(nn.Module):
    def __init__(self, C: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))


class _Midlayer(nn.Module):  # cnets.py LlamaDecoderLayeremb
    def __init__(self, c: dict) -> None:
        super().__init__()
        C = c["hidden_size"]
        self.self_attn, self.mlp = _Attention(c), _MLP(c)
        self.hidden_norm, self.input_layernorm, self.post_attention_layernorm = _Norm(C), _Norm(C), _Norm(C)


class UpstreamEagle3(
    nn.Module
):  # SafeAILab cnets.py Model (EAGLE-3): embed_tokens, lm_head, midlayer, fc, norm, d2t, t2d
    def __init__(self, c: dict) -> None:
        super().__init__()
        C, Vv, Vd = c["hidden_size"], c["vocab_size"], c["draft_vocab_size"]
        self.embed_tokens = nn.Embedding(Vv, C)
        self.lm_head = nn.Linear(C, Vd, bias=False)
        self.midlayer = _Midlayer(c)
        self.fc = nn.Linear(3 * c.get("target_hidden_size", C), C, bias=False)
        self.norm = _Norm(C)
        self.register_buffer("d2t", torch.zeros(Vd, dtype=torch.long))
        self.register_buffer("t2d", torch.zeros(Vv, dtype=torch.bool))


def upstream_state(c: dict, seed: int = 0, embed: bool = False) -> dict[str, torch.Tensor]:
    """A published draft's tensors: upstream's module, random weights in its torch_dtype, a draft vocabulary of
    ascending ids (d2t[i] = used[i] - i, t2d = membership: `traineagle3/cnets.py`)."""
    g = torch.Generator().manual_seed(seed)
    m = UpstreamEagle3(c)
    with torch.no_grad():
        for n, p in m.named_parameters():
            p.copy_((1.0 if n.endswith("norm.weight") else 0.0) + 0.05 * torch.randn(p.shape, generator=g))
        used = torch.randperm(c["vocab_size"], generator=g)[: c["draft_vocab_size"]].sort().values
        m.d2t.copy_(used - torch.arange(len(used)))
        m.t2d[used] = True
    state = {
        k: v.to(getattr(torch, c["torch_dtype"])) if v.is_floating_point() else v for k, v in m.state_dict().items()
    }
    return state if embed else {k: v for k, v in state.items() if k != "embed_tokens.weight"}


UPSTREAM_8B = {  # SafeAILab/EAGLE eagle/traineagle3/config.json @ 9666a818, verbatim
    "architectures": ["LlamaForCausalLM"],
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 2048,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 1,
    "pad_token_id": 0,
    "rms_norm_eps": 1e-05,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "transformers_version": "4.28.1",
    "use_cache": True,
    "vocab_size": 128256,
    "draft_vocab_size": 32000,
}
SPECFORGE_70B = {  # sgl-project/SpecForge configs/llama3-70B-ealge3.json @ 82b62f6e, verbatim
    "architectures": ["LlamaForCausalLMEagle3"],
    "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009],
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 8192,
    "initializer_range": 0.02,
    "intermediate_size": 28672,
    "max_position_embeddings": 4096,
    "model_type": "llama",
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "num_hidden_layers": 1,
    "pad_token_id": 0,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 8.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 4096,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "transformers_version": "4.28.1",
    "use_cache": True,
    "vocab_size": 128256,
    "draft_vocab_size": 32000,
}


def scaled(upstream: dict, **numbers) -> dict:
    """Upstream's config with the same keys, smaller numbers (and nothing else changed)."""
    out = {**upstream, **numbers}
    assert out.keys() == upstream.keys() | numbers.keys() and set(numbers) - {"target_hidden_size"} <= upstream.keys()
    return out


SCALE = dict(hidden_size=H, intermediate_size=224, num_attention_heads=8, num_key_value_heads=2, vocab_size=V)
PUBLISHED = {
    # name: (config.json, target layers, target width, with its own embed_tokens)
    "8b": (scaled(UPSTREAM_8B, **SCALE, draft_vocab_size=VD), 32, H, False),
    "8b-eagle3-arch": (
        scaled(UPSTREAM_8B, **SCALE, draft_vocab_size=VD, architectures=["LlamaForCausalLMEagle3"]),
        32,
        H,
        False,
    ),
    "70b-specforge": (scaled(SPECFORGE_70B, **SCALE, head_dim=8, draft_vocab_size=VD), 80, H, False),
    "70b-yuhuili": (scaled(UPSTREAM_8B, **SCALE, draft_vocab_size=VD, target_hidden_size=96), 80, 96, True),
}


def write_published(folder: Path, name: str, pickle: bool) -> dict[str, torch.Tensor]:
    cfg, _, _, own = PUBLISHED[name]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    state = upstream_state(cfg, embed=own)
    if pickle:
        torch.save(state, folder / "pytorch_model.bin")  # SafeAILab ships torch.save(state_dict)
    else:
        save_file({k: v.contiguous() for k, v in state.items()}, folder / "model.safetensors")
    return state


@pytest.mark.parametrize("name", sorted(PUBLISHED))
@pytest.mark.parametrize("pickle", [True, False])
def test_published_layouts_load(tmp_path, name, pickle):
    cfg, layers, target_width, own = PUBLISHED[name]
    state = write_published(tmp_path / name, name, pickle)
    embed = embedding(V, target_width)
    if pickle:
        with pytest.raises(UserError, match="pytorch_model.bin is a pickle") as e:
            load_eagle3(tmp_path / name, embed, layers, opt_in="speculative.allow_pickle")
        assert e.value.field == "speculative.allow_pickle"
    d = load_eagle3(tmp_path / name, embed, layers, allow_pickle=pickle)
    assert d.aux_layers == default_aux_layers(layers) == {32: (1, 15, 28), 80: (1, 39, 76)}[layers]
    want = {k: (v if k == "d2t" else v.float()) for k, v in state.items() if k != "t2d"}
    if not own:
        want["embed_tokens.weight"] = embed
    same(d.state_dict(), want)
    assert torch.equal(d.vocab_ids, state["t2d"].nonzero().flatten())
    c = d.cfg
    assert (
        c.rope_theta == cfg.get("rope_theta", 10000.0) and c.max_position_embeddings == cfg["max_position_embeddings"]
    )
    assert (c.rope_scaling is not None) == ("rope_scaling" in cfg)


def test_safetensors_beside_a_pickle_win(tmp_path):
    state = write_published(tmp_path / "d", "8b", pickle=True)
    save_file({k: v.contiguous() for k, v in state.items()}, tmp_path / "d" / "model.safetensors")
    load_eagle3(tmp_path / "d", embedding(), 32)  # no opt-in needed: the pickle is not read
