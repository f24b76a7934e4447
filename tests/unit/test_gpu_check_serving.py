"""`devtools.gpu_check.trtllm.serving`, the server lifecycle both served GPU steps share (`trtllm-<method>`: a
bundle's launch.sh serving Triton; `llmapi-eagle3`: launch.sh running trtllm-serve): on this host with stand-in
launch scripts (bash, named so) — ready, then stopped on leaving, also when the body raises; a script that exits
before it is ready, and one that is not ready in time, are each a `Fail` naming why, with the log's tail printed,
and leave no process behind.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from devtools.gpu_check.steps import Fail
from devtools.gpu_check.trtllm import serving


def standin(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "launch.sh"
    script.write_text(f'#!/usr/bin/env bash\necho "$$" > "{tmp_path}/pid"\n{body}\n')
    return script


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def wait_for(path: Path, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while not path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_ready_then_stopped_on_leaving_even_when_the_body_raises(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    launch = standin(tmp_path, f'echo "HTTP_PORT=$HTTP_PORT"\ntouch "{ready}"\nexec sleep 60')
    env = dict(os.environ, HTTP_PORT="18123")
    with serving(launch, env, tmp_path / "server.log", lambda: wait_for(ready), 30, "stand-in") as server:
        assert server.poll() is None  # serving while the body runs
    assert server.returncode == -signal.SIGTERM
    assert (tmp_path / "server.log").read_text().splitlines() == ["HTTP_PORT=18123"]  # its env, its output
    ready.unlink()
    with pytest.raises(RuntimeError, match="body"):
        with serving(launch, env, tmp_path / "server.log", lambda: wait_for(ready), 30, "stand-in") as server:
            raise RuntimeError("body")
    assert server.returncode == -signal.SIGTERM


def test_a_server_that_exits_before_ready_is_a_fail_with_the_logs_tail(tmp_path: Path, capsys) -> None:
    launch = standin(tmp_path, 'for i in $(seq 0 29); do echo "line$i"; done\nexit 3')
    log = tmp_path / "server.log"
    with pytest.raises(Fail, match=r"stand-in did not become ready \(exit 3\); see .*server.log"):
        with serving(launch, dict(os.environ), log, lambda: time.sleep(1.0) or False, 60, "stand-in"):
            pytest.fail("never ready, so never entered")
    assert capsys.readouterr().out.splitlines() == [f"line{i}" for i in range(10, 30)]  # the last 20 lines


def test_a_server_not_ready_in_time_is_a_fail_and_is_stopped(tmp_path: Path) -> None:
    launch = standin(tmp_path, "exec sleep 60")
    pid_file = tmp_path / "pid"
    with pytest.raises(Fail, match=r"did not become ready \(exit None\)"):
        with serving(launch, dict(os.environ), tmp_path / "server.log", lambda: wait_for(pid_file) and False, 0, "x"):
            pytest.fail("never ready, so never entered")
    assert gone(int(pid_file.read_text()))
