"""Process helpers (Linux, standard library only): which processes descend from a server, are in its group, are still
alive (/proc), and signals that tolerate a process already gone (the server, the bench's tools, trtllm-build)."""

from __future__ import annotations

import os
from pathlib import Path


def stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()  # fields from 3 (state) on; comm may hold spaces


def start_time(pid: int) -> float | None:
    f = stat(pid)
    return None if f is None or f[0] == "Z" else float(f[19])  # field 22: starttime


def same_process(pid: int, start: float) -> bool:
    return start_time(pid) == start


def all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid in all_pids():
        f = stat(pid)
        if f is not None:
            children.setdefault(int(f[1]), []).append(pid)  # field 4: ppid
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def group_members(pgid: int) -> list[int]:
    out = []
    for pid in all_pids():
        f = stat(pid)
        if f is not None and f[0] != "Z" and int(f[2]) == pgid:  # field 5: pgrp
            out.append(pid)
    return out


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
