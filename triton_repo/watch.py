"""Which Python-backend stub processes serve a model, and are they alive (Linux /proc; standard library only).

Triton 2.51's Python backend starts one stub process per model instance, as a child of tritonserver, with
the model file as its first argument (python_backend r24.10 src/stub_launcher.cc: `triton_python_backend_stub
<model_path> <shm region> …`). When a stub dies (kill -9, a crash), requests in flight on it never get
another response and the model still reports ready (python_backend r24.10 src/python_be.cc:
`TRITONBACKEND_ModelInstanceExecute` does not restart decoupled stubs; no readiness hook exists before
2025). The front model, another stub of the same server, watches its backend's stubs with these helpers
and fails its own relays when one ends.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator


def _stat(pid: int) -> list[str] | None:
    """The fields after the command name of /proc/PID/stat (state first), or None if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()


def alive(pid: int, start_time: str) -> bool:
    """The process `pid` that started at `start_time` (clock ticks, /proc stat field 22) still runs (not a zombie)."""
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X") and fields[19] == start_time


def _stubs(model_dir: Path, server_pid: int) -> Iterator[tuple[int, str, str]]:
    """(pid, start time, model file) of the live children of `server_pid` that run a model file under `model_dir`."""
    prefix = str(Path(model_dir).resolve()) + os.sep
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat(int(entry.name))
        if fields is None or int(fields[1]) != server_pid or fields[0] in ("Z", "X"):
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        path = os.path.realpath(argv[1].decode(errors="replace")) if len(argv) > 1 else ""
        if path.startswith(prefix) and path.endswith(".py"):
            yield int(entry.name), fields[19], path


def stubs_of(model_dir: Path, server_pid: int) -> dict[int, str]:
    """pid -> start time of the live children of `server_pid` that run a model file under `model_dir`."""
    return {pid: start for pid, start, _ in _stubs(model_dir, server_pid)}


def stub_models(model_dir: Path, server_pid: int) -> dict[int, str]:
    """pid -> model file of the same processes as `stubs_of`."""
    return {pid: path for pid, _, path in _stubs(model_dir, server_pid)}
