"""Stage keys follow the tools that make a stage's output and, for GPU engines, the GPU they are built for.

The installed versions are the environment's; a different release of a tool is physically absent here,
so these tests stand one in by replacing the version lookup (named `fake` below) — the planner itself runs
unchanged and must give the affected stage, and only it and what depends on it, a new key.
"""

from __future__ import annotations

from importlib import metadata

import pytest

from builder.plan import stages as plan
from builder.recipe.loader import load_recipe


def keys(recipe: str, *sets: str) -> dict[str, str]:
    return {s.name: s.key for s in plan.plan_stages(load_recipe(recipe, sets))}


def test_keys_record_the_installed_tool_versions():
    stage = next(s for s in plan.plan_stages(load_recipe("recipes/tiny-llama3.yaml", ())) if s.name == "export")
    assert stage.inputs["tools"]["onnx"] == metadata.version("onnx")
    assert stage.inputs["tools"]["onnxruntime"] == metadata.version("onnxruntime")


@pytest.mark.parametrize("tool,changed", [("onnx", {"export", "engine", "repo"}),
                                          ("nvidia-modelopt", {"quantize", "export", "engine", "repo"}),
                                          ("tritonclient", {"repo"})])
def test_a_tool_upgrade_rebuilds_its_stages_and_their_dependents(monkeypatch, tool, changed):
    before = keys("recipes/tiny-llama3-fp8.yaml")
    real = plan.tool_versions

    def fake_upgraded(*names: str) -> dict[str, str]:
        out = real(*names)
        if tool in names:
            out[tool] = out.get(tool, "0") + ".post999"
        return out

    monkeypatch.setattr(plan, "tool_versions", fake_upgraded)
    after = keys("recipes/tiny-llama3-fp8.yaml")
    assert {s for s in before if before[s] != after[s]} == changed


def test_gpu_engines_are_keyed_by_the_gpu(monkeypatch):
    before = keys("recipes/tiny-llama3-trtllm-none.yaml")
    monkeypatch.setattr(plan, "gpu_identity", lambda: ["fake NVIDIA H100 80GB HBM3 sm90"])
    after = keys("recipes/tiny-llama3-trtllm-none.yaml")
    assert {s for s in before if before[s] != after[s]} == {"engine", "repo"}
    cpu = keys("recipes/tiny-llama3.yaml")
    monkeypatch.setattr(plan, "gpu_identity", lambda: ["fake NVIDIA H200 sm90"])
    assert keys("recipes/tiny-llama3.yaml") == cpu  # a CPU engine does not depend on the GPU
