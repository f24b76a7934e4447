"""Which threads of a stopped process hold a robust mutex (Linux robust futex lists; standard library + ctypes).

Why the fault tests need it: tritonserver 2.51's Python backend (triton-inference-server/python_backend r24.10
@01d0ad82f9f5d63978456e26c8a2a9746a9d68d8, built on Boost 1.79: boostorg/interprocess boost-1.79.0@c4a0467)
shares process-shared `boost::interprocess::interprocess_mutex`es with each stub in the stub's shared-memory
region: the message queues', the shm allocator's, the health mutex, and one per IPC handshake (`mu` of
`ResponseSendMessage`, src/response_sender.cc `ResponseSender::Send`; the parent's side is
`ModelInstanceState::ResponseSendDecoupled` in src/python_be.cc). Boost 1.79 makes them robust
(include/boost/interprocess/sync/posix/pthread_helpers.hpp `mutexattr_wrapper`) and its `lock()` answers
EOWNERDEAD with `throw lock_exception(not_recoverable)` (sync/posix/mutex.hpp). So a stub killed while it
holds one of them makes the server's next lock of it throw — in a destructor (`ScopedDefer`), i.e.
`std::terminate`: tritonserver aborts with "terminate called after throwing an instance of
'boost::interprocess::lock_exception'". Measured (tests/integration/test_triton_faults.py, kill -9 of a
stub streaming a direct request): the server's backtrace runs from the backend's thread pool through
`ResponseSendDecoupled`'s handshake, before any unload or reload was asked for.

The kernel keeps, per thread, the head of the list of robust mutexes it holds (`set_robust_list(2)`; the
head is `struct robust_list_head` of linux/futex.h: next, futex_offset, list_op_pending). A thread holds
none, and is taking or releasing none, when `next` points back at the head and `list_op_pending` is NULL.
Reading another process's list needs ptrace access to it (the stubs descend from the test process).

`kill_between_locks(pid)` SIGKILLs a process at a moment none of its threads holds one: it stops the process
(SIGSTOP), looks, and kills it while it is still stopped (so it never runs again), or lets it run on and looks
again. A stopped process takes and drops no lock before the SIGKILL, so what it holds when looked at is what it
holds when it dies. (SIGSTOP/SIGCONT make no futex or sem_wait fail on Linux >= 2.6.22: signal(7).)
`kill_in_contended_lock(pid, server_pid)` does the opposite, to show the server's abort on demand: it kills the
stub while it holds a mutex of the shared region that one of the server's threads is blocked on (futex(2) in
/proc/PID/task/TID/syscall, the same file offset of the same /dev/shm file).
"""

from __future__ import annotations

import ctypes
import os
import platform
import signal
import struct
import time
from pathlib import Path

_SYSCALLS = {"x86_64": {"get_robust_list": 274, "futex": 202}, "aarch64": {"get_robust_list": 100, "futex": 98}}


def _nr(name: str) -> int:
    nrs = _SYSCALLS.get(platform.machine())
    if nrs is None:
        raise OSError(f"no syscall numbers known for {platform.machine()}")
    return nrs[name]


def _head(tid: int) -> int:
    """The address of thread `tid`'s robust list head (0: none registered)."""
    libc = ctypes.CDLL(None, use_errno=True)
    head, size = ctypes.c_void_p(), ctypes.c_size_t()
    if libc.syscall(ctypes.c_long(_nr("get_robust_list")), ctypes.c_int(tid), ctypes.byref(head), ctypes.byref(size)):
        err = ctypes.get_errno()
        raise OSError(err, f"get_robust_list({tid}): {os.strerror(err)}")
    return head.value or 0


def held(pid: int, limit: int = 64) -> list[int]:
    """The futex words (addresses in `pid`) of the robust mutexes its threads hold, or are taking or releasing
    (`list_op_pending`). Meaningful only while `pid` is stopped (SIGSTOP): a running thread's list changes."""
    out: list[int] = []
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                head = _head(int(task.name))
            except OSError:  # the thread ended meanwhile
                continue
            if not head:
                continue
            mem.seek(head)
            nxt, offset, pending = struct.unpack("<QqQ", mem.read(24))  # struct robust_list_head
            nodes = [pending] if pending else []
            while nxt != head and len(nodes) < limit:
                nodes.append(nxt)
                mem.seek(nxt)
                (nxt,) = struct.unpack("<Q", mem.read(8))
            out += [node + offset for node in nodes]
    return out


def shared(pid: int, addresses: list[int]) -> set[tuple[str, int]]:
    """(file, offset) of each address of `pid` that lies in a shared mapping of a /dev/shm file."""
    maps = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/dev/shm/") and parts[1][3] == "s":
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            maps.append((lo, hi, parts[5], int(parts[2], 16)))
    return {(name, a - lo + off) for a in addresses for lo, hi, name, off in maps if lo <= a < hi}


def blocked_on(pid: int) -> list[int]:
    """The addresses the threads of `pid` wait on in futex(2) right now."""
    nr, out = str(_nr("futex")), []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "syscall").read_text().split()
        except OSError:
            continue
        if len(fields) > 1 and fields[0] == nr:
            out.append(int(fields[1], 16))
    return out


def _stopped(pid: int) -> bool:
    """Every thread of `pid` stopped (or gone)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("T", "t", "Z", "X"):
            return False
    return True


def _looks(pid: int, timeout: float, pause_s: float):
    """Stop `pid`, yield (the caller looks; it may kill `pid` and stop iterating), let it run on, again."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        os.kill(pid, signal.SIGSTOP)
        try:
            while not _stopped(pid):
                time.sleep(0.0002)
            yield
        finally:
            try:
                os.kill(pid, signal.SIGCONT)  # (after the caller's SIGKILL: none, or the process is gone)
            except ProcessLookupError:
                pass
        time.sleep(pause_s)


def kill_between_locks(pid: int, timeout: float = 10.0, pause_s: float = 0.002) -> int:
    """SIGKILL `pid` while it holds no robust mutex (see the module's docstring); how many looks it took.
    AssertionError if it held one at every look for `timeout` seconds (it is then left running)."""
    looks = 0
    for _ in _looks(pid, timeout, pause_s):
        looks += 1
        if not held(pid):
            os.kill(pid, signal.SIGKILL)
            return looks
    raise AssertionError(f"process {pid} held a robust mutex at each of {looks} looks in {timeout} s")


def kill_in_contended_lock(pid: int, server_pid: int, timeout: float = 30.0, pause_s: float = 0.002) -> int | None:
    """SIGKILL `pid` while it holds a shared robust mutex that a thread of `server_pid` is blocked on; how many
    looks it took, or None if that was never seen within `timeout` seconds (`pid` is then left running)."""
    looks = 0
    for _ in _looks(pid, timeout, pause_s):
        looks += 1
        mine = shared(pid, held(pid))
        if mine:
            time.sleep(0.01)  # the server's threads reach the lock meanwhile, if they are headed there
            if mine & shared(server_pid, blocked_on(server_pid)):
                os.kill(pid, signal.SIGKILL)
                return looks
    return None
