"""`trtspec build` + `trtspec generate` of an EAGLE-3 recipe on the tiny fixture, against HF transformers greedy.

The recipe extends recipes/bases/tiny-llama3.yaml; its draft is a random EAGLE-3 draft over the fixture (aux layers
0, 1, 2; a draft vocabulary of 1024 tokens; as wide as the target, or 32 wide with its own embedding) written in
SafeAILab's layout with `Eagle3Draft.save` into the test's folder. The build runs load, export (target graphs with the draft's fc folded in, the EAGLE-3 draft graph) and the
ONNX Runtime engine stage (sessions, step curve, draft budget table); `generate` decodes through that engine folder
and through the torch reference, and both must give HF's greedy tokens.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import yaml

from builder.model.loader import load_model
from builder.speculative.eagle3.draft_model import random_draft
from tests.unit.recipe_helpers import run
from tests.unit.test_eagle3_export import narrow_draft

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "tests" / "fixtures" / "tiny-llama3" / "base"
AUX = [0, 1, 2]
PROMPT = [5, 17, 33, 101, 7, 250, 9]
NEW = 24


@pytest.fixture(scope="module", params=["same", "narrow"])
def recipe(request, tmp_path_factory) -> Path:
    """`narrow`: a draft 32 wide (own embedding) over the 256-wide fixture: the target graphs' `hidden` is 32 wide,
    which engine.json says through eagle.aux_layers / eagle.hidden (`builder.engines.opened.target_hidden`)."""
    root = tmp_path_factory.mktemp("e3-recipe")
    model = load_model(BASE)
    if request.param == "narrow":
        draft = narrow_draft(model, model.cfg, 1, 1024, tuple(AUX))
    else:
        draft = random_draft(model.cfg, AUX, draft_vocab=1024, seed=1, base_embed=model.embed_tokens.weight)
    draft.save(root / "draft")
    data = {
        "extends": [os.path.relpath(REPO / "recipes" / "bases" / "tiny-llama3.yaml", root)],
        "speculative": {
            "method": "eagle3",
            "checkpoint": "draft",
            "aux_layers": AUX,
            "tree": {"type": "dynamic", "depth": 3, "top_k": 3, "total_nodes": 8},
            "verification": "greedy",
        },
        "build": {"max_batch_size": 2, "max_seq_len": 256, "max_input_len": 128},
    }
    path = root / "eagle3.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def hf_greedy(ids: list[int], n: int) -> list[int]:
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(BASE, torch_dtype=torch.float32)
    x = torch.tensor([ids])
    out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False)
    gen = out[0, len(ids) :].tolist()
    eos = model.generation_config.eos_token_id
    stops = set(eos if isinstance(eos, list) else [eos])
    return next((gen[: i + 1] for i, t in enumerate(gen) if t in stops), gen)


def test_build_and_generate_equal_hf_greedy(recipe: Path, tmp_path: Path, monkeypatch) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("TRTSPEC_CACHE_DIR", str(cache))  # where `generate` finds the build
    built = run("build", str(recipe), "--cache-dir", str(cache), "--until", "engine", "--json")
    assert built.exit_code == 0, built.stderr
    stages = {s["stage"]: s for s in json.loads(built.stdout)["stages"]}
    assert list(stages) == ["load", "export", "engine"]
    export = json.loads((Path(stages["export"]["output"]) / "export.json").read_text())
    assert export["eagle"]["aux_layers"] == AUX and export["eagle"]["layers"] == 1
    assert export["eagle"]["draft_vocab"] == 1024
    target = json.loads((Path(stages["export"]["output"]) / "target-greedy" / "export.json").read_text())
    assert target["features"] == {"layers": AUX, "width": export["eagle"]["hidden"]}
    engine = json.loads((Path(stages["engine"]["output"]) / "engine.json").read_text())
    assert engine["eagle"]["aux_layers"] == AUX
    table = engine["draft_budget"]  # the engine stage's draft budget table: EagleDrafter takes budgets
    assert table is not None and set(table["tau"]) >= {"1", "8"}, table
    want = hf_greedy(PROMPT, NEW)
    ids = ",".join(map(str, PROMPT))
    for eng in ("onnxruntime", "torch"):
        out = run("generate", str(recipe), "--prompt-ids", ids, "--max-new-tokens", str(NEW), "--json", "--engine", eng)
        assert out.exit_code == 0, out.stderr
        got = json.loads(out.stdout)
        assert got["engine"] == eng and got["token_ids"] == want, (eng, got["token_ids"], want)
