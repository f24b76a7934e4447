"""Every checkpoint we write loads in TensorRT-LLM, vLLM, SGLang and modelopt with the same tensors and the same
target layers — as their loaders are written (`builder.speculative.eagle3.upstream`, file@commit there and in
docs/eagle3-checkpoints.md) — and planted mistakes are caught by the reader of the runtime they would break.

Oracles: the draft we wrote (each runtime parameter, concatenated from the stored keys its loader routes to it, must
equal the concatenation of our modules it stands for in that runtime's forward, bit for bit); the aux layer ids the
draft was built with (every runtime's capture, converted from its own convention, must name the same layers).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from builder.speculative.eagle3 import upstream
from builder.speculative.eagle3.checkpoint import default_aux_layers, header_entries, safetensors_header
from builder.speculative.eagle3.draft_model import Eagle3Draft, random_draft
from tests.unit.test_eagle3_checkpoint import PUBLISHED, edit_config, rewrite, small_cfg, write_published

REPO = Path(__file__).resolve().parents[2]

# (target layers, vocabulary, width, heads, kv heads, aux ids): the tiny fixture's shape (4 layers: upstream's
# defaults break, ids named) and Llama 3 8B / 70B depths with their default ids, widths scaled down
SHAPES = {
    "fixture": (4, 4096, 256, 8, 2, (0, 1, 2)),
    "8b-like": (32, 512, 64, 8, 2, default_aux_layers(32)),
    "70b-like": (80, 512, 64, 8, 1, default_aux_layers(80)),
}


def write(tmp: Path, shape: str, layout: str, vd: int | None) -> Eagle3Draft:
    n, v, h, heads, kv, aux = SHAPES[shape]
    cfg = small_cfg(hidden=h, vocab=v, num_attention_heads=heads, num_key_value_heads=kv, head_dim=h // heads)
    d = random_draft(cfg, aux, draft_vocab=vd, seed=2)
    d.save(tmp, layout=layout)
    return d


def read(folder: Path) -> tuple[dict, dict]:
    cfg = json.loads((folder / "config.json").read_text())
    return cfg, header_entries(safetensors_header(folder / "model.safetensors"))


def run(name: str, folder: Path, target: upstream.Target, **kw) -> upstream.Loaded:
    cfg, entries = read(folder)
    return upstream.READERS[name](cfg, entries, target, **kw)


def assert_same_tensors(loaded: upstream.Loaded, folder: Path, d: Eagle3Draft) -> None:
    stored = load_file(folder / "model.safetensors")
    ours = d.state_dict()
    for name, p in loaded.params.items():
        theirs = torch.cat([stored[k] for k in p.sources])
        mine = torch.cat([ours[m] for m in p.meaning]).to(theirs.dtype)
        assert theirs.shape == p.shape and torch.equal(theirs, mine), (loaded.runtime, name)
    for module, meaning in loaded.shared.items():  # from the target: our draft embeds with the target's too
        assert meaning == "embed_tokens.weight" and not d.target_hidden != d.cfg.hidden_size, module
    if d.draft_vocab_size is not None:
        assert loaded.vocab_map == "d2t" and loaded.draft_vocab == d.draft_vocab_size
    else:
        assert loaded.draft_vocab == d.cfg.vocab_size


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("layout", ["safeailab", "modelopt"])
@pytest.mark.parametrize("reduced", [True, False])
def test_every_reader_loads_what_we_write(tmp_path, shape, layout, reduced):
    n, v, h, *_ = SHAPES[shape]
    d = write(tmp_path, shape, layout, v // 4 if reduced else None)
    target = upstream.Target(n, h, v)
    kw = {"tensorrt_llm": {"layers_to_capture": d.aux_layers}, "modelopt": {"has_lm_head": not reduced}}
    for name in upstream.READERS:
        if name == "sglang" and layout == "modelopt":
            with pytest.raises(upstream.Refusal, match=r"modelopt's layout: .* skipped without a word") as e:
                run(name, tmp_path, target)  # SGLang skips layers.0.* without a word (upstream_sglang docstring)
            assert e.value.key == "layers.0.*"
            continue
        loaded = run(name, tmp_path, target, **kw.get(name, {}))
        assert loaded.aux_layers == d.aux_layers, name
        assert_same_tensors(loaded, tmp_path, d)
        assert set(loaded.ignored) <= {"t2d", "d2t", "lm_head.weight"}, (name, loaded.ignored)
    if default_aux_layers(n) is not None:  # TensorRT-LLM without the option: its default is upstream's, ours
        assert run("tensorrt_llm", tmp_path, target).aux_layers == d.aux_layers


@pytest.mark.parametrize("name", ["8b-eagle3-arch", "70b-specforge"])
def test_published_layouts_pass_every_serving_reader(tmp_path, name):
    cfg, layers, width, _ = PUBLISHED[name]
    write_published(tmp_path, name, pickle=False)
    target = upstream.Target(layers, width, cfg["vocab_size"])
    for reader in ("tensorrt_llm", "vllm", "sglang"):
        assert run(reader, tmp_path, target).aux_layers == default_aux_layers(layers), reader


def test_the_yuhuili_70b_form_brings_its_own_embedding(tmp_path):
    cfg, layers, width, _ = PUBLISHED["70b-yuhuili"]
    write_published(tmp_path, "70b-yuhuili", pickle=False)
    target = upstream.Target(layers, width, cfg["vocab_size"])
    for reader in ("tensorrt_llm", "vllm"):
        loaded = run(reader, tmp_path, target)
        assert "model.embed_tokens.weight" in loaded.params and "model.embed_tokens" not in loaded.shared, reader
    with pytest.raises(upstream.Refusal, match="EntryClass"):  # the 8B template's architectures
        run("sglang", tmp_path, target)
    with pytest.raises(upstream.Refusal, match="target_hidden_size"):
        run("modelopt", tmp_path, target)


# --- planted mistakes -----------------------------------------------------------------------------------------------


def test_layer_ids_in_the_wrong_convention(tmp_path):
    """Ids written input-of-layer where output-of-layer belongs (or the reverse) load everywhere — on the wrong
    layers: the readers say which layers each runtime would capture."""
    d = write(tmp_path, "8b-like", "safeailab", 128)
    target = upstream.Target(32, 64, 512)
    edit_config(tmp_path, eagle_config={"eagle_aux_hidden_state_layer_ids": [2, 16, 29], "use_aux_hidden_state": True})
    assert run("sglang", tmp_path, target).aux_layers == (2, 16, 29) != d.aux_layers
    assert run("modelopt", tmp_path, target).aux_layers == (2, 16, 29)
    edit_config(tmp_path, eagle_aux_hidden_state_layer_ids=[1, 15, 28])  # vLLM's key, output-of-layer by mistake
    assert run("vllm", tmp_path, target).aux_layers == (0, 14, 27) != d.aux_layers
    assert run("vllm", tmp_path, target, semantics="sglang").aux_layers == d.aux_layers


def test_draft_vocab_size_is_what_the_runtimes_size_the_head_by(tmp_path):
    write(tmp_path, "8b-like", "safeailab", 128)
    target = upstream.Target(32, 64, 512)
    edit_config(tmp_path, draft_vocab_size=None)
    opt = {"layers_to_capture": (1, 15, 28)}
    with pytest.raises(upstream.Refusal, match="draft_vocab_size: absent"):  # two-model: detection
        run("tensorrt_llm", tmp_path, target, one_model=False, **opt)
    for name, kw in (("tensorrt_llm", opt), ("vllm", {})):  # the head sized by vocab_size: (512, 64) vs (128, 64)
        with pytest.raises(upstream.Refusal, match=r"\(128, 64\)"):
            run(name, tmp_path, target, **kw)
    with pytest.raises(upstream.Refusal, match=r"\(512, 64\) head \(draft_vocab_size absent\)"):
        run("sglang", tmp_path, target)


def test_a_wrong_fc_width_fails_everywhere(tmp_path):
    write(tmp_path, "8b-like", "safeailab", 128)
    rewrite(tmp_path, **{"fc.weight": torch.zeros(64, 128)})  # two features (modelopt's collapsed default)
    target = upstream.Target(32, 64, 512)
    for name in upstream.READERS:
        with pytest.raises(upstream.Refusal, match="fc.weight"):
            run(name, tmp_path, target)


def test_d2t_missing_or_t2d_wrong(tmp_path):
    d = write(tmp_path, "8b-like", "safeailab", 128)
    target = upstream.Target(32, 64, 512)
    t2d = load_file(tmp_path / "model.safetensors")["t2d"]
    rewrite(tmp_path, t2d=~t2d)  # no runtime reads t2d: it is ours (and SafeAILab's training) to check
    for name in ("tensorrt_llm", "vllm", "sglang"):
        assert "t2d" in run(name, tmp_path, target).ignored
    rewrite(tmp_path, d2t=None, t2d=None)
    for name in ("tensorrt_llm", "vllm", "sglang", "modelopt"):
        with pytest.raises(upstream.Refusal, match="d2t"):
            run(name, tmp_path, target)
    assert d.draft_vocab_size == 128


def test_where_the_default_ids_break_and_the_last_layer(tmp_path):
    write(tmp_path, "fixture", "safeailab", 1024)
    target = upstream.Target(4, 256, 4096)
    with pytest.raises(upstream.Refusal, match="Not enough hidden layers"):
        run("tensorrt_llm", tmp_path, target)
    for name in ("vllm", "sglang"):  # the ids are named: fine; unnamed, 4 layers' defaults collapse
        run(name, tmp_path, target)
    edit_config(tmp_path, eagle_config={"use_aux_hidden_state": True}, eagle_aux_hidden_state_layer_ids=None)
    for name in ("vllm", "sglang"):
        with pytest.raises(upstream.Refusal, match="fc takes 3"):
            run(name, tmp_path, target)
    # the last layer's output: TensorRT-LLM captures after layers, vLLM and SGLang before them — never the last
    edit_config(
        tmp_path,
        eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 1, 3]},
        eagle_aux_hidden_state_layer_ids=[1, 2, 4],
    )
    assert run("tensorrt_llm", tmp_path, target, layers_to_capture=(0, 1, 3)).aux_layers == (0, 1, 3)
    for name in ("vllm", "sglang"):
        with pytest.raises(upstream.Refusal, match="fc takes 3"):
            run(name, tmp_path, target)


@pytest.mark.parametrize(
    ("reader", "key"),
    [
        ("vllm", "norm_before_residual"),
        ("tensorrt_llm", "norm_output"),
        ("tensorrt_llm", "fc_norm"),
        ("sglang", "bias"),
    ],
)
def test_variant_flags_are_other_math(tmp_path, reader, key):
    write(tmp_path, "8b-like", "safeailab", 128)
    edit_config(tmp_path, **{key: True})
    with pytest.raises(upstream.Refusal, match=key):
        run(reader, tmp_path, upstream.Target(32, 64, 512))


def test_an_unknown_key_is_a_keyerror_in_vllm_only(tmp_path):
    write(tmp_path, "8b-like", "safeailab", 128)
    rewrite(tmp_path, **{"midlayer.self_attn.rotary_emb.inv_freq": torch.zeros(4)})
    target = upstream.Target(32, 64, 512)
    with pytest.raises(upstream.Refusal, match="KeyError"):
        run("vllm", tmp_path, target)
    for name in ("tensorrt_llm", "sglang"):  # their loaders look keys up by parameter: the stray one is skipped
        assert "midlayer.self_attn.rotary_emb.inv_freq" in run(name, tmp_path, target).ignored


def test_the_doc_table_cites_what_the_readers_read():
    """Every file@commit upstream.py cites is in docs/eagle3-checkpoints.md, and the reverse."""
    doc = (REPO / "docs" / "eagle3-checkpoints.md").read_text()
    code = upstream.__doc__ or ""
    commits = set(re.findall(r"@([0-9a-f]{40})", code))
    assert len(commits) >= 7 and commits <= set(re.findall(r"[0-9a-f]{40}", doc))


def test_a_published_draft_renamed_to_modelopts_layout_is_flagged_for_sglang_only(tmp_path):
    """Plant: the official 8B layout with `midlayer.` renamed `layers.0.` (modelopt's export names, same tensors).
    SGLang's loader (llama_eagle3.py@03d5a777) renames nothing and skips unknown keys: its midlayer would keep its
    initial weights (all 10 layer tensors). TensorRT-LLM and vLLM rename and load the same tensors as from the SafeAILab names."""
    cfg, layers, width, _ = PUBLISHED["8b-eagle3-arch"]
    state = write_published(tmp_path, "8b-eagle3-arch", pickle=False)
    target = upstream.Target(layers, width, cfg["vocab_size"])
    before = {r: run(r, tmp_path, target).params for r in ("tensorrt_llm", "vllm")}
    rewrite(tmp_path, **{k: None for k in state if k.startswith("midlayer.")})
    rewrite(tmp_path, **{"layers.0." + k.removeprefix("midlayer."): v for k, v in state.items() if "midlayer." in k})
    with pytest.raises(upstream.Refusal, match=r"these 10 key\(s\) .* skipped without a word") as e:
        run("sglang", tmp_path, target)
    assert e.value.key == "layers.0.*" and "midlayer." in str(e.value)
    for r, params in before.items():
        after = run(r, tmp_path, target).params
        assert after.keys() == params.keys(), r
        for name, p in after.items():
            assert p.meaning == params[name].meaning and p.shape == params[name].shape, (r, name)
            assert [s.replace("layers.0.", "midlayer.") for s in p.sources] == list(params[name].sources), (r, name)
