"""What `trtspec tune` asks of a method goes through its `Method.tune` object (builder/tune/tuners.py), never its name:

* every built-in method's `tune` path resolves to a tuner, whose key is the report's "method" as `trtspec tune`
  has always written it (hand-written below); a method without one (none, an installed method) has nothing to tune;
* a tuner's `current` setting written back through its `overlay` gives the recipe's own drafter again (the resolved
  method config, compared whole), so the overlay fields and the setting keys agree for each method;
* the host model's small setting is one drafting unit, and where the tuner runs it as a drafter of its own
  (`small_config`), that drafter drafts exactly that many nodes (the method's own facts).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from builder.recipe.loader import load_recipe
from builder.speculative import registry
from builder.speculative.method import resolve
from builder.stages.parts import Parts
from builder.tune.overlay import overlay_fields, write_overlay
from builder.tune.run import method_key
from builder.tune.tuners import ByTreeType, Tuner, nothing_to_tune, tuner_of

REPO = Path(__file__).resolve().parents[2]

KEYS = {  # recipe -> the report's "method"
    "tiny-llama3-medusa.yaml": "medusa",
    "tiny-llama3-eagle1.yaml": "eagle1",
    "tiny-llama3-eagle2.yaml": "eagle2",
    "tiny-llama3-lookahead.yaml": "lookahead",
    "tiny-llama3-ngram.yaml": "ngram",
    "tiny-llama3-none.yaml": "none",
    "llama3-8b-1xh100-fp8-eagle.yaml": "eagle2",
    "tiny-llama3-trtllm-eagle1.yaml": "eagle1",
}


@pytest.mark.parametrize("name", sorted(KEYS))
def test_the_report_names_each_recipes_tuner(name):
    loaded = load_recipe(REPO / "recipes" / name)
    tuner = tuner_of(loaded.recipe.speculative)
    assert method_key(loaded) == KEYS[name]
    assert (tuner is None) == (KEYS[name] == "none") and (tuner is None or tuner.key == KEYS[name])


def test_every_method_names_a_tuner_or_none():
    for m in registry.BUILTIN:  # every built-in method that drafts has a tuner
        assert (m.tune is None) == (not m.drafts), m.name
    for m in registry.methods().values():
        if m.tune is None:
            continue
        obj = resolve(m.tune)
        assert isinstance(obj, (Tuner, ByTreeType)), m.tune
        tuners = (obj.static, obj.dynamic) if isinstance(obj, ByTreeType) else (obj,)
        assert all(callable(t.search) and callable(t.overlay) and callable(t.graph_ms) for t in tuners)
    assert registry.get("none").tune is None


def test_nothing_to_tune_without_a_tuner():
    assert nothing_to_tune(registry.get("none")) == "speculative.method none: no draft, nothing to tune"
    repeat = replace(registry.get("ngram"), name="repeat", tune=None)  # an installed method without a tuner
    assert nothing_to_tune(repeat) == "speculative.method repeat: no tuner, nothing to tune"


@pytest.mark.parametrize("name", sorted(k for k, v in KEYS.items() if v != "none" and k.startswith("tiny")))
def test_current_setting_through_the_overlay_is_the_recipes_drafter(name, tmp_path):
    loaded = load_recipe(REPO / "recipes" / name)
    tuner = tuner_of(loaded.recipe.speculative)
    assert tuner is not None
    fields = overlay_fields(loaded, tuner.current(loaded), [], 0)
    again = write_overlay(loaded, fields, tmp_path / "again.yaml", "the current setting")
    method = loaded.recipe.speculative.method
    assert Parts(again, method).drafter_config() == Parts(loaded, method).drafter_config()
    assert tuner.current(again) == tuner.current(loaded)


@pytest.mark.parametrize(
    "name",
    ["tiny-llama3-medusa.yaml", "tiny-llama3-eagle1.yaml", "tiny-llama3-eagle2.yaml", "tiny-llama3-lookahead.yaml"],
)
def test_the_host_models_small_setting_is_one_unit(name):
    loaded = load_recipe(REPO / "recipes" / name)
    tuner = tuner_of(loaded.recipe.speculative)
    assert tuner is not None and tuner.small is not None
    small = tuner.small(tuner.current(loaded))
    assert tuner.units(small) == 1 < tuner.units(tuner.current(loaded))
    if tuner.small_config is not None:  # run as a drafter of its own: it drafts one node
        assert registry.facts(tuner.small_config(small)).nodes == 1
