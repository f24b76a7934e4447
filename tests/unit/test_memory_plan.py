"""Memory-plan figures against hand-computed values from the published Llama 3 architectures.

Every expected number below is worked out by hand from the architecture (shown inline), not
produced by the code under test. trtspec's own engines (tensorrt, onnxruntime: per-slot KV in the graphs'
real dtypes) have theirs in test_memory_plan_tensorrt.py; here TensorRT-LLM's paged plan and what holds
for every backend.
"""

from __future__ import annotations

import json

from tests.unit.recipe_helpers import run



def plan(recipe: str, *sets: str) -> dict:
    args = ["plan", "--json", recipe]
    for s in sets:
        args += ["--set", s]
    result = run(*args)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_llama3_70b_fp8_tp4_h100_trtllm_eagle():
    """TensorRT-LLM: embedding whole on every rank, LM head sharded, one EagleNet per tree level (mc_sim_7b_63:
    4 levels), each with the draft layer, fc, its own embedding table and LM head; no rejection engine."""
    r = plan("recipes/llama3-70b-tp4-h100-fp8-trtllm-eagle.yaml")
    m = r["memory"]
    C, V, layer = 8192, 128256, 855_638_016
    decoder = 80 * layer // 4 + 80 * 7 * 8
    norms = (2 * 80 + 1) * C * 2
    embed, lm_head = V * C * 2, V * C // 4 * 2
    net_sharded = 2 * C * C + C + layer + V * C  # fc (+ bias), the draft layer, the LM head: split over 4 ranks
    net_whole = 2 * C + V * C  # the draft layer's 2 norms and the embedding table: on every rank
    nets = 4 * (net_sharded // 4 + net_whole) * 2
    comps = {c["name"]: c["bytes"] for c in m["components"]}
    assert comps == {"decoder": decoder, "norms": norms, "embed_tokens": embed, "lm_head": lm_head,
                     "eagle_nets (× 4)": nets}
    # KV: 80 target layers + 4 EagleNet layers, 8/4 = 2 KV heads per rank, 128 dims, FP8
    assert m["kv_bytes_per_token"] == 2 * 84 * 2 * 128 == 43_008
    assert r["max_draft_len"] == 63 and m["tokens_per_sequence"] == 4096 + 63


def test_70b_bf16_on_one_h100_is_refused():
    result = run("plan", "recipes/llama3-70b-tp1-h200-fp8-none.yaml", "--set", "quantization.mode=none",
                 "--set", "target.device=h100")
    assert result.exit_code == 2
    # 80 layers · 855,638,016 params · 2 B = 127.5 GiB of decoder weights alone
    assert "do not fit" in result.stderr and "Traceback" not in result.stderr


def test_medusa_heads_cost_their_lm_heads():
    m = plan("recipes/llama3-8b-1xh100-fp8-medusa.yaml")["memory"]
    heads = {c["name"]: c for c in m["components"]}["medusa_heads"]
    # 4 heads × (1 residual block 4096·4096 + 4096 bias, + lm_head 4096·128256), bf16
    assert heads["params"] == 4 * (4096 * 4096 + 4096 + 4096 * 128256)
    assert heads["bytes"] == heads["params"] * 2 and heads["dtype"] == "bf16"


def test_pipeline_parallel_counts_the_heavier_stage():
    m = plan("recipes/llama3-70b-tp1-h200-fp8-none.yaml", "parallelism.pp=2", "target.gpus=2", "target.backend=trtllm")["memory"]
    comps = {c["name"]: c["params"] for c in m["components"]}
    assert comps["decoder"] == 40 * 855_638_016
    assert m["kv_bytes_per_token"] == 2 * 40 * 8 * 128
    assert ("embed_tokens" in comps) != ("lm_head" in comps)  # one stage holds one of them
