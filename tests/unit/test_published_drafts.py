"""Published drafts in upstream's pickled layouts: they load only with the opt-in, and load the same tensors.

The pickles are written here the way upstream writes them, from modules built like upstream's (not from our
loaders' classes), filled with the tiny fixture's safetensors tensors:
- Medusa: `torch.save(medusa_head.state_dict())` to medusa_lm_head.pt (FasterDecoding/Medusa
  `medusa/train/train_legacy.py`@46f911eb), `medusa_head` an `nn.ModuleList` of
  `nn.Sequential(*([ResBlock(hidden)] * num_layers), nn.Linear(hidden, vocab, bias=False))`
  (`medusa/model/medusa_model.py`@e2a5d20c) — one ResBlock shared by a head's layers.
- EAGLE-1: pytorch_model.bin, the state dict of `cnets.Model` (`embed_tokens`, `layers` of
  `LlamaDecoderLayer(config, index)` without `input_layernorm` at index 0, `fc`), which SafeAILab/EAGLE
  `eagle/model/ea_model.py`@2320d52e loads with `load_state_dict(strict=True)`.
- target: transformers' pytorch_model.bin, and shards named by huggingface_hub's
  `PYTORCH_WEIGHTS_FILE_PATTERN` with a `pytorch_model.bin.index.json`.
Oracles: the fixture's safetensors files (bit-equal tensors), and the safetensors recipe's own greedy run
(token for token, step for step: the same draft accepts the same tokens).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from torch import nn

from builder.errors import UserError
from builder.model.loader import load_model
from builder.speculative.eagle.draft_model import load_eagle
from builder.speculative.medusa.heads import load_medusa
from tests.unit.recipe_helpers import run

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures" / "tiny-llama3"
RECIPES = REPO / "recipes"


# --- upstream's modules, as upstream builds them ----------------------------------------------------------


class ResBlock(nn.Module):  # medusa_model.py ResBlock: x + SiLU(linear(x))
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)
        self.act = nn.SiLU()


def upstream_medusa(num_heads: int, num_layers: int, hidden: int, vocab: int) -> nn.ModuleList:
    return nn.ModuleList(
        nn.Sequential(*([ResBlock(hidden)] * num_layers), nn.Linear(hidden, vocab, bias=False))
        for _ in range(num_heads)
    )


class _Attention(nn.Module):  # cnets.py LlamaAttention (no biases for Llama)
    def __init__(self, c: dict) -> None:
        super().__init__()
        C, H, KV = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
        D = C // H
        self.q_proj, self.k_proj = nn.Linear(C, H * D, bias=False), nn.Linear(C, KV * D, bias=False)
        self.v_proj, self.o_proj = nn.Linear(C, KV * D, bias=False), nn.Linear(H * D, C, bias=False)


class _MLP(nn.Module):
    def __init__(self, c: dict) -> None:
        super().__init__()
        C, I = c["hidden_size"], c["intermediate_size"]
        self.gate_proj, self.up_proj = nn.Linear(C, I, bias=False), nn.Linear(C, I, bias=False)
        self.down_proj = nn.Linear(I, C, bias=False)


class _RMSNorm(nn.Module):
    def __init__(self, C: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))


class _DecoderLayer(nn.Module):  # cnets.py LlamaDecoderLayer(config, index)
    def __init__(self, c: dict, index: int) -> None:
        super().__init__()
        self.self_attn, self.mlp = _Attention(c), _MLP(c)
        if index != 0:
            self.input_layernorm = _RMSNorm(c["hidden_size"])
        self.post_attention_layernorm = _RMSNorm(c["hidden_size"])


class UpstreamEagle(nn.Module):  # cnets.py Model: embed_tokens, layers, fc
    def __init__(self, c: dict) -> None:
        super().__init__()
        C = c["hidden_size"]
        self.embed_tokens = nn.Embedding(c["vocab_size"], C)
        self.layers = nn.ModuleList(_DecoderLayer(c, i) for i in range(c["num_hidden_layers"]))
        self.fc = nn.Linear(2 * C, C, bias=c.get("bias", True))


def _filled(module: nn.Module, tensors: dict[str, torch.Tensor]) -> nn.Module:
    """`module` in the tensors' dtype holding them; strict: upstream's key names are exactly the fixture's."""
    dtype = next(iter(tensors.values())).dtype
    module = module.to(dtype)
    module.load_state_dict(tensors, strict=True)
    return module


def _copy_configs(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.suffix == ".json" or f.name.startswith("tokenizer"):
            shutil.copy(f, dst / f.name)
    return dst


@pytest.fixture(scope="module")
def pickled(tmp_path_factory) -> dict[str, Path]:
    """The fixture's target and drafts in upstream's pickled layouts (and nothing else beside them)."""
    root = tmp_path_factory.mktemp("pickled")
    medusa_cfg = json.loads((FIX / "medusa" / "config.json").read_text())
    st = load_file(FIX / "medusa" / "medusa_lm_head.safetensors")
    heads = _filled(
        upstream_medusa(
            medusa_cfg["medusa_num_heads"],
            medusa_cfg["medusa_num_layers"],
            medusa_cfg["hidden_size"],
            medusa_cfg["vocab_size"],
        ),
        st,
    )
    medusa = _copy_configs(FIX / "medusa", root / "medusa")
    torch.save(heads.state_dict(), medusa / "medusa_lm_head.pt")

    eagle_cfg = json.loads((FIX / "eagle" / "config.json").read_text())
    draft = _filled(UpstreamEagle(eagle_cfg), load_file(FIX / "eagle" / "model.safetensors"))
    eagle = _copy_configs(FIX / "eagle", root / "eagle")
    torch.save(draft.state_dict(), eagle / "pytorch_model.bin")

    from transformers import LlamaForCausalLM

    hf = LlamaForCausalLM.from_pretrained(FIX / "base", dtype=torch.float32)
    state = {k: v.contiguous() for k, v in hf.state_dict().items()}
    base = _copy_configs(FIX / "base", root / "base")
    torch.save(state, base / "pytorch_model.bin")

    from huggingface_hub import constants, split_torch_state_dict_into_shards

    split = split_torch_state_dict_into_shards(
        state, filename_pattern=constants.PYTORCH_WEIGHTS_FILE_PATTERN, max_shard_size="8MB"
    )
    sharded = _copy_configs(FIX / "base", root / "sharded")
    for name, keys in split.filename_to_tensors.items():
        torch.save({k: state[k] for k in keys}, sharded / name)
    (sharded / "pytorch_model.bin.index.json").write_text(
        json.dumps({"metadata": split.metadata, "weight_map": split.tensor_to_filename})
    )
    assert split.is_sharded and len(split.filename_to_tensors) > 1
    return {"medusa": medusa, "eagle": eagle, "base": base, "sharded": sharded}


@pytest.fixture(scope="module")
def target():
    return load_model(FIX / "base")


def _assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key


# --- the loaders ------------------------------------------------------------------------------------------


def test_upstream_key_names_are_the_fixtures(pickled):
    """The pickles hold upstream's names (their modules loaded the fixture strictly), in the published dtype."""
    for pt, st in (
        ("medusa/medusa_lm_head.pt", "medusa/medusa_lm_head.safetensors"),
        ("eagle/pytorch_model.bin", "eagle/model.safetensors"),
    ):
        role, name = pt.split("/")
        _assert_same(torch.load(pickled[role] / name, weights_only=True), load_file(FIX / st))
    eagle = torch.load(pickled["eagle"] / "pytorch_model.bin", weights_only=True)
    assert "layers.0.input_layernorm.weight" not in eagle and eagle["fc.weight"].dtype == torch.float16


def test_pickled_drafts_load_only_with_the_opt_in(pickled, target):
    embed, head = target.embed_tokens.weight, target.lm_head.weight
    with pytest.raises(UserError, match="medusa_lm_head.pt is a pickle") as info:
        load_medusa(pickled["medusa"], opt_in="speculative.allow_pickle")
    assert (info.value.field, info.value.allowed) == ("speculative.allow_pickle", "true")
    assert info.value.location == str(pickled["medusa"] / "medusa_lm_head.pt")
    with pytest.raises(UserError, match="pytorch_model.bin is a pickle") as info:
        load_eagle(pickled["eagle"], embed, head, opt_in="speculative.allow_pickle")
    assert info.value.field == "speculative.allow_pickle"

    _assert_same(
        load_medusa(pickled["medusa"], allow_pickle=True).state_dict(), load_medusa(FIX / "medusa").state_dict()
    )
    _assert_same(
        load_eagle(pickled["eagle"], embed, head, allow_pickle=True).state_dict(),
        load_eagle(FIX / "eagle", embed, head).state_dict(),
    )


@pytest.mark.parametrize("layout", ["base", "sharded"])
def test_pickled_target_loads_only_with_the_opt_in(pickled, target, layout):
    with pytest.raises(UserError, match="is a pickle") as info:
        load_model(pickled[layout], opt_in="model.allow_pickle")
    assert (info.value.field, info.value.allowed) == ("model.allow_pickle", "true")
    _assert_same(load_model(pickled[layout], allow_pickle=True).state_dict(), target.state_dict())


class Marker:
    """Unpickling this would create a directory: the proof that weights_only refused before running it."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return os.mkdir, (self.path,)


class Plain:
    pass


def test_weights_only_refuses_objects_even_with_the_opt_in(pickled, tmp_path):
    folder = _copy_configs(FIX / "medusa", tmp_path / "evil")
    good = torch.load(pickled["medusa"] / "medusa_lm_head.pt", weights_only=True)
    marker = tmp_path / "ran"
    torch.save({**good, "0.0.linear.bias": Marker(str(marker))}, folder / "medusa_lm_head.pt")
    with pytest.raises(UserError, match=r"weights_only=True\): it refers to posix.mkdir") as info:
        load_medusa(folder, allow_pickle=True)
    assert info.value.location == str(folder / "medusa_lm_head.pt")
    assert not marker.exists()  # refused unexecuted
    torch.save({**good, "extra": Plain()}, folder / "medusa_lm_head.pt")
    with pytest.raises(UserError, match="refers to .*Plain, which is not a tensor"):
        load_medusa(folder, allow_pickle=True)
    torch.save({**good, "0.0.linear.bias": [1.0, 2.0]}, folder / "medusa_lm_head.pt")  # allowed type, not a tensor
    with pytest.raises(UserError, match="not a flat dict of name -> tensor"):
        load_medusa(folder, allow_pickle=True)


def test_other_pickle_names_are_never_read(pickled, target, tmp_path):
    folder = _copy_configs(FIX / "eagle", tmp_path / "renamed")
    shutil.copy(pickled["eagle"] / "pytorch_model.bin", folder / "model.pt")
    with pytest.raises(UserError, match=r"no EAGLE weights found.*not read: model.pt"):
        load_eagle(folder, target.embed_tokens.weight, allow_pickle=True)
    medusa = _copy_configs(FIX / "medusa", tmp_path / "medusa-bin")
    shutil.copy(pickled["medusa"] / "medusa_lm_head.pt", medusa / "pytorch_model.bin")  # not Medusa's name
    with pytest.raises(UserError, match="not read: pytorch_model.bin"):
        load_medusa(medusa, allow_pickle=True)
    sharded = shutil.copytree(pickled["sharded"], tmp_path / "sharded")
    index = json.loads((sharded / "pytorch_model.bin.index.json").read_text())
    first = sorted(set(index["weight_map"].values()))[0]
    (sharded / first).rename(sharded / "evil.pkl")
    index["weight_map"] = {k: "evil.pkl" if v == first else v for k, v in index["weight_map"].items()}
    (sharded / "pytorch_model.bin.index.json").write_text(json.dumps(index))
    with pytest.raises(UserError, match="'evil.pkl' is not a pytorch_model-NNNNN-of-NNNNN.bin"):
        load_model(sharded, allow_pickle=True)


def test_safetensors_beside_a_pickle_win(pickled, tmp_path):
    """With both files present the safetensors one is read: no opt-in needed, the pickle is never opened."""
    folder = shutil.copytree(pickled["medusa"], tmp_path / "both")
    shutil.copy(FIX / "medusa" / "medusa_lm_head.safetensors", folder)
    (folder / "medusa_lm_head.pt").write_bytes(b"not a pickle at all")
    assert load_medusa(folder).num_heads == 5


# --- the recipe: validate / plan / build / generate -------------------------------------------------------


def test_validate_names_the_field_and_the_file(pickled):
    cases = [
        (
            "tiny-llama3-medusa.yaml",
            f"speculative.checkpoint={pickled['medusa']}",
            "speculative.allow_pickle",
            pickled["medusa"] / "medusa_lm_head.pt",
        ),
        (
            "tiny-llama3-eagle1.yaml",
            f"speculative.checkpoint={pickled['eagle']}",
            "speculative.allow_pickle",
            pickled["eagle"] / "pytorch_model.bin",
        ),
        (
            "tiny-llama3.yaml",
            f"model.checkpoint={pickled['sharded']}",
            "model.allow_pickle",
            pickled["sharded"] / "pytorch_model.bin.index.json",
        ),
    ]
    for name, override, field, file in cases:
        for command in ("validate", "plan"):
            result = run(command, str(RECIPES / name), "--set", override)
            assert result.exit_code == 2, result.output
            assert f"{field}: {file} is a pickle" in result.stderr and "(allowed: true)" in result.stderr
            assert "Traceback" not in result.stderr
        ok = run("validate", str(RECIPES / name), "--set", override, "--set", f"{field}=true")
        assert ok.exit_code == 0, ok.output


def test_opt_in_only_where_a_draft_checkpoint_is():
    from builder.recipe.schema import ModelSection
    from builder.speculative.eagle.config import EagleConfig
    from builder.speculative.lookahead.config import LookaheadConfig
    from builder.speculative.medusa.config import MedusaConfig
    from builder.speculative.ngram.config import NgramConfig

    for section in (ModelSection, MedusaConfig, EagleConfig):
        f = section.model_fields["allow_pickle"]
        assert f.default is False and "weights_only=True" in f.description
    for section in (LookaheadConfig, NgramConfig):
        assert "allow_pickle" not in section.model_fields
    result = run("validate", str(RECIPES / "tiny-llama3-lookahead.yaml"), "--set", "speculative.allow_pickle=true")
    assert result.exit_code == 2 and "allow_pickle" in result.stderr


def test_load_key_follows_the_opt_in():
    from builder.recipe.loader import load_recipe
    from builder.stages.keys import plan_stages

    keys = {}
    for overrides in ((), ("speculative.allow_pickle=true",), ("model.allow_pickle=true",)):
        loaded = load_recipe(str(RECIPES / "tiny-llama3-eagle1.yaml"), overrides)
        keys[overrides] = plan_stages(loaded)[0]
    assert {s.name for s in keys.values()} == {"load"} and len({s.key for s in keys.values()}) == 3
    assert keys[("speculative.allow_pickle=true",)].inputs["speculative.allow_pickle"] is True


def _hub(root: Path, repo: str, src: Path) -> None:
    """A local hub cache holding `src` as repo@main (the layout huggingface_hub's snapshot_download reads)."""
    commit = "0" * 40
    folder = root / f"models--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(commit)
    shutil.copytree(src, folder / "snapshots" / commit)


def test_hub_draft_is_refused_at_the_load_stage(pickled, tmp_path, monkeypatch):
    """validate cannot see a hub checkpoint; the load stage refuses it, naming the field and the file."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    _hub(tmp_path / "hub", "org/eagle-bin", pickled["eagle"])
    args = [
        "build",
        str(RECIPES / "tiny-llama3-eagle1.yaml"),
        "--until",
        "load",
        "--cache-dir",
        str(tmp_path / "c"),
        "--set",
        "speculative.checkpoint=hf://org/eagle-bin",
    ]
    assert run("validate", *args[1:2], *args[-2:]).exit_code == 0  # nothing local to look at
    refused = run(*args)
    assert refused.exit_code == 2, refused.output
    assert "speculative.allow_pickle: pytorch_model.bin is a pickle" in refused.stderr
    assert "snapshots" in refused.stderr and "(allowed: true)" in refused.stderr
    assert run(*args, "--set", "speculative.allow_pickle=true").exit_code == 0


def _generate(recipe: str, *overrides: str) -> dict:
    sets = [a for o in overrides for a in ("--set", o)]
    result = run(
        "generate",
        str(RECIPES / recipe),
        "--engine",
        "torch",
        "--prompt",
        "def fib(n):",
        "--max-new-tokens",
        "24",
        "--json",
        *sets,
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize(
    "recipe,overrides",
    [
        ("tiny-llama3-medusa.yaml", ("speculative.checkpoint={medusa}", "speculative.allow_pickle=true")),
        (
            "tiny-llama3-eagle1.yaml",
            (
                "speculative.checkpoint={eagle}",
                "speculative.allow_pickle=true",
                "model.checkpoint={sharded}",
                "model.allow_pickle=true",
            ),
        ),
    ],
)
def test_generate_from_pickles_equals_the_safetensors_run(pickled, recipe, overrides):
    """Same tensors ⇒ the same greedy tokens and the same acceptance at every step (the torch reference)."""
    full_vocab = ("speculative.draft_vocab=null",) if "eagle" in recipe else ()  # (skips counting the vocabulary)
    ours = _generate(recipe, *full_vocab, *(o.format(**pickled) for o in overrides))
    assert ours == _generate(recipe, *full_vocab) and ours["tau"] > 1


def test_trtllm_checkpoint_from_a_pickled_draft_is_the_same(pickled, tmp_path):
    """The trtllm converter reads safetensors only: the load stage's copy of the pickle feeds it the same bytes."""
    from safetensors import safe_open

    recipe = str(RECIPES / "tiny-llama3-trtllm-eagle1.yaml")
    common = ["--until", "checkpoint", "--json", "--quiet"]
    outs = {}
    for name, extra in (
        ("st", []),
        ("bin", ["--set", f"speculative.checkpoint={pickled['eagle']}", "--set", "speculative.allow_pickle=true"]),
    ):
        result = run("build", recipe, "--cache-dir", str(tmp_path / name), *common, *extra)
        assert result.exit_code == 0, result.output
        outs[name] = {r["stage"]: Path(r["output"]) for r in json.loads(result.stdout)["stages"]}
    source = json.loads((outs["bin"]["load"] / "source.json").read_text())
    assert source["draft"]["safetensors"] == "safetensors/draft" and "safetensors" not in source["model"]
    for rank in sorted(p.name for p in outs["st"]["checkpoint"].glob("rank*.safetensors")):
        with (
            safe_open(str(outs["st"]["checkpoint"] / rank), "pt") as a,
            safe_open(str(outs["bin"]["checkpoint"] / rank), "pt") as b,
        ):
            assert set(a.keys()) == set(b.keys()) and any(k.startswith("eagle_nets") for k in a.keys())
            for key in a.keys():
                assert torch.equal(a.get_tensor(key), b.get_tensor(key)), key


# --- trtspec convert-draft --------------------------------------------------------------------------------


def test_convert_draft_writes_what_loads_without_the_opt_in(pickled, target, tmp_path):
    embed, head = target.embed_tokens.weight, target.lm_head.weight
    refused = run("convert-draft", str(pickled["eagle"]), "--out", str(tmp_path / "e"))
    assert refused.exit_code == 2 and "--allow-pickle: pytorch_model.bin is a pickle" in refused.stderr
    assert not (tmp_path / "e").exists()
    for role, out in (("eagle", "e"), ("medusa", "m"), ("sharded", "t")):
        result = run("convert-draft", str(pickled[role]), "--out", str(tmp_path / out), "--allow-pickle")
        assert result.exit_code == 0, result.output
        assert not list((tmp_path / out).glob("*.pt")) and not list((tmp_path / out).glob("*.bin"))
        assert (tmp_path / out / "config.json").read_bytes() == (pickled[role] / "config.json").read_bytes()
    _assert_same(
        load_eagle(tmp_path / "e", embed, head).state_dict(), load_eagle(FIX / "eagle", embed, head).state_dict()
    )
    _assert_same(load_file(tmp_path / "e" / "model.safetensors"), load_file(FIX / "eagle" / "model.safetensors"))
    _assert_same(
        load_file(tmp_path / "m" / "medusa_lm_head.safetensors"),
        load_file(FIX / "medusa" / "medusa_lm_head.safetensors"),
    )
    shards = set(json.loads((tmp_path / "t" / "model.safetensors.index.json").read_text())["weight_map"].values())
    n = len(set(json.loads((pickled["sharded"] / "pytorch_model.bin.index.json").read_text())["weight_map"].values()))
    assert sorted(shards) == [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)] and n > 1
    _assert_same(load_model(tmp_path / "t").state_dict(), target.state_dict())
    again = run("convert-draft", str(pickled["medusa"]), "--out", str(tmp_path / "m"), "--allow-pickle")
    assert again.exit_code == 2 and "exists already" in again.stderr


def test_convert_draft_from_a_recipe_uses_its_opt_in(pickled, tmp_path):
    recipe = str(RECIPES / "tiny-llama3-medusa.yaml")
    where = f"speculative.checkpoint={pickled['medusa']}"
    refused = run("convert-draft", recipe, "--set", where, "--out", str(tmp_path / "a"))
    assert refused.exit_code == 2 and "speculative.allow_pickle: medusa_lm_head.pt is a pickle" in refused.stderr
    result = run(
        "convert-draft",
        recipe,
        "--set",
        where,
        "--set",
        "speculative.allow_pickle=true",
        "--out",
        str(tmp_path / "a"),
        "--json",
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["written"] == ["medusa_lm_head.safetensors"]
    ok = run("validate", recipe, "--set", f"speculative.checkpoint={tmp_path / 'a'}")
    assert ok.exit_code == 0, ok.output
    none = run("convert-draft", str(RECIPES / "tiny-llama3-lookahead.yaml"), "--allow-pickle")
    assert none.exit_code == 2 and "has no draft checkpoint" in none.stderr


def test_convert_draft_shared_resblocks_and_atomicity(tmp_path):
    """Upstream's shared ResBlock (num_layers 2) shares storage, which safetensors refuses: converted as copies.
    A pickle that does not fit its config.json fails the strict check and leaves nothing behind."""
    torch.manual_seed(0)
    heads = upstream_medusa(2, 2, 8, 11)
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.json").write_text(
        json.dumps({"medusa_num_heads": 2, "medusa_num_layers": 2, "base_model_name_or_path": "x"})
    )
    torch.save(heads.state_dict(), src / "medusa_lm_head.pt")
    assert run("convert-draft", str(src), "--allow-pickle").exit_code == 0  # default: <dir>-safetensors beside it
    out = tmp_path / "src-safetensors"
    _assert_same(load_file(out / "medusa_lm_head.safetensors"), {k: v for k, v in heads.state_dict().items()})
    assert load_medusa(out).num_layers == 2
    (src / "config.json").write_text(json.dumps({"medusa_num_heads": 3, "medusa_num_layers": 2}))
    bad = run("convert-draft", str(src), "--allow-pickle", "--out", str(tmp_path / "bad"))
    assert bad.exit_code == 2 and "missing key" in bad.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src", "src-safetensors"]  # no temp folder left


def test_shipped_recipes_opt_in_for_published_bins():
    """Every shipped recipe naming a published EAGLE-1 draft (pytorch_model.bin only) carries the opt-in."""
    from builder.recipe.loader import load_recipe

    named = 0
    for path in sorted(RECIPES.glob("*.yaml")):
        spec = load_recipe(str(path), ()).recipe.speculative
        if str(getattr(spec, "checkpoint", "")).startswith("hf://yuhuili/EAGLE-LLaMA3-"):
            named += 1
            assert spec.allow_pickle is True, path.name
            assert "pytorch_model.bin" in path.read_text(), path.name  # the comment saying why
    assert named == 5
    assert yaml.safe_load((RECIPES / "methods" / "eagle.yaml").read_text())["speculative"].get("allow_pickle") is None
