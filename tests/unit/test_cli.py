"""CliRunner tests for every command, the shipped recipes, the committed schema, import hygiene."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from builder.recipe.schema import schema_text
from tests.unit.recipe_helpers import run

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p.relative_to(REPO) for p in (REPO / "recipes").glob("*.yaml"))


def test_help_lists_commands():
    result = run("--help")
    assert result.exit_code == 0
    for cmd in ("validate", "plan", "schema"):
        assert cmd in result.output


@pytest.mark.parametrize("cmd", ["validate", "plan", "schema"])
def test_each_command_has_help(cmd):
    result = run(cmd, "--help")
    assert result.exit_code == 0 and "Usage:" in result.output


def test_unknown_command_exits_2():
    assert run("frobnicate").exit_code == 2


@pytest.mark.parametrize("recipe", SHIPPED, ids=str)
def test_shipped_recipes_validate_and_plan(recipe, monkeypatch):
    monkeypatch.chdir(REPO)
    assert run("validate", str(recipe)).exit_code == 0
    result = run("plan", "--json", str(recipe))
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["memory"]["fits"] and report["memory"]["concurrent_sequences"] >= 1
    assert [s["name"] for s in report["stages"]][0] == "load"


def test_plan_table_output(monkeypatch):
    monkeypatch.chdir(REPO)
    result = run("plan", "recipes/llama3-8b-1xh100-fp8-eagle.yaml")
    assert result.exit_code == 0
    assert "KV bytes per token" in result.output and "export" in result.output


def test_cache_keys_change_with_their_inputs_only(monkeypatch):
    monkeypatch.chdir(REPO)

    def keys(*sets):
        args = ["plan", "--json", "recipes/llama3-8b-1xh100-fp8-eagle.yaml"]
        for s in sets:
            args += ["--set", s]
        return {s["name"]: s["key"] for s in json.loads(run(*args).stdout)["stages"]}

    base = keys()
    triton_only = keys("triton.max_queue_delay_us=500")
    assert {k for k in base if base[k] != triton_only[k]} == {"repo"}
    build = keys("build.max_batch_size=8")
    assert {k for k in base if base[k] != build[k]} == {"export", "engine", "repo"}
    assert keys() == base  # deterministic


def test_schema_command_matches_committed_file():
    result = run("schema")
    assert result.exit_code == 0
    committed = (REPO / "recipes" / "schema.json").read_text()
    assert result.output == committed == schema_text(), "run `trtspec schema -o recipes/schema.json`"


def test_every_schema_field_is_documented():
    schema = json.loads(schema_text())
    missing = []
    for name, definition in [("Recipe", schema), *schema.get("$defs", {}).items()]:
        for field, prop in definition.get("properties", {}).items():
            if "description" not in prop:
                missing.append(f"{name}.{field}")
    assert not missing, missing


def test_import_builder_is_light():
    code = (
        "import sys, builder, builder.cli, builder.recipe.checks, builder.plan.report, builder.commands.recipe_cmds;"
        "heavy = [m for m in ('torch', 'tensorrt', 'tensorrt_llm', 'triton', 'onnx', 'onnxruntime', 'transformers')"
        " if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


def test_validate_and_plan_import_no_torch(tmp_path):
    code = (
        "import sys; from builder.cli import cli;"
        "\ntry: cli(['plan', 'recipes/llama3-8b-1xh100-fp8-eagle.yaml', '--json'])\nexcept SystemExit: pass"
        "\nprint('torch' in sys.modules, file=sys.stderr)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.stderr.strip().splitlines()[-1] == "False"
