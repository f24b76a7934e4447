"""Stage keys follow the tools that make a stage's output and, for GPU engines, the GPU they are built for.

The installed versions are the environment's; a different release of a tool is physically absent here,
so these tests stand one in by replacing the version lookup (named `fake` below) — the planner itself runs
unchanged and must give the affected stage, and only it and what depends on it, a new key.
"""

from __future__ import annotations

from importlib import metadata

import pytest

from builder.recipe.loader import load_recipe
from builder.stages import inputs
from builder.stages import keys as plan


def keys(recipe: str, *sets: str) -> dict[str, str]:
    return {s.name: s.key for s in plan.plan_stages(load_recipe(recipe, sets))}


def test_keys_record_the_installed_tool_versions():
    stage = next(s for s in plan.plan_stages(load_recipe("recipes/tiny-llama3.yaml", ())) if s.name == "export")
    assert stage.inputs["tools"]["onnx"] == metadata.version("onnx")
    assert stage.inputs["tools"]["onnxruntime"] == metadata.version("onnxruntime")


@pytest.mark.parametrize(
    "tool,changed",
    [
        ("onnx", {"export", "engine", "repo"}),
        ("nvidia-modelopt", {"quantize", "export", "engine", "repo"}),
        ("tritonclient", {"repo"}),
    ],
)
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
    monkeypatch.setattr(inputs, "gpu_identity", lambda: ["fake NVIDIA H100 80GB HBM3 sm90"])
    after = keys("recipes/tiny-llama3-trtllm-none.yaml")
    assert {s for s in before if before[s] != after[s]} == {"engine", "repo"}
    cpu = keys("recipes/tiny-llama3.yaml")
    monkeypatch.setattr(inputs, "gpu_identity", lambda: ["fake NVIDIA H200 sm90"])
    assert keys("recipes/tiny-llama3.yaml") == cpu  # a CPU engine does not depend on the GPU


def test_checkpoint_identity_is_content_not_file_times(tmp_path, monkeypatch):
    """A fresh clone (new file times) keeps its keys; a changed byte does not."""
    import os
    import shutil

    monkeypatch.setenv("TRTSPEC_HASH_CACHE", str(tmp_path / "hashes.json"))
    src = "tests/fixtures/tiny-llama3/base"
    a, b = tmp_path / "a" / "base", tmp_path / "b" / "base"
    shutil.copytree(src, a)
    shutil.copytree(src, b)
    os.utime(b / "model.safetensors", (1_000_000, 1_000_000))
    ka = inputs.checkpoint_identity(str(a), tmp_path)
    assert ka == inputs.checkpoint_identity(str(b), tmp_path)
    assert inputs.checkpoint_identity(str(a), tmp_path) == ka  # answered from the hash cache
    with open(b / "tokenizer.json", "r+b") as fh:  # same size, one byte different
        first = fh.read(1)
        fh.seek(0)
        fh.write(b"[" if first != b"[" else b"{")
    assert inputs.checkpoint_identity(str(b), tmp_path) != ka
