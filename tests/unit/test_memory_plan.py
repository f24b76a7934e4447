"""Memory-plan figures against hand-computed values from the published Llama 3 architectures.

Every expected number below is worked out by hand from the architecture (shown inline), not
produced by the code under test. trtspec's own engines (tensorrt, onnxruntime: per-slot KV in the graphs'
real dtypes) have theirs in test_memory_plan_tensorrt.py; here TensorRT-LLM's paged plan and what holds
for every backend.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from builder.plan.drafts import NO_DRAFT, DraftMemory, draft_memory
from builder.recipe.loader import load_recipe
from builder.recipe.resolve import max_draft_len, tree_field
from builder.speculative import registry
from builder.speculative.method import DRAFT_GRAPH, FUSED_HEADS
from tests.unit.recipe_helpers import run

REPO = Path(__file__).resolve().parents[2]


def plan(recipe: str, *sets: str) -> dict:
    args = ["plan", "--json", recipe]
    for s in sets:
        args += ["--set", s]
    result = run(*args)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_llama3_70b_fp8_tp4_h100_trtllm_eagle():
    """TensorRT-LLM: embedding whole on every rank, LM head sharded, one EagleNet per tree level (mc_sim_7b_63:
    4 levels), each with its own embedding table, the draft layer (no input norm, no ln_f), fc and LM head —
    upstream shares none of them (tensorrt_llm/models/eagle/model.py @ 89fd9b74, `EagleNet`); no rejection
    engine. FP8: 5 linears per layer (fused qkv, dense, fc, gate, proj) with two float32 [1] scales each, and
    the KV cache's two (kv_cache_scaling_factor and its reciprocal) on every attention, EagleNets' included."""
    r = plan("recipes/llama3-70b-tp4-h100-fp8-trtllm-eagle.yaml")
    m = r["memory"]
    C, V = 8192, 128256
    # per rank: qkv (64/4 + 2·8/4 heads)·128 rows, dense 8192 × 64·128/4, fc + gate + proj 3 × 28672/4 × 8192
    layer = (16 + 2 * 2) * 128 * C + C * 2048 + 3 * 7168 * C
    assert 4 * layer == 855_638_016  # = one full layer's linears: nothing duplicated at 8 KV heads over 4 ranks
    decoder = 80 * layer + 80 * (5 * 2 * 4 + 2 * 4)
    norms = (2 * 80 + 1) * C * 2
    embed, lm_head = V * C * 2, V // 4 * C * 2
    net = V * C + layer + C + C // 4 * 2 * C + C // 4 + V // 4 * C  # embedding, layer, post norm, fc (+ bias), LM head
    nets = 4 * (net * 2 + 2 * 4)
    comps = {c["name"]: c["bytes"] for c in m["components"]}
    assert comps == {
        "decoder": decoder,
        "norms": norms,
        "embed_tokens": embed,
        "lm_head": lm_head,
        "eagle_nets (× 4)": nets,
    }
    assert nets == 12_486_524_960  # 11.63 GiB per rank: four nets' copies of the embedding dominate
    # KV: 80 target layers + 4 EagleNet layers, 8/4 = 2 KV heads per rank, 128 dims, FP8
    assert m["kv_bytes_per_token"] == 2 * 84 * 2 * 128 == 43_008
    assert r["max_draft_len"] == 63 and m["tokens_per_sequence"] == 4096 + 63


def test_70b_bf16_on_one_h100_is_refused():
    result = run(
        "plan",
        "recipes/llama3-70b-tp1-h200-fp8-none.yaml",
        "--set",
        "quantization.mode=none",
        "--set",
        "target.device=h100",
    )
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
    m = plan(
        "recipes/llama3-70b-tp1-h200-fp8-none.yaml",
        "parallelism.pp=2",
        "target.gpus=2",
        "target.backend=trtllm",
        "quantization.kv_cache=fp8",
    )["memory"]  # (the own-backend deploy keeps a bf16 cache)
    comps = {c["name"]: c["params"] for c in m["components"]}
    assert comps["decoder"] == 40 * 855_638_016
    assert m["kv_bytes_per_token"] == 2 * 40 * 8 * 128
    assert ("embed_tokens" in comps) != ("lm_head" in comps)  # one stage holds one of them


# --- a method's share (`builder.plan.drafts`) -------------------------------------------------------------


@pytest.mark.parametrize("name", ["none", "medusa", "eagle1", "eagle2", "lookahead", "ngram"])
def test_each_share_sizes_what_its_method_exports(name):
    """The share a method names (`Method.memory`) sizes what the method exports: heads fused into the target graph
    (FUSED_HEADS), a separate draft graph (DRAFT_GRAPH), nothing for a method without draft weights — and the plan
    shows exactly that."""
    loaded = load_recipe(REPO / "recipes" / f"tiny-llama3-{name}.yaml")
    recipe = loaded.recipe
    m, share = registry.of(recipe.speculative), draft_memory(recipe.speculative)
    draft_len = max_draft_len(recipe, loaded.dir_of(tree_field(recipe)))
    assert isinstance(share, DraftMemory) and (share is NO_DRAFT) == (m.memory is None) == (m.draft is None)
    assert (share.fused_heads(recipe) > 0) == (m.exports == FUSED_HEADS)
    assert (share.draft_graph_room(recipe, draft_len) > 0) == (m.exports == DRAFT_GRAPH)
    memory = plan(f"recipes/tiny-llama3-{name}.yaml")["memory"]
    names = {c["name"] for c in memory["components"]}
    assert names >= {"decoder", "norms", "embed_tokens", "lm_head", "rope tables"}
    assert ("medusa_heads" in names) == (m.exports == FUSED_HEADS)
    assert ("eagle_draft" in names) == (m.exports == DRAFT_GRAPH) == (memory["draft_kv_bytes_per_token"] > 0)


def test_an_installed_method_without_a_share_plans_the_target_alone():
    """The toy "repeat" method (tests/fixtures/methods/site, found through the entry-point group; memory=None, no
    draft, nothing exported) plans on trtspec's own engines as the target alone — the same plan, byte for byte, as
    n-gram's on the same base (zero weights too, the same 24-node room, rejection graphs) — and TensorRT-LLM, which
    does not serve it, is refused with its reason on speculative.method (exit 2)."""
    gpu = ["target.device=h100", "target.backend=tensorrt", "model.dtype=bf16", "quantization.kv_cache=model_dtype"]
    code = (
        "import json, sys\nfrom click.testing import CliRunner\nfrom builder.cli import cli\nout = []\n"
        "for args in json.loads(sys.argv[1]):\n"
        "    r = CliRunner().invoke(cli, ['plan', '--json', *args])\n"
        "    out.append([r.exit_code, r.stdout if r.exit_code == 0 else r.stderr])\n"
        "print(json.dumps(out))"
    )
    sets = lambda xs: [a for s in xs for a in ("--set", s)]  # noqa: E731
    repeat = str(REPO / "tests" / "fixtures" / "methods" / "tiny-llama3-repeat.yaml")
    runs = [[repeat], [repeat, *sets(gpu)], [repeat, *sets(["target.backend=trtllm", "target.device=h100"])]]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "fixtures" / "methods" / "site"), str(REPO)]),
    }
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(runs)], capture_output=True, text=True, cwd=REPO, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    (cpu_rc, cpu), (gpu_rc, on_gpu), (trtllm_rc, refused) = json.loads(done.stdout)
    assert cpu_rc == gpu_rc == 0, (cpu, on_gpu)
    for out, ngram in (
        (cpu, plan("recipes/tiny-llama3-ngram.yaml")),
        (on_gpu, plan("recipes/tiny-llama3-ngram.yaml", *gpu)),
    ):
        memory = json.loads(out)["memory"]
        target = ["decoder", "norms", "embed_tokens", "lm_head", "rope tables"]
        assert [c["name"] for c in memory["components"]] == target + [f"{n} (rejection engine)" for n in target]
        assert memory["draft_kv_bytes_per_token"] == 0 and "(greedy, rejection)" in memory["layout"]
        assert memory == ngram["memory"]
    assert trtllm_rc == 2 and "speculative.method" in refused and "TensorRT-LLM has no 'repeat' drafter" in refused
