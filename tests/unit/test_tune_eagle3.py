"""`trtspec tune` on EAGLE-3: its calibration decodes what the recipe's decoders decode.

Oracle: the decoders' torch path (`builder.stages.decoders.build_decoder(engine="torch")`, what `trtspec generate
--engine torch` and the acceptance profile run), built apart from the tuner's `Calibration`: over the same prompts
and the recipe's own tree, the tuner's τ statistics must be the same numbers. They were not before the tuner's
engine returned EAGLE-3's aux-layer features: its draft then read the final-norm state (τ 2.7 instead of 4-5 on the
regime fixture's EAGLE-3 draft, and a 3-node chain picked).
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "tiny-llama3-eagle3.yaml"


@pytest.mark.skipif(
    not (REPO / "tests" / "fixtures" / "tiny-llama3" / "eagle3" / "model.safetensors").is_file(),
    reason="the tiny EAGLE-3 draft is made by scripts/setup.sh (scripts/make_eagle3_fixture.py)",
)
def test_calibration_tau_equals_the_decoders_torch_path() -> None:
    from builder.recipe.loader import load_recipe
    from builder.speculative import registry
    from builder.stages.decoders import build_decoder
    from builder.tune.acceptance import tau_stats
    from builder.tune.calibrate import Calibration
    from builder.tune.tuners import measure_tau

    loaded = load_recipe(str(RECIPE))
    spec = loaded.recipe.speculative
    facts = registry.of(spec).facts(spec)
    cal = Calibration(loaded, 3, 48, 24)
    got = measure_tau(cal, spec, facts.top_k, facts.tentative)
    setup = build_decoder(loaded, engine="torch")
    want = tau_stats(setup.engine, setup.make_drafter, cal.prompts, cal.max_new, cal.stop_ids)
    assert (got.steps, got.tokens, got.accepted_at_depth) == (want.steps, want.tokens, want.accepted_at_depth)
    assert got.tokens / got.steps > 1.5  # the trained draft drafts (a wrong input drafts far less)
