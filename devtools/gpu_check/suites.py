"""GPU test files run as steps (`host-cuda`, `plugin-impl-stream`): pytest in the step's own process, only the
tests marked gpu (`-m gpu`; the project's default `-m 'not slow and not gpu'` is overridden), their outcomes
counted by a small plugin. PASS: at least one passed and none failed; SKIP: everything skipped (the first
reason); FAIL otherwise, naming the failed tests.
"""

from __future__ import annotations

from typing import Any

from devtools.gpu_check.steps import FAIL, PASS, SKIP, Context, Verdict


class _Outcomes:
    def __init__(self) -> None:
        self.passed: list[str] = []
        self.failed: list[str] = []
        self.skipped: list[str] = []

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.when == "call" or report.outcome != "passed":
            if report.passed and report.when == "call":
                self.passed.append(report.nodeid)
            elif report.failed:
                self.failed.append(f"{report.nodeid} ({report.when})")
            elif report.skipped:
                reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
                self.skipped.append(f"{report.nodeid}: {reason}")


def run_pytest(ctx: Context, files: list[str]) -> Verdict:
    import pytest

    outcomes = _Outcomes()
    args = [
        "-q",
        "-p",
        "no:cacheprovider",
        "-o",
        "addopts=",
        "-m",
        "gpu",
        "--rootdir",
        ctx.repo,
        *(f"{ctx.repo}/{f}" for f in files),
    ]
    rc = pytest.main(args, plugins=[outcomes])
    details = {"passed": outcomes.passed, "failed": outcomes.failed, "skipped": outcomes.skipped, "pytest_rc": int(rc)}
    if outcomes.failed or int(rc) not in (0, 5):  # 5: nothing collected
        return Verdict(
            FAIL,
            f"{len(outcomes.failed)} failed, {len(outcomes.passed)} passed (pytest exit {int(rc)}): "
            f"{'; '.join(outcomes.failed)[:600]}",
            details,
        )
    if not outcomes.passed:
        first = outcomes.skipped[0] if outcomes.skipped else "no test collected"
        return Verdict(SKIP, f"nothing ran: {first}", details)
    passed = f"{len(outcomes.passed)} passed, {len(outcomes.skipped)} skipped ({', '.join(files)})"
    return Verdict(PASS, passed, details)


def host_cuda_step(ctx: Context) -> Verdict:
    return run_pytest(ctx, ["tests/gpu/test_tensorrt_host_cuda.py"])


def plugin_impl_step(ctx: Context) -> Verdict:
    return run_pytest(ctx, ["tests/gpu/test_plugin_impl_cuda.py"])
