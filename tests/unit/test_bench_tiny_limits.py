"""scripts/bench_tiny_limits.py (a benchmark, not a test) still runs, and its replay part keeps its invariants: the
tuner's grid holds the recipe's own setting, so its best scores at least as high; a perfect draft-length oracle
drafts at most what each step drafted, on a curve that never falls with T, so it scores at least as high too."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("bench_tiny_limits", REPO / "scripts" / "bench_tiny_limits.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_kernel_parts_time_every_size():
    mod = _script()
    heads = mod.lm_head([1, 3], runs=2)
    assert [r["rows"] for r in heads] == [1, 3]
    assert all(r["fp32_us"] > 0 and r["int8_us"] > 0 and r["fp32_gflops"] > 0 for r in heads)
    att = mod.attention([1, 3], past=20, runs=2)
    assert [r["T"] for r in att] == [1, 3] and all(r["gqa_us"] > 0 and r["folded_core_us"] > 0 for r in att)


def test_replay_part_orders_its_settings():
    r = _script().replay_limits(num_prompts=2, max_new=16)
    base = r["recipe"]["tokens_per_ms"]
    assert base > 0 and r["recipe"]["tau"] >= 1
    assert r["grid_best"]["tokens_per_ms"] >= base
    assert r["length_oracle"]["tokens_per_ms"] >= base * (1 - 1e-9)
    assert r["datastore"]["tokens_per_ms"] > 0 and r["datastore"]["training_tokens"] > 100_000
