"""`target.backend: trtllm-llmapi` at `trtspec validate` / `plan`: what TensorRT-LLM's PyTorch flow does not serve is
refused with exit 2 naming the field and upstream's reason; the shipped recipes validate and plan.

Oracles: upstream's rules as the modules cite them (llm_args.py @ 470bb720 `supports_backend`, the EAGLE-3 chain-only
1.2 one-model, NGram's linear tree) and the method registry's own `NotServed` reasons.
"""

from __future__ import annotations

import glob
import json

import pytest

from builder.speculative import registry
from tests.unit.recipe_helpers import run

R8 = "recipes/llama3-8b-1xh100-fp8-llmapi-eagle3.yaml"
NONE8 = "recipes/llama3-8b-1xh100-fp8-llmapi-none.yaml"
DYN = "speculative.tree={type: dynamic, depth: 6, top_k: 10, total_nodes: 60}"
LLMAPI_RECIPES = sorted(glob.glob("recipes/llama3-*-llmapi-*.yaml"))


def refused(args: list[str], field: str, *needles: str) -> str:
    res = run("validate", *args)
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.stderr
    assert f": {field}: " in res.stderr, res.stderr
    for n in needles:
        assert n in res.stderr, res.stderr
    return res.stderr


@pytest.mark.parametrize("method", ["medusa", "eagle", "lookahead"])
def test_methods_the_pytorch_flow_does_not_serve_are_refused_with_upstreams_reason(method):
    recipe = f"recipes/llama3-8b-1xh100-fp8-trtllm-{method}.yaml"  # the engine flow's recipe, on the PyTorch flow
    reason = registry.methods()[method].trtllm.pytorch.reason
    err = refused([recipe, "--set", "target.backend=trtllm-llmapi"], "speculative.method", reason[:40])
    assert "allowed: " in err and "eagle3" in err and "ngram" in err


def test_a_dynamic_tree_on_the_chain_only_release_is_refused_naming_the_later_line():
    refused([R8, "--set", DYN], "speculative.tree", "chain only", "1.4.0rc1")
    assert run("validate", R8, "--set", DYN, "--set", "trtllm.version=1.4.0rc1").exit_code == 0


def test_static_trees_other_than_a_chain_are_refused():
    refused([R8, "--set", "speculative.tree.choices=[[0], [1], [0, 0]]"], "speculative.tree.choices", "chain")


def test_dynamic_tree_beyond_upstreams_bound_is_refused():
    too_many = "speculative.tree={type: dynamic, depth: 2, top_k: 3, total_nodes: 7}"  # > top_k × depth = 6
    refused(
        [R8, "--set", too_many, "--set", "trtllm.version=1.4.0rc1"], "speculative.tree.total_nodes", "allowed: 2..6"
    )


def test_rejection_verification_needs_a_release_that_samples():
    refused([R8, "--set", "speculative.verification=rejection"], "speculative.verification", "greedy")
    assert (
        run(
            "validate",
            R8,
            "--set",
            "speculative.verification=rejection",
            "--set",
            DYN,
            "--set",
            "trtllm.version=1.4.0rc1",
        ).exit_code
        == 0
    )


def test_versions_belong_to_their_flow():
    # the engine flow refuses a PyTorch-flow-only release; both refuse a release in neither table
    refused(
        ["recipes/llama3-8b-1xh100-fp8-trtllm-none.yaml", "--set", "trtllm.version=1.4.0rc1"],
        "trtllm.version",
        "no TensorRT engine path",
    )
    refused([NONE8, "--set", "trtllm.version=1.3.0"], "trtllm.version", "1.4.0rc1")


def test_ngram_candidates_refused_and_adaptive_warned():
    refused(
        ["recipes/llama3-8b-1xh100-fp8-llmapi-ngram.yaml", "--set", "speculative.candidates=2"],
        "speculative.candidates",
        "linear tree",
    )
    res = run("validate", "recipes/llama3-8b-1xh100-fp8-llmapi-ngram.yaml", "--set", "speculative.adaptive=true")
    assert res.exit_code == 0 and "warning:" in res.stderr and "adaptive" in res.stderr


def test_the_recipes_of_each_deployment_ship():
    for deploy in ("llama3-8b-1xh100-fp8", "llama3-70b-tp2-h200-fp8", "llama3-70b-tp4-h100-fp8"):
        assert f"recipes/{deploy}-llmapi-eagle3.yaml" in LLMAPI_RECIPES


@pytest.mark.parametrize("recipe", LLMAPI_RECIPES)
def test_shipped_llmapi_recipes_validate_and_plan(recipe, tmp_path):
    assert run("validate", recipe).exit_code == 0
    res = run("plan", recipe, "--json", "--cache-dir", str(tmp_path))
    assert res.exit_code == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["backend"] == "trtllm-llmapi"
    assert [s["name"] for s in report["stages"]][-2:] == ["checkpoint", "repo"]
    assert "engine" not in [s["name"] for s in report["stages"]]
    assert report["memory"]["fits"]
