"""modelopt's own EAGLE-3 code, run (nvidia-modelopt 0.47, on the CPU): it loads the checkpoints we write, captures
the target layers our ids name, and writes exports we read back with the same tensors.

modelopt has no loader for an exported draft: it trains an `HFEagleModel` (`mtsp.convert` of an HF Llama) and
exports its `eagle_module` with the prefix dropped (`hf_spec_export.EagleExporter._extract_state_dict`). So "loads"
here is the inverse its exporter implies: the converted model's `eagle_module.load_state_dict(..., strict=True)` of
our tensors under modelopt's names (`builder.speculative.eagle3.upstream.modelopt`), every tensor then compared.

What the runs show about modelopt 0.47 itself (pinned here, so a change upstream fails a test):
- its forward hooks capture layer *outputs* in layer order: our output-of-layer ids, concatenated ascending;
- its EagleModule feeds `hidden_norm(input_layernorm(h))` to attention (the decoder layer's own input norm runs
  before the pre-hook that applies hidden_norm: `plugins/modeling_eagle.py` `_eagle3_attention_forward_pre_hook`),
  where SafeAILab, TensorRT-LLM, vLLM and SGLang compute `hidden_norm(h)`. The two agree only when
  input_layernorm's weight is uniform (RMSNorm is scale-invariant up to its eps): a draft trained by modelopt runs
  on other math in every deployment runtime (and in ours);
- its export writes `torch_dtype: "bfloat16"` over float32 weights and, by default, YaRN RoPE scaling
  (`eagle_export_rope_scaling`) over a draft trained with plain RoPE.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch
from safetensors.torch import load_file

from builder.errors import UserError
from builder.model.config import LlamaConfig
from builder.model.llama import causal_mask, rope_cos_sin
from builder.model.loader import load_model
from builder.speculative.eagle3 import upstream
from builder.speculative.eagle3.checkpoint import header_entries, read_shape, safetensors_header
from builder.speculative.eagle3.draft_model import load_eagle3, random_draft
from tests.unit.speculative_models import make_hf_llama

mtsp = pytest.importorskip("modelopt.torch.speculative")

V, H, N = 512, 64, 8
AUX = (1, 3, 4)
VD = 128


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory):
    return make_hf_llama(tmp_path_factory.mktemp("target"), vocab=V, hidden=H, layers=N, heads=4, kv_heads=2)


@pytest.fixture(scope="module")
def target(target_dir):
    return load_model(target_dir, torch.float32)


def converted(target_dir, cfg: LlamaConfig, vd: int, aux=AUX):
    """The target as modelopt trains it: an HF Llama converted with an EAGLE-3 module of the draft's shape."""
    from modelopt.torch.speculative.config import EAGLE3_DEFAULT_CFG
    from transformers import LlamaForCausalLM

    m = LlamaForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
    c = copy.deepcopy(EAGLE3_DEFAULT_CFG["config"])
    c["eagle_use_torch_compile"] = False
    c["eagle_architecture_config"].update(
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        head_dim=cfg.head_dim,
        intermediate_size=cfg.intermediate_size,
        rms_norm_eps=cfg.rms_norm_eps,
        rope_theta=cfg.rope_theta,
        rope_scaling={"rope_type": "default", "rope_theta": cfg.rope_theta},
        eagle_aux_hidden_state_layer_ids=list(aux),
        draft_vocab_size=vd,
        has_lm_head=vd == V,  # a whole-vocabulary draft with a head of its own (modelopt's default: the target's)
    )
    mtsp.convert(m, [("eagle", c)])
    return m.eval()


def draft_cfg(target) -> LlamaConfig:
    t = target.cfg
    return LlamaConfig(**{**t.__dict__, "rope_theta": 10000.0, "rope_scaling": None, "intermediate_size": 96})


def into_modelopt(m, folder, vd: int):
    """Our checkpoint into modelopt's eagle_module, strictly, by the modelopt reader's names."""
    cfg = json.loads((folder / "config.json").read_text())
    entries = header_entries(safetensors_header(folder / "model.safetensors"))
    loaded = upstream.modelopt(cfg, entries, upstream.Target(N, H, V), has_lm_head=vd == V)
    stored = load_file(folder / "model.safetensors")
    state = {name.removeprefix("eagle_module."): stored[p.sources[0]] for name, p in loaded.params.items()}
    m.eagle_module.load_state_dict(state, strict=True)
    return loaded


@pytest.mark.parametrize("layout", ["safeailab", "modelopt"])
@pytest.mark.parametrize("vd", [VD, V])
def test_modelopt_loads_our_checkpoints_strictly(target_dir, target, tmp_path, layout, vd):
    d = random_draft(draft_cfg(target), AUX, draft_vocab=vd, base_embed=target.embed_tokens.weight, seed=3)
    d.save(tmp_path, layout=layout)
    m = converted(target_dir, d.cfg, vd)
    loaded = into_modelopt(m, tmp_path, vd)
    ours = d.state_dict()
    mine = m.eagle_module.state_dict()
    assert set(mine) == {n.removeprefix("eagle_module.") for n in loaded.params}
    for name, p in loaded.params.items():
        assert torch.equal(mine[name.removeprefix("eagle_module.")], ours[p.meaning[0]]), name
    assert loaded.aux_layers == AUX == tuple(m.eagle_config.eagle_aux_hidden_state_layer_ids)
    if vd < V:
        assert torch.equal(torch.arange(vd) + m.eagle_module.d2t, d.vocab_ids)


def test_modelopt_captures_the_layers_our_ids_name(target_dir, target):
    m = converted(target_dir, draft_cfg(target), VD)
    tokens = torch.tensor([[5, 17, 33, 2, 99, 100, 7]])
    T = tokens.shape[1]
    with torch.no_grad():
        m._base_model(input_ids=tokens)  # its forward hooks collect the aux hidden states
        theirs = m.pop_and_gather_aux_hiddens()  # [1, T, 3H]
        pos = torch.arange(T)[None]
        _, ours = target(tokens, pos, causal_mask(T), features=AUX)
        _, shifted = target(tokens, pos, causal_mask(T), features=tuple(i - 1 for i in AUX))  # input-of-layer ids
    # the same fp32 layers in two implementations: rounding differences ~1e-6 of the magnitude; a wrong layer
    # differs by the layer's whole update
    scale = float(ours.abs().max())
    assert float((theirs - ours).abs().max()) <= 1e-4 * scale
    assert float((theirs - shifted).abs().max()) > 1e-2 * scale


def _features(d, T: int, seed: int = 5):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, T, 3 * d.target_hidden, generator=g), torch.randint(0, V, (1, T), generator=g)


def _modelopt_forward(m, d, feats, tokens):
    em = m.eagle_module
    em._maybe_init_rope()
    T = tokens.shape[1]
    with torch.no_grad():
        _, pre, _ = em(
            hidden_states=em.fc(feats),
            inputs_embeds=d.embed_tokens(tokens),
            attention_mask=torch.ones(T, T, dtype=torch.bool).tril()[None, None],
            position_ids=torch.arange(T)[None],
        )
    return pre


def test_modelopt_forward_is_ours_only_with_a_uniform_input_norm(target_dir, target, tmp_path):
    d = random_draft(draft_cfg(target), AUX, draft_vocab=VD, base_embed=target.embed_tokens.weight, seed=4)
    T = 6
    feats, tokens = _features(d, T)
    pos, mask = torch.arange(T)[None], causal_mask(T)
    m = converted(target_dir, d.cfg, VD)
    # a uniform input_layernorm (c·1): RMSNorm(c·x̂) = RMSNorm(x) up to the norms' eps (1e-5 against mean squares
    # ~1 here), so modelopt's double norm and SafeAILab's single norm agree to ~1e-5 relative
    with torch.no_grad():
        d.midlayer.input_layernorm.weight.fill_(1.3)
    d.save(tmp_path / "uniform")
    into_modelopt(m, tmp_path / "uniform", VD)
    with torch.no_grad():
        ours = d(tokens, feats, pos, mask)
    theirs = _modelopt_forward(m, d, feats, tokens)
    scale = float(ours.abs().max())
    assert float((theirs - ours).abs().max()) <= 1e-4 * scale
    # a trained (non-uniform) input_layernorm: modelopt computes hidden_norm(input_layernorm(h)), not ours
    with torch.no_grad():
        d.midlayer.input_layernorm.weight.copy_(1 + 0.3 * torch.randn(H, generator=torch.Generator().manual_seed(9)))
    d.save(tmp_path / "trained")
    into_modelopt(m, tmp_path / "trained", VD)
    with torch.no_grad():
        ours = d(tokens, feats, pos, mask)
        layer = d.midlayer
        h = d.fc(feats)
        emb = d.embed_tokens(tokens)
        cos_sin = rope_cos_sin(d.inv_freq, pos, d.dtype)
        a = torch.cat((layer.input_layernorm(emb), layer.hidden_norm(layer.input_layernorm(h))), dim=-1)
        x = h + layer.self_attn(a, cos_sin, mask, None, 0)
        double = x + layer.mlp(layer.post_attention_layernorm(x))
    theirs = _modelopt_forward(m, d, feats, tokens)
    assert float((theirs - double).abs().max()) <= 1e-4 * scale
    assert float((theirs - ours).abs().max()) > 1e-2 * scale


@pytest.mark.parametrize("vd", [VD, V])
def test_modelopts_export_reads_back(target_dir, target, tmp_path, vd):
    from modelopt.torch.export import export_speculative_decoding

    m = converted(target_dir, draft_cfg(target), vd)
    g = torch.Generator().manual_seed(11)
    em = m.eagle_module
    with torch.no_grad():
        for n, p in em.named_parameters():
            p.copy_((1.0 if n.endswith("norm.weight") else 0.0) + 0.05 * torch.randn(p.shape, generator=g))
        if vd < V:
            used = torch.randperm(V, generator=g)[:vd].sort().values
            em.d2t.copy_(used - torch.arange(vd))  # as calibrate_frequent_vocab writes d2t
    export_speculative_decoding(m, export_dir=tmp_path / "yarn")  # modelopt's default: YaRN injected
    cfg = json.loads((tmp_path / "yarn" / "config.json").read_text())
    assert cfg["rope_scaling"]["rope_type"] == "yarn" and cfg["torch_dtype"] == "bfloat16"
    with pytest.raises(UserError, match="eagle_export_rope_scaling") as e:
        read_shape(tmp_path / "yarn")
    assert e.value.field == "rope_scaling.rope_type"
    m.eagle_export_rope_scaling = {}  # the training RoPE, as trained
    export_speculative_decoding(m, export_dir=tmp_path / "plain")
    stored = load_file(tmp_path / "plain" / "model.safetensors")
    assert stored["fc.weight"].dtype == torch.float32 and ("d2t" in stored) == (vd < V)
    d = load_eagle3(tmp_path / "plain", target.embed_tokens.weight, N)
    assert d.aux_layers == AUX
    mine = em.state_dict()
    for k, t in d.state_dict().items():
        if k == "embed_tokens.weight":
            assert torch.equal(t, target.embed_tokens.weight)
        elif k == "lm_head.weight" and vd == V:
            assert torch.equal(t, em.lm_head.weight)  # has_lm_head: its own
        elif k == "d2t":
            assert torch.equal(t, mine["d2t"] if vd < V else torch.zeros(V, dtype=torch.int64))
        else:
            assert torch.equal(t, mine[k.replace("midlayer.", "layers.0.")]), k
