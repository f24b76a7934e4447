"""Where the quantize stage's PTQ runs and what it needs there (`builder.quantize.placement`), and what
`trtspec plan` says about it — pure functions on synthetic host facts (no GPU here); the CPU path runs for
real in `test_quantize_build.py`.

Expected numbers are worked out by hand from the published Llama 3 70B architecture (shown inline).
"""

from __future__ import annotations

import json

import pytest

from builder.errors import UserError
from builder.quantize.placement import GIB, HostFacts, LlamaShape, calibration_activation_bytes, place, recipe_host
from builder.recipe.gpus import GPUS
from tests.unit.recipe_helpers import run

L70 = LlamaShape(hidden=8192, layers=80, heads=64, kv_heads=8, head_dim=128, intermediate=28672, vocab=128256)
TINY = LlamaShape(hidden=256, layers=4, heads=8, kv_heads=2, head_dim=32, intermediate=688, vocab=4096)
H100, H200 = GPUS["h100"].memory_bytes, GPUS["h200"].memory_bytes


def test_llama3_70b_parameters_by_hand():
    # embedding + LM head 2 × 128256·8192; per layer q, o 8192·8192 each, k, v 1024·8192 each, 3 × 8192·28672,
    # 2 norms; final norm
    layer = 2 * 8192 * 8192 + 2 * 1024 * 8192 + 3 * 8192 * 28672 + 2 * 8192
    assert L70.params() == 2 * 128256 * 8192 + 80 * layer + 8192 == 70_553_706_496


def test_activations_of_one_calibration_batch_by_hand():
    # 4 sequences × 1024 tokens, bf16: per token h, norm(h) 2·8192, qkv (64 + 16)·128, attention output 64·128,
    # gate, up, product 3·28672, logits 128256; attention probabilities 2 × 4·64·1024²; the fake-quantized copy
    # of the largest weight 28672·8192
    per_token = 2 * 8192 + 80 * 128 + 64 * 128 + 3 * 28672 + 128256
    want = (4 * 1024 * per_token + 2 * 4 * 64 * 1024 * 1024 + 28672 * 8192) * 2
    assert calibration_activation_bytes(L70, 4, 1024, "bfloat16") == want


def test_no_cuda_means_the_cpu_in_float32():
    p = place(TINY, HostFacts((), 24 * GIB), "bfloat16", want_gpus=4, seq_len=128)
    assert (p.device, p.gpus, p.dtype, p.max_memory) == ("cpu", 0, "float32", {})
    assert p.weight_bytes == TINY.params() * 4 and p.fits and p.capacity_bytes == 24 * GIB
    assert p.describe().startswith("cpu (host RAM), float32: weights 0.02 GiB")
    big = place(L70, HostFacts((), 24 * GIB), "bfloat16", want_gpus=1, seq_len=1024)  # 282 GB of fp32 weights
    assert not big.fits and big.describe().endswith("does not fit")


def test_70b_spreads_over_the_recipes_gpus_in_bf16():
    act = calibration_activation_bytes(L70, 4, 1024, "bfloat16")
    four = place(L70, HostFacts((H100,) * 8, 0, "H100"), "bfloat16", want_gpus=4, seq_len=1024)
    assert (four.device, four.gpus, four.dtype) == ("cuda", 4, "bfloat16")  # the recipe's 4 of the host's 8
    assert four.weight_bytes == 70_553_706_496 * 2 and four.fits
    assert four.max_memory == {i: H100 - 2 * GIB - act for i in range(4)}  # device_map="auto" budget per GPU
    assert four.describe() == (
        f"4 × H100, bfloat16: weights {four.weight_bytes / GIB:.2f} GiB + activations "
        f"{act / GIB:.2f} GiB of {4 * (H100 - 2 * GIB) / GIB:.2f} GiB"
    )
    # one H200: 131.4 GiB of bf16 weights + 3.3 GiB activations + 2 GiB reserve < 140.4 GiB
    assert place(L70, HostFacts((H200,), 0, "H200"), "bfloat16", 1, 1024).fits
    # one H100: does not fit (the quantize stage and `trtspec plan` refuse it)
    assert not place(L70, HostFacts((H100,), 0, "H100"), "bfloat16", 1, 1024).fits


def test_plan_takes_a_gpu_targets_gpus_and_a_cpu_targets_host():
    here = HostFacts((), 24 * GIB)
    assert recipe_host("cpu", 1, here) is here
    host = recipe_host("h100", 4, here)
    assert host.gpu_bytes == (H100,) * 4 and host.gpu_name == GPUS["h100"].name


def plan_json(*args: str) -> dict:
    r = run("plan", "--json", *args)
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def test_plan_states_where_ptq_runs_and_its_memory():
    ptq = plan_json("recipes/llama3-70b-tp4-h100-fp8-trtllm-eagle.yaml")["ptq"]
    assert (ptq["source"], ptq["device"], ptq["gpus"], ptq["dtype"]) == ("calibrated", "cuda", 4, "bfloat16")
    assert ptq["weight_bytes"] == 70_553_706_496 * 2 and ptq["fits"]
    assert ptq["text"].startswith(f"4 × {GPUS['h100'].name}, bfloat16: weights 131.42 GiB")
    assert plan_json("recipes/tiny-llama3-none.yaml")["ptq"] is None  # nothing to quantize


def test_plan_refuses_ptq_that_cannot_fit_where_it_would_run():
    r = run("plan", "recipes/llama3-70b-tp1-h200-fp8-none.yaml", "--set", "target.device=h100")
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert "quantization.mode" in r.stderr and "FP8 PTQ does not fit" in r.stderr and "1 × NVIDIA H100" in r.stderr


def test_ptq_report_on_a_synthetic_host():
    """A cpu recipe plans PTQ on the host it runs on: here a made-up one with two GPUs, then one without."""
    from builder.plan.report import ptq_report
    from builder.recipe.loader import load_recipe
    from builder.recipe.resolve import resolve_architecture

    loaded = load_recipe("recipes/tiny-llama3-fp8.yaml")
    arch = resolve_architecture(loaded.recipe, loaded.dir_of(("model", "checkpoint")))
    gpus = ptq_report(loaded, arch, HostFacts((16 * GIB, 16 * GIB), 64 * GIB, "L4"))
    assert (gpus["device"], gpus["gpus"], gpus["dtype"]) == ("cuda", 2, "float32")  # the recipe's model.dtype
    cpu = ptq_report(loaded, arch, HostFacts((), 8 * GIB))
    assert (cpu["device"], cpu["dtype"], cpu["fits"]) == ("cpu", "float32", True)
    with pytest.raises(UserError, match="does not fit"):
        ptq_report(loaded, arch, HostFacts((), 10 * 2**20))  # 10 MiB of RAM
