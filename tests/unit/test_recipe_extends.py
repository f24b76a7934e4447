"""`extends:` chains (merge rules, relative paths, cycles, missing files) and `--set` overrides."""

from __future__ import annotations

import pytest

from builder.errors import UserError
from builder.recipe.loader import load_recipe
from tests.unit.recipe_helpers import good, run, write


def test_child_overrides_and_inherits(tmp_path):
    base = good()
    write(tmp_path / "bases" / "base.yaml", base)
    write(tmp_path / "child.yaml", "extends: bases/base.yaml\nbuild:\n  max_batch_size: 2\n")
    r = load_recipe(tmp_path / "child.yaml").recipe
    assert r.build.max_batch_size == 2
    assert r.build.max_seq_len == base["build"]["max_seq_len"]  # merged, not replaced
    assert r.speculative.method == "medusa"


def test_list_of_parents_merge_in_order(tmp_path):
    write(tmp_path / "a.yaml", good())
    write(tmp_path / "b.yaml", "build: {max_batch_size: 3}\ntarget: {device: h200}\n")
    write(tmp_path / "c.yaml", "extends: [a.yaml, b.yaml]\nbuild: {max_batch_size: 5}\n")
    r = load_recipe(tmp_path / "c.yaml").recipe
    assert (r.build.max_batch_size, r.target.device) == (5, "h200")


def test_changing_method_replaces_the_section(tmp_path):
    write(tmp_path / "a.yaml", good())  # medusa with num_heads, tree...
    write(
        tmp_path / "b.yaml",
        "extends: a.yaml\nspeculative: {method: lookahead, window: 2, ngram: 3, verification_set: 1}\n",
    )
    r = load_recipe(tmp_path / "b.yaml").recipe
    assert r.speculative.method == "lookahead" and r.speculative.draft_len == 1 + (2 - 1 + 1) * 2


def test_cycle_is_an_error(tmp_path):
    write(tmp_path / "a.yaml", "extends: b.yaml\n")
    write(tmp_path / "b.yaml", "extends: c.yaml\n")
    write(tmp_path / "c.yaml", "extends: a.yaml\n")
    result = run("validate", str(tmp_path / "a.yaml"))
    assert result.exit_code == 2
    assert "extends cycle" in result.stderr and "a.yaml -> " in result.stderr
    assert "Traceback" not in result.stderr


def test_self_extension_is_a_cycle(tmp_path):
    write(tmp_path / "a.yaml", "extends: a.yaml\n")
    with pytest.raises(UserError, match="extends cycle"):
        load_recipe(tmp_path / "a.yaml")


def test_missing_parent(tmp_path):
    write(tmp_path / "a.yaml", "extends: nope.yaml\n")
    result = run("validate", str(tmp_path / "a.yaml"))
    assert result.exit_code == 2
    assert "a.yaml:1:10: extends: extended recipe not found" in result.stderr


def test_error_points_into_the_parent_file(tmp_path):
    bad = good()
    bad["model"]["dtype"] = "bf17"
    write(tmp_path / "base.yaml", bad)
    write(tmp_path / "child.yaml", "extends: base.yaml\n")
    result = run("validate", str(tmp_path / "child.yaml"))
    assert result.exit_code == 2
    assert "base.yaml:" in result.stderr and "model.dtype" in result.stderr


def test_relative_paths_resolve_against_the_defining_file(tmp_path):
    write(tmp_path / "sub" / "trees" / "t.json", '{"choices": [[0], [1], [0, 0]]}')
    base = good()
    base["speculative"]["tree"] = "trees/t.json"
    write(tmp_path / "sub" / "base.yaml", base)
    write(tmp_path / "child.yaml", "extends: sub/base.yaml\n")
    assert run("validate", str(tmp_path / "child.yaml")).exit_code == 0


def test_set_overrides_are_typed(tmp_path):
    path = write(tmp_path / "r.yaml", good())
    r = load_recipe(path, ["build.max_batch_size=16", "triton.decoupled=false", "bench.concurrency=[1, 3]"]).recipe
    assert r.build.max_batch_size == 16 and r.triton.decoupled is False and r.bench.concurrency == [1, 3]


def test_set_can_switch_method(tmp_path):
    path = write(tmp_path / "r.yaml", good())
    r = load_recipe(path, ["speculative={method: lookahead, window: 3, ngram: 3, verification_set: 2}"]).recipe
    assert r.speculative.method == "lookahead"


@pytest.mark.parametrize(
    "override,expect",
    [
        (
            "build.max_batch_size=many",
            "--set build.max_batch_size=many:1:1: build.max_batch_size: Input should be a valid integer",
        ),
        ("build.nonsense=1", "build.nonsense: unknown field"),
        ("novalue", "expected dotted.path=value"),
        ("model.dtype.x=1", "model.dtype: invalid value"),
    ],
)
def test_bad_overrides(tmp_path, override, expect):
    path = write(tmp_path / "r.yaml", good())
    result = run("validate", str(path), "--set", override)
    assert result.exit_code == 2
    assert expect in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_show_prints_normalized_recipe(tmp_path):
    path = write(tmp_path / "r.yaml", good())
    result = run("validate", "--show", str(path), "--set", "build.max_batch_size=7")
    assert result.exit_code == 0
    assert "max_batch_size: 7" in result.output and "tokens_per_block: 32" in result.output
