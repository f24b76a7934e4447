"""Bad EAGLE-3 drafts and recipes → `trtspec validate` exits 2 naming the field (before torch, from config.json and
the safetensors header), and `trtspec convert-draft` turns a published pytorch_model.bin into a folder that loads
without the pickle opt-in.

Oracles: the field each mistake lives in (the recipe's `speculative.aux_layers`, or the checkpoint's own key under
`speculative.checkpoint`), and the tensors of the pickle (bit-equal after conversion).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from builder.model.config import LlamaConfig
from builder.speculative.eagle3.draft_model import load_eagle3, random_draft
from tests.unit.recipe_helpers import run
from tests.unit.test_eagle3_checkpoint import edit_config, embedding, rewrite, write_published

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "tests" / "fixtures" / "tiny-llama3" / "base"


def recipe(tmp: Path, draft: Path, **speculative) -> str:
    spec = {
        "method": "eagle3",
        "checkpoint": str(draft),
        "aux_layers": [0, 1, 2],
        "tree": {"type": "dynamic", "depth": 3, "top_k": 2, "total_nodes": 6},
        **speculative,
    }
    path = tmp / "r.yaml"
    path.write_text(yaml.safe_dump({"extends": [str(REPO / "recipes/bases/tiny-llama3.yaml")], "speculative": spec}))
    return str(path)


@pytest.fixture
def draft(tmp_path) -> Path:
    d = random_draft(LlamaConfig.from_json(BASE), (0, 1, 2), draft_vocab=1024)
    return d.save(tmp_path / "draft")


def refused(result, field: str) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert f"{field}:" in result.output, result.output
    return result.output


def test_a_good_draft_validates(tmp_path, draft):
    result = run("validate", recipe(tmp_path, draft))
    assert result.exit_code == 0, result.output


def test_aux_ids_out_of_range(tmp_path, draft):
    out = refused(run("validate", recipe(tmp_path, draft, aux_layers=[0, 1, 4])), "speculative.aux_layers")
    assert "three distinct layers of the 4-layer target" in out


def test_recipe_ids_differ_from_the_checkpoints(tmp_path, draft):
    out = refused(run("validate", recipe(tmp_path, draft, aux_layers=[1, 2, 3])), "speculative.aux_layers")
    assert "eagle_config ids [0, 1, 2]" in out


def test_fc_not_three_target_widths(tmp_path, draft):
    edit_config(draft, target_hidden_size=128)  # made for a 128-wide target: fc [256, 384] in config terms
    out = refused(run("validate", recipe(tmp_path, draft)), "speculative.checkpoint.fc.weight")
    assert "3 × 128" in out
    edit_config(draft, target_hidden_size=None)
    rewrite(draft, **{"fc.weight": torch.zeros(256, 512)})  # the file itself: two features wide
    refused(run("validate", recipe(tmp_path, draft)), "speculative.checkpoint.fc.weight")


def test_d2t_outside_the_vocabulary(tmp_path, draft):
    d2t = load_file(draft / "model.safetensors")["d2t"].clone()
    d2t[-1] += 4096
    rewrite(draft, d2t=d2t, t2d=None)
    out = refused(run("validate", recipe(tmp_path, draft)), "speculative.checkpoint.d2t")
    assert "outside the target's vocabulary" in out


def test_t2d_inconsistent(tmp_path, draft):
    rewrite(draft, t2d=torch.ones(4096, dtype=torch.bool))
    refused(run("validate", recipe(tmp_path, draft)), "speculative.checkpoint.t2d")


def test_yarn_and_variants_name_the_key(tmp_path, draft):
    edit_config(draft, rope_scaling={"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 2048})
    out = refused(run("validate", recipe(tmp_path, draft)), "speculative.checkpoint.rope_scaling.rope_type")
    assert "eagle_export_rope_scaling" in out
    edit_config(draft, rope_scaling=None, norm_before_residual=True)
    refused(run("validate", recipe(tmp_path, draft)), "speculative.checkpoint.norm_before_residual")


def test_convert_draft_of_a_published_eagle3_bin(tmp_path):
    """pytorch_model.bin is EAGLE-1's, EAGLE-3's and a target's file name: the EAGLE-3 draft is told apart by the
    strict checks (the first draft check that passes), converted once, and then loads without the opt-in."""
    state = write_published(tmp_path / "pub", "8b", pickle=True)
    refused(run("convert-draft", str(tmp_path / "pub"), "--out", str(tmp_path / "x")), "--allow-pickle")
    for kind in ("auto", "eagle3"):
        out = tmp_path / f"st-{kind}"
        result = run("convert-draft", str(tmp_path / "pub"), "--kind", kind, "--out", str(out), "--allow-pickle")
        assert result.exit_code == 0, result.output
        converted = load_file(out / "model.safetensors")
        assert converted.keys() == state.keys()
        assert all(torch.equal(converted[k], state[k]) for k in state)
        load_eagle3(out, embedding(), 32)  # no opt-in: safetensors
    bad = run("convert-draft", str(tmp_path / "pub"), "--kind", "eagle", "--out", str(tmp_path / "e"), "--allow-pickle")
    assert bad.exit_code == 2 and not (tmp_path / "e").exists()


def test_a_pickled_draft_needs_the_opt_in(tmp_path):
    d = random_draft(LlamaConfig.from_json(BASE), (0, 1, 2), draft_vocab=1024)
    folder = tmp_path / "pickled"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(d.config_dict()))
    torch.save(d.state_for("safeailab"), folder / "pytorch_model.bin")  # as SafeAILab publishes its drafts
    refused(run("validate", recipe(tmp_path, folder)), "speculative.allow_pickle")
    ok = run("validate", recipe(tmp_path, folder, allow_pickle=True))
    assert ok.exit_code == 0, ok.output
