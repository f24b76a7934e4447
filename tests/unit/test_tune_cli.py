"""`trtspec tune` end to end on the tiny fixture (fast settings): engine stage curve, calibration, choice,
overlay, measured speedup. Oracles: greedy decoding is lossless (every measured row emits plain's tokens),
the pick is the argmax of E[τ] / c over the scored candidates, the written overlay validates and carries
the pick, and the engine stage's curve covers exactly the tree sizes and batch sizes the recipe allows."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from builder.engines.draft_budget import budget_grid
from builder.engines.ort.load import read_ort_meta
from builder.engines.step_curve import batch_grid, size_grid
from builder.recipe.loader import load_recipe
from builder.speculative import registry
from builder.speculative.budget import BudgetRule
from builder.stages.runner import build
from builder.tune.curve import StepCurve
from tests.unit.recipe_helpers import run

REPO = Path(__file__).resolve().parents[2]
CACHE = os.environ["TRTSPEC_CACHE_DIR"]
FAST = ("--prompts", "1", "--max-new-tokens", "16", "--cache-dir", CACHE, "--json")


def tune(name: str, *args: str) -> dict:
    res = run("tune", str(REPO / "recipes" / name), *FAST, *args)
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def check_consistent(rep: dict) -> None:
    plain = rep["cost"]["plain_ms"]
    for row in [rep["pick"], rep["current"], *rep["candidates"]]:
        assert row["speedup"] == pytest.approx(row["tau"] * plain / row["cost_ms"], rel=1e-3)
        assert 1 <= row["nodes"] <= rep["cost"]["max_nodes"] and row["tau"] >= 1
    rate = lambda r: r["tau"] / r["cost_ms"]  # noqa: E731
    # the pick: the best setting that drafts (speculation off, 1 node, is the schedule's to choose)
    assert rate(rep["pick"]) == pytest.approx(max(rate(r) for r in rep["candidates"] if r["nodes"] > 1))
    assert rate(rep["pick"]) >= rate(rep["current"]) * (1 - 1e-9)  # the current setting is a candidate too


def test_tune_lookahead_end_to_end_with_measured_speedup(tmp_path):
    rep = tune("tiny-llama3-lookahead.yaml", "--measure-prompts", "1", "--write", str(tmp_path / "tuned.yaml"))
    check_consistent(rep)
    assert rep["cost"]["source"] == "measured" and rep["calibration"]["source"] == "builtin:stdlib"
    assert rep["cost"]["curve_timed"] == "now"
    m = rep["measured"]
    assert [r["row"] for r in m["rows"]] == ["plain", "current", "tuned"] and m["tokens_equal"] is True
    assert m["rows"][0]["speedup"] == 1.0 and all(r["tokens_per_s"] > 0 for r in m["rows"])
    tuned = load_recipe(tmp_path / "tuned.yaml").recipe
    pick = rep["pick"]
    assert (tuned.speculative.window, tuned.speculative.ngram, tuned.speculative.verification_set) == (
        pick["window"],
        pick["ngram"],
        pick["verification_set"],
    )
    assert tuned.triton.draft_schedule == []  # nothing pinned: the engine's measured rule picks the budgets
    # the engine stage's curve: every tree size up to the engine's room, every batch size up to max_batch_size
    loaded = load_recipe(REPO / "recipes" / "tiny-llama3-lookahead.yaml")
    meta = read_ort_meta(build(loaded, CACHE, until="engine").folder("engine"))
    curve = meta["step_curve"]
    room = meta["capacity"] - meta["max_seq_len"]
    assert [int(b) for b in curve["target"]] == batch_grid(loaded.recipe.build.max_batch_size)
    assert all([int(t) for t in row] == size_grid(room) and min(row.values()) > 0 for row in curve["target"].values())
    assert curve["expand"] == {} and rep["cost"]["max_nodes"] == room
    # ... and its draft budget table: every budget of the grid up to the drafter's nodes, every batch size; τ(1) = 1,
    # τ and each batch's costs non-decreasing in the budget; the rule answers every batch size the engine runs
    table, nodes = meta["draft_budget"], registry.facts(registry.drafter_config(meta["drafter"])).max_nodes
    rule = BudgetRule.from_json(table)
    assert rule.budgets == budget_grid(nodes) and sorted(rule.cost) == batch_grid(loaded.recipe.build.max_batch_size)
    taus = [rule.tau[n] for n in rule.budgets]
    assert taus[0] == 1.0 and taus == sorted(taus) and taus[-1] <= nodes
    assert all(list(row.values()) == sorted(row.values()) and min(row.values()) > 0 for row in rule.cost.values())
    assert all(rule.budget(b) in rule.budgets for b in range(1, loaded.recipe.build.max_batch_size + 1))


@pytest.mark.parametrize("name", ["tiny-llama3-eagle1.yaml", "tiny-llama3-eagle2.yaml", "tiny-llama3-medusa.yaml"])
def test_tune_tree_methods(name):
    rep = tune(name, "--measure-prompts", "0")
    check_consistent(rep)
    assert "measured" not in rep
    cal = rep["calibration"]
    if "choices" in rep["pick"]:  # static: per-node acceptance on a calibration tree holding the current tree
        choices = [tuple(c) for c in rep["pick"]["choices"]]
        assert all(c[:-1] in set(choices) for c in choices if len(c) > 1)
        assert cal["nodes"] >= 13 and all(0 <= a <= 1 for row in cal["per_depth_rank"] for a in row)
        tree = rep["overlay"]["speculative"]["tree"]
        assert tree in (rep["pick"]["choices"], {"type": "static", "choices": rep["pick"]["choices"]})
    else:
        assert rep["overlay"]["speculative"]["tree"]["total_nodes"] == rep["pick"]["total_nodes"]
    for b, options in rep["schedule_detail"].items():  # each batch size's budgets: off and truncations of the pick
        assert options[0]["nodes"] == 1 and max(o["nodes"] for o in options) <= rep["pick"]["nodes"]


def test_tune_gpu_recipe_is_a_roofline_prediction(tmp_path):
    rep = tune("tiny-llama3-trtllm-medusa.yaml", "--write", str(tmp_path / "t.yaml"))
    check_consistent(rep)
    assert rep["cost"]["source"] == "roofline" and "no GPU here" in rep["measured"]["note"]
    assert "triton" not in rep["overlay"] and load_recipe(tmp_path / "t.yaml").recipe.target.device == "h100"


def test_tune_without_a_draft_has_nothing_to_tune():
    rep = tune("tiny-llama3-none.yaml")
    assert rep["method"] == "none" and "nothing to tune" in rep["note"]
    res = run("tune", str(REPO / "recipes" / "tiny-llama3-none.yaml"), "--cache-dir", CACHE)
    assert res.exit_code == 0 and "nothing to tune" in res.output


def test_tune_user_errors(tmp_path):
    res = run("tune", str(REPO / "recipes" / "tiny-llama3-lookahead.yaml"), "--prompts", "0")
    assert res.exit_code == 2 and "--prompts" in res.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("extends: " + str(REPO / "recipes" / "tiny-llama3-lookahead.yaml") + "\nspeculative: {window: 0}\n")
    res = run("tune", str(bad), "--cache-dir", CACHE)
    assert res.exit_code == 2 and "speculative.window" in res.output


def test_tune_remeasures_a_curve_from_another_host(monkeypatch):
    """With `--curve engine`: a cached engine's step curve measured where the CPU, its instruction-set level or the
    threads differ (a pulled cache; a VM of the same CPU name with AVX-512 hidden) does not describe this host: tune
    measures the curve again here and says so; on the same host it takes the engine's curve as it is. (The other host
    is a stand-in: `host_about` reports another ISA level; the curve is really measured again.) By default the curve
    is timed again in any case, in the minutes the host share is measured against it, the engine left as it was."""
    import builder.engines.step_curve as step_curve
    from builder.tune.run import Options, cost_curve

    loaded = load_recipe(REPO / "recipes" / "tiny-llama3-lookahead.yaml")
    said: list[str] = []
    now, folder = cost_curve(loaded, Options(cache=Path(CACHE), say=said.append))
    stored = read_ort_meta(folder)["step_curve"]
    assert any("timing the engine's step curve now" in m for m in said)
    assert now.to_json()["target"] != stored["target"] and now.max_nodes == StepCurve.from_json(stored).max_nodes
    assert read_ort_meta(folder)["step_curve"] == stored
    said.clear()
    opts = Options(cache=Path(CACHE), say=said.append, curve="engine")
    curve, folder = cost_curve(loaded, opts)
    assert curve.about == stored["about"] and not any("measuring it here" in m for m in said)
    real = step_curve.host_about
    other = {**real(1), "isa": "x86-64-v1" if real(1)["isa"] != "x86-64-v1" else "x86-64-v4"}
    monkeypatch.setattr(step_curve, "host_about", lambda threads: {**other, "threads": threads})
    said.clear()
    again, folder2 = cost_curve(loaded, opts)
    assert folder2 == folder and any("measuring it here" in m and repr(stored["about"]["isa"]) in m for m in said)
    assert again.about["isa"] == other["isa"]  # measured just now, by `measure_folder` under this host's about
    assert again.max_nodes == curve.max_nodes and again.target_ms(1, 1) > 0
    assert read_ort_meta(folder)["step_curve"] == stored  # the cached engine is left as it was


def test_extend_is_timed_after_a_target_step():
    """The step curve times an EAGLE extend as a decoding loop runs it: right after a plain target step
    (`plain_steps`, run untimed before each timed call: its time is not in the figure)."""
    from builder.engines.ort.load import open_ort_engine
    from builder.engines.step_curve import plain_steps, point_ms

    calls: list[str] = []
    ms = point_ms(lambda: calls.append("fn"), 0.0, before=lambda: (calls.append("before"), time.sleep(0.02)))
    assert calls[::2] == ["before"] * (len(calls) // 2) and calls[1::2] == ["fn"] * (len(calls) // 2)
    assert ms < 10  # the 20 ms before each call are not timed
    loaded = load_recipe(REPO / "recipes" / "tiny-llama3-eagle1.yaml")
    engine = open_ort_engine(build(loaded, CACHE, until="engine").folder("engine"), max_batch_size=1, trees=True).engine
    with plain_steps(engine) as step:
        step()
        (seq,) = engine.rows.ids
        first = engine.committed_len(seq)
        step()
        step()
        assert engine.committed_len(seq) == first + 2  # one plain step (one token) each
    assert len(engine.rows) == 0  # released at the end
