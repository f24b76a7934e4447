"""The cost side of the tuner: GPU roofline predictions checked by hand, datasheet rates, curve arithmetic."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.engines.step_curve import batch_grid, size_grid
from builder.recipe.gpus import GPUS
from builder.recipe.loader import load_recipe
from builder.recipe.resolve import resolve_architecture
from builder.tune.costs import Host, static_cost, step_ms
from builder.tune.curve import OutOfRange, StepCurve, isotonic
from builder.tune.dynamic import EAGLE2
from builder.tune.host import fit_line
from builder.tune.lookahead import TUNER as LOOKAHEAD
from builder.tune.roofline import roofline_curve
from builder.tune.static import EAGLE1, MEDUSA

REPO = Path(__file__).resolve().parents[2]

# Llama 3 8B (recipes/bases/llama3-8b-instruct.yaml), by hand:
DECODER = 32 * (4096 * 128 * (2 * 32 + 2 * 8) + 3 * 4096 * 14336)  # 6,979,321,856 params (q, o, k, v, gate, up, down)
LM_HEAD = 128256 * 4096  # 525,336,576 params
EAGLE_LAYER = 2 * 4096 * 4096 + 4096 + DECODER // 32  # fc (2h -> h, bias) + one decoder layer: 251,662,336
CTX = 512 + 256 // 2  # bench.input_len + bench.output_len / 2 of recipes/deploy/llama3-8b-1xh100-fp8.yaml


def arch_curve(name: str, max_nodes: int = 64) -> StepCurve:
    loaded = load_recipe(REPO / "recipes" / name)
    arch = resolve_architecture(loaded.recipe, loaded.dir_of(("model", "checkpoint")))
    return roofline_curve(loaded.recipe, arch, max_nodes)


def test_datasheet_rates_are_the_dense_figures():
    # NVIDIA datasheets print tensor-core TFLOP/s "with sparsity" (*); dense is half. The L40S datasheet prints
    # both columns, BF16 362.05 | 733* and FP8 733 | 1,466*: its dense BF16 figure is the printed one.
    sparse = {
        "h100": (1979, 3958, 3350),
        "h100-pcie": (1513, 3026, 2000),
        "h200": (1979, 3958, 4800),
        "a100": (624, None, 2039),
        "l40s": (724.1, 1466, 864),
    }
    for key, (bf16, fp8, gbps) in sparse.items():
        g = GPUS[key]
        assert g.bf16_tflops == pytest.approx(bf16 / 2, abs=0.06) and g.bandwidth_gbps == gbps
        assert (g.fp8_tflops is None) if fp8 is None else g.fp8_tflops == pytest.approx(fp8 / 2)
        assert (g.fp8_tflops is not None) == g.fp8  # FP8 tensor cores exactly where compute capability >= 8.9
    assert GPUS["h100"].flops("fp32") == GPUS["h100"].flops("bf16") / 2  # TF32: half the BF16 rate


def test_roofline_8b_fp8_h100_by_hand():
    c = arch_curve("llama3-8b-1xh100-fp8-none.yaml")
    assert c.source == "roofline" and c.batches == [1, 2, 4, 8, 16] and c.max_nodes == 64
    # bytes per cached token: K and V, 32 layers, 8 KV heads, head_dim 128, bf16 (the own TensorRT backend keeps
    # no FP8 KV cache: recipes/deploy/llama3-8b-1xh100-fp8.yaml)
    kv = 2 * 32 * 8 * 128 * 2
    # T = 1, one sequence: memory-bound; FP8 decoder (1 B), bf16 LM head (excluded from FP8), bf16 KV
    weights = DECODER * 1 + LM_HEAD * 2
    assert c.target_ms(1, 1) == pytest.approx(1e3 * (weights + CTX * kv) / 3.35e12, rel=1e-9)  # 2.4221 ms
    assert c.target_ms(1, 1) == pytest.approx(2.42205, abs=1e-5)
    assert c.target_ms(1, 64) == c.target_ms(1, 1)  # still memory-bound at 64 nodes: an H100 pays nothing for them
    # 16 sequences × 64 nodes = 1024 tokens: compute-bound
    tokens, attn = 16 * 64, 4 * 16 * 64 * (CTX + 64) * 32 * 32 * 128
    flop_s = 2 * tokens * DECODER / 1979e12 + 2 * tokens * LM_HEAD / 989.5e12 + attn / 989.5e12
    assert flop_s > (weights + 16 * CTX * kv) / 3.35e12
    assert c.target_ms(16, 64) == pytest.approx(1e3 * flop_s, rel=1e-9)  # 8.69 ms
    assert c.target_ms(16, 64) == pytest.approx(8.6929, abs=1e-3)


def test_roofline_eagle_draft_call_by_hand():
    c = arch_curve("llama3-8b-1xh100-fp8-eagle.yaml")
    draft_bytes = EAGLE_LAYER * 2 + LM_HEAD * 2 + CTX * 2 * 8 * 128 * 2  # bf16 draft layer, bf16 LM head, its bf16 KV
    assert c.expand_ms(1, 1) == pytest.approx(1e3 * draft_bytes / 3.35e12, rel=1e-9)  # 0.4647 ms
    assert c.expand_ms(1, 1) / c.target_ms(1, 1) == pytest.approx(0.192, abs=1e-3)  # the draft is ~1/5 of a step
    assert c.extend_ms(1, 4) == c.expand_ms(1, 1)  # 4 pairs: still memory-bound


def test_roofline_h200_is_faster_by_the_bandwidth_ratio():
    h100 = arch_curve("llama3-8b-1xh100-fp8-none.yaml")
    loaded = load_recipe(REPO / "recipes" / "llama3-8b-1xh100-fp8-none.yaml", ["target.device=h200"])
    arch = resolve_architecture(loaded.recipe, loaded.dir_of(("model", "checkpoint")))
    h200 = roofline_curve(loaded.recipe, arch, 64)
    assert h100.target_ms(1, 1) / h200.target_ms(1, 1) == pytest.approx(4800 / 3350)


def test_isotonic_pools_adjacent_violators():
    assert isotonic({1: 1.0, 2: 3.0, 3: 2.0, 4: 4.0}) == {1: 1.0, 2: 2.5, 3: 2.5, 4: 4.0}
    assert isotonic({1: 3.0, 2: 2.0, 3: 1.0}) == {1: 2.0, 2: 2.0, 3: 2.0}
    assert isotonic({1: 1.0, 5: 2.0}) == {1: 1.0, 5: 2.0}


def test_curve_interpolates_linearly_and_refuses_outside():
    c = StepCurve("measured", {1: {1: 1.0, 3: 2.0}, 4: {1: 3.0, 3: 6.0}}, {1: {1: 0.5, 5: 1.5}}, {1: {1: 0.2, 4: 0.5}})
    assert c.target_ms(1, 2) == 1.5 and c.target_ms(2, 1) == pytest.approx(1 + 2 * 1 / 3)
    assert c.target_ms(2, 2) == pytest.approx(1.5 + (4.5 - 1.5) / 3)
    assert c.expand_ms(1, 3) == 1.0 and c.max_nodes == 3 and c.batches == [1, 4]
    for bad in (lambda: c.target_ms(1, 4), lambda: c.target_ms(8, 1), lambda: c.expand_ms(2, 1)):
        with pytest.raises(OutOfRange):
            bad()
    again = StepCurve.from_json(c.to_json())
    assert again.target == c.target and again.expand == c.expand and again.extend == c.extend


def test_method_costs_from_a_hand_curve():
    c = StepCurve("measured", {1: {1: 1.0, 10: 2.0}}, {1: {1: 0.3, 9: 0.7}}, {1: {1: 0.1, 8: 0.8}})
    # EAGLE-1 tree (0) (1) (0,0) (0,0,0): 5 nodes; levels with children below the root: depth 1 [(0)], depth 2 [(0,0)]
    tree = [(0,), (1,), (0, 0), (0, 0, 0)]
    target5 = 1.0 + 4 / 9
    assert static_cost(c, 1, MEDUSA)(tree, 2.4) == pytest.approx(target5)  # Medusa: the heads are in the step
    assert static_cost(c, 1, EAGLE1)(tree, 2.4) == pytest.approx(target5 + 0.2 + 0.3 + 0.3)  # extend(2) + 2 expands
    assert static_cost(c, 1, EAGLE1)([], 1.0) == 1.0  # off: no draft calls
    # EAGLE-2 depth 3, top_k 2, 6 nodes: target(7) + extend(3 pairs) + 2 expands of 2 nodes
    eagle2 = {"depth": 3, "top_k": 2, "total_nodes": 6}
    assert step_ms(EAGLE2, eagle2, c, 1, 3.2, Host()) == pytest.approx(1 + 6 / 9 + 0.3 + 2 * 0.35)
    # Lookahead W=2, N=3, G=1: 1 + (N-2) + (W-1+G)(N-1) = 1 + 1 + 2·2 = 6 nodes
    la = {"window": 2, "ngram": 3, "verification_set": 1}
    assert LOOKAHEAD.units(la) == 5 and step_ms(LOOKAHEAD, la, c, 1, 1.5, Host()) == pytest.approx(1 + 5 / 9)


def test_host_share_is_base_plus_units_per_row():
    c = StepCurve("measured", {1: {1: 1.0, 10: 2.0}, 2: {1: 1.5, 10: 3.0}})
    host = Host(0.2, 0.05, "measured", draft_ms=0.1)
    # Medusa: one unit per draft node (4), at batch 2 each row's drafting counts: 0.2 + 2 · (0.1 + 0.05 · 4)
    tree = [(0,), (1,), (0, 0), (0, 0, 0)]
    assert static_cost(c, 2, MEDUSA, host)(tree, 2.0) == pytest.approx(1.5 + 1.5 * 4 / 9 + 0.8)
    assert step_ms(MEDUSA, {"off": True}, c, 2, 1.0, host) == pytest.approx(1.5 + 0.2)  # off: the base share only
    assert (
        EAGLE1.units({"choices": [[0], [0, 0], [1]]}) == 2
        and EAGLE2.units({"depth": 6, "top_k": 3, "total_nodes": 4}) == 4
    )


def test_host_line_through_the_small_and_current_decodes():
    assert fit_line((1, 0.5), (5, 0.9)) == pytest.approx((0.4, 0.1))  # 0.4 + 0.1 u
    assert fit_line((1, 0.5), (1, 0.7)) == (0.5, 0.0)  # the current setting is one unit already: no slope
    assert fit_line((1, -0.2), (4, -0.1)) == pytest.approx((0.0, 0.1 / 3))  # noise below zero is floored
    cur = {"choices": [[0], [1], [0, 0]]}
    assert MEDUSA.small(cur) == {"choices": [[0]]} and EAGLE1.small(cur) == {"choices": [[0]]}
    assert EAGLE2.small({"depth": 5, "top_k": 3, "total_nodes": 12}) == {
        "depth": 1,
        "top_k": 3,
        "total_nodes": 1,
    }
    assert LOOKAHEAD.units(LOOKAHEAD.small({})) == 1


def test_grids():
    assert size_grid(24) == [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 15, 19, 24]
    assert size_grid(1) == [1] and size_grid(8)[-1] == 8
    assert batch_grid(4) == [1, 2, 4] and batch_grid(6) == [1, 2, 4, 6] and batch_grid(1) == [1]
