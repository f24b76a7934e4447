"""The recipe overlay `trtspec tune --write` produces: extends the tuned recipe, validates, carries the pick."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.recipe.loader import RecipeErrors, load_recipe
from builder.tune.overlay import overlay_fields, write_overlay

REPO = Path(__file__).resolve().parents[2]

CASES = {
    "tiny-llama3-medusa.yaml": {"choices": [[0], [1], [0, 0], [0, 0, 0]]},
    "tiny-llama3-eagle1.yaml": {"choices": [[0], [0, 0], [0, 0, 0], [0, 1]]},
    "tiny-llama3-eagle2.yaml": {"depth": 4, "top_k": 3, "total_nodes": 8},
    "tiny-llama3-lookahead.yaml": {"window": 2, "ngram": 3, "verification_set": 2},
    "tiny-llama3-trtllm-medusa.yaml": {"choices": [[0], [0, 0], [1]]},
    "llama3-8b-1xh100-fp8-eagle.yaml": {"depth": 5, "top_k": 8, "total_nodes": 48},
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_overlay_validates_and_carries_the_pick(name, tmp_path):
    loaded = load_recipe(REPO / "recipes" / name)
    setting = CASES[name]
    sched = [[1, 5], [4, 1]]
    assert "triton" not in overlay_fields(loaded, setting, None, draft_len=4)  # (by default the engine's rule)
    fields = overlay_fields(loaded, setting, sched, draft_len=4)  # --pin-schedule
    out = write_overlay(loaded, fields, tmp_path / "sub" / "tuned.yaml", "tuned\nby a test")
    text = (tmp_path / "sub" / "tuned.yaml").read_text()
    assert text.startswith("# tuned\n# by a test\nextends: ") and "../" in text.splitlines()[2]  # relative to the file
    spec, base = out.recipe.speculative, loaded.recipe
    trtllm = base.target.engine_backend == "trtllm"  # its runtime decides the draft: no schedule there
    assert out.recipe.triton.draft_schedule == ([] if trtllm else sched) and ("triton" in fields) != trtllm
    assert out.recipe.model == base.model and out.recipe.build == base.build  # everything else is the base's
    if "choices" in setting:
        tree = spec.tree if spec.method == "medusa" else spec.tree.choices
        assert tree == setting["choices"]
    elif spec.method == "eagle":
        got = {"depth": spec.tree.depth, "top_k": spec.tree.top_k, "total_nodes": spec.tree.total_nodes}
        assert spec.tree.type == "dynamic" and got == setting
    else:
        assert (spec.window, spec.ngram, spec.verification_set) == (2, 3, 2)
    assert spec.verification == base.speculative.verification


def test_a_bad_overlay_is_refused_and_nothing_is_written(tmp_path):
    loaded = load_recipe(REPO / "recipes" / "tiny-llama3-medusa.yaml")
    deep = {"choices": [[0], [0, 0], [0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]]}  # 6 > num_heads 5
    fields = overlay_fields(loaded, deep, [], draft_len=6)
    with pytest.raises(RecipeErrors, match="num_heads"):
        write_overlay(loaded, fields, tmp_path / "tuned.yaml", "bad")
    assert list(tmp_path.iterdir()) == []


def test_max_draft_len_follows_the_tree_when_the_recipe_sets_it(tmp_path):
    loaded = load_recipe(REPO / "recipes" / "tiny-llama3-medusa.yaml", ["build.max_draft_len=12"])
    fields = overlay_fields(loaded, {"choices": [[0], [0, 0]]}, [], draft_len=2)
    assert fields["build"] == {"max_draft_len": 2}
    plain = load_recipe(REPO / "recipes" / "tiny-llama3-medusa.yaml")
    assert "build" not in overlay_fields(plain, {"choices": [[0]]}, [], 1)


def test_nothing_to_tune_without_a_draft():
    with pytest.raises(ValueError, match="nothing to tune"):
        overlay_fields(load_recipe(REPO / "recipes" / "tiny-llama3-none.yaml"), {}, [], 0)
