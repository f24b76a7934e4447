"""A speculative method from outside trtspec, end to end: validate → plan → build → generate → serve.

The toy method "repeat" (draft the newest token `length` times, tests/fixtures/methods/site/trtspec_repeat) is
installed the way any distribution installs one: a package plus a `.dist-info` whose entry_points.txt registers it
in the group `trtspec.methods`, found through sys.path (PYTHONPATH here). No file of builder/, plugins/ or
triton_repo/ names it. Oracles: plain greedy decoding of the same engine (`--method none`: speculation is lossless
only if every token equals it), the drafter's own arithmetic (a chain of `length` per step), and the real
tritonserver, started without the package on its path, answering what `trtspec generate` printed.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import http_generate

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "tests" / "fixtures" / "methods" / "site"
RECIPE = REPO / "tests" / "fixtures" / "methods" / "tiny-llama3-repeat.yaml"
REPEATED = ",".join(["222"] * 24)  # the tiny fixture's greedy continuation of this repeats token 222


def trtspec(*args: str, installed: bool = True, cache: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if installed:
        env["PYTHONPATH"] = str(SITE)
    if cache is not None:
        env["TRTSPEC_CACHE_DIR"] = str(cache)
    return subprocess.run(
        [sys.executable, "-m", "builder.cli", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    cache = tmp_path_factory.mktemp("plugin-cache")
    res = trtspec("build", str(RECIPE), "--cache-dir", str(cache), "--json", "--quiet")
    assert res.returncode == 0, res.stdout + res.stderr
    return cache


def test_no_package_file_names_the_toy_method():
    for root in ("builder", "plugins", "triton_repo"):
        for path in (REPO / root).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            names = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
            assert not names & {"repeat", "trtspec_repeat"}, path


def test_validate_and_plan_know_the_installed_method_only_when_installed():
    ok = trtspec("validate", str(RECIPE))
    assert ok.returncode == 0, ok.stderr
    bad = trtspec("validate", str(RECIPE), "--set", "speculative.length=0")
    assert bad.returncode == 2 and "speculative.length" in bad.stderr + bad.stdout and "Traceback" not in bad.stderr
    absent = trtspec("validate", str(RECIPE), installed=False)
    out = absent.stdout + absent.stderr
    assert absent.returncode == 2 and "speculative" in out and "repeat" in out and "Traceback" not in out
    plan = trtspec("plan", str(RECIPE), "--json")
    assert plan.returncode == 0, plan.stderr
    doc = json.loads(plan.stdout)
    assert doc["method"] == "repeat" and doc["max_draft_len"] == 3  # its Facts: a chain of `length` nodes
    assert [st["name"] for st in doc["stages"]][:4] == ["load", "export", "engine", "repo"]


def test_build_stores_the_methods_own_config_and_generate_is_lossless(built):
    (engine,) = (built / "engine").iterdir()
    meta = json.loads((engine / "engine.json").read_text())
    assert meta["drafter"] == {"method": "repeat", "length": 3, "verification": "rejection"}
    spec = trtspec("generate", str(RECIPE), "--prompt-ids", REPEATED, "--max-new-tokens", "32", "--json", cache=built)
    plain = trtspec(
        "generate",
        str(RECIPE),
        "--prompt-ids",
        REPEATED,
        "--max-new-tokens",
        "32",
        "--json",
        "--method",
        "none",
        cache=built,
    )
    assert spec.returncode == 0 and plain.returncode == 0, spec.stderr + plain.stderr
    s, p = (json.loads(r.stdout.strip().splitlines()[-1]) for r in (spec, plain))
    assert s["method"] == "repeat(3)" and p["method"] == "none"
    assert s["token_ids"] == p["token_ids"]  # lossless: plain greedy decoding's tokens
    # the drafter's arithmetic: each step drafts its root 3 times, accepts the run of the root that follows it in
    # the output (at most 3), then emits a bonus token; the last step may be cut by max_new_tokens
    out, pos, want = s["token_ids"], 0, []
    while pos < len(out) - 1:
        run = 0
        while run < 3 and pos + 1 + run < len(out) and out[pos + 1 + run] == out[pos]:
            run += 1
        want.append(run)
        pos += run + 1
    assert s["accepted_per_step"][:-1] == want[: len(s["accepted_per_step"]) - 1] and sum(want) > 0


def test_the_served_repository_carries_the_method_and_answers_as_generate(built, serve):
    (repo,) = (built / "repo").iterdir()
    runtime = repo / "spec_decoder" / "1" / "trtspec_runtime"
    assert (runtime / "trtspec_repeat" / "method.py").read_bytes() == (
        SITE / "trtspec_repeat" / "method.py"
    ).read_bytes()
    (dist,) = runtime.glob("*.dist-info")
    assert (dist / "entry_points.txt").read_text() == "[trtspec.methods]\nrepeat = trtspec_repeat.method:METHOD\n"
    manifest = json.loads((runtime / "runtime.json").read_text())
    assert [c["method"] for c in manifest["carried"]] == ["repeat"]
    prompt = "x = [0, 0, 0, 0, 0"
    oracle = trtspec("generate", str(RECIPE), "--prompt", prompt, "--max-new-tokens", "24", "--json", cache=built)
    assert oracle.returncode == 0, oracle.stderr
    want = json.loads(oracle.stdout.strip().splitlines()[-1])
    assert "PYTHONPATH" not in os.environ or str(SITE) not in os.environ["PYTHONPATH"]  # the server finds no package
    server = serve(repo)
    status, body = http_generate(server, "tiny_llama3", {"text_input": prompt, "max_tokens": 24})
    assert status == 200, body
    assert body["text_output"] == want["text"]
    assert body["steps"] == want["steps"] and body["drafted_tokens"] == 3 * want["steps"]  # repeat(3) drafted
