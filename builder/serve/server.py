"""One tritonserver process over a model repository: found, started, awaited, stopped with nothing left behind.

    with TritonServer(repo, ports=free_ports()) as server:   # starts and waits until ready
        server.endpoints                                     # {"http": "127.0.0.1:8000", ...}

Where the binary comes from (`find_tritonserver`): a `tritonserver` on PATH (a full install, e.g. an
NGC container, with its own backends), else the one inside the `nvidia-pytriton` wheel. The wheel
ships the Python backend without its stub; the stub is per Python version, so `prepare_backends`
lays out a backend directory with the stub of *this* interpreter's version (as pytriton does).

The stub environment (each trap seen on these machines): the stub embeds libpython and must load the
same libpython as the interpreter whose packages the models import — `LD_LIBRARY_PATH` starts with
this interpreter's LIBDIR (the pyenv one, not Debian's); the wheel's own libraries follow. The stub
ignores `PYTHONPATH` (isolated init), and the repository names no path of this host: its models import
trtspec's code from the runtime the repository carries (`triton_repo.runtime`, resolved only there by the
bootstrap model.py) and third-party packages from the stub's environment laid out here. And the wheel's stub was built with a pybind11 that predates NumPy 2: under NumPy 2
every tensor it hands to Python comes out garbled (a BYTES input of "hello" arrives as nine 0x05
bytes). The embedded interpreter finds its prefix from the first `python3` on PATH, like any
interpreter from its executable, so `stub_python` lays out a minimal virtual environment (a
`python3` link to this interpreter's base executable + pyvenv.cfg) whose site-packages holds a
NumPy 1.x (`STUB_NUMPY`, installed by scripts/setup.sh into the project environment) ahead of the
project environment's site-packages (a .pth file), and puts its bin/ first on the server's PATH.

The server runs in its own session (process group): `stop` sends SIGTERM to the group, waits, then
SIGKILLs the group and every process that was ever seen descending from the server (Python-backend
stubs included), and checks that none is left.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from builder import procs

STACKS_SIGNAL = signal.SIGUSR2  # a trtspec stub dumps its threads' stacks on it (triton_repo/models/model.py)

LOOPBACK = "127.0.0.1"


class ServerError(RuntimeError):
    """The server could not be found, started or made ready (the message carries the log's tail)."""


@dataclass(frozen=True)
class Dist:
    """A tritonserver binary and what it needs around it."""

    binary: Path
    source: str  # "PATH" | "nvidia-pytriton wheel"
    backends: Path | None = None  # the wheel's backends folder, to lay out with the right stub; None: the install's own
    stubs: Path | None = None  # the wheel's python_backend_stubs/<major.minor>/ folders
    libs: tuple[Path, ...] = ()  # the wheel's shared libraries (LD_LIBRARY_PATH)


@dataclass(frozen=True)
class Ports:
    http: int = 8000
    grpc: int = 8001
    metrics: int = 8002


def find_tritonserver() -> Dist | None:
    """The tritonserver to run: one on PATH first, else the nvidia-pytriton wheel's; None if neither."""
    on_path = shutil.which("tritonserver")
    if on_path:
        return Dist(Path(on_path), "PATH")
    try:
        import importlib.util

        spec = importlib.util.find_spec("pytriton")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    dist = root / "tritonserver"
    binary = dist / "bin" / "tritonserver"
    if not binary.is_file():
        return None
    libs = tuple(p for p in (root.parent / "nvidia_pytriton.libs", dist / "external_libs") if p.is_dir())
    return Dist(binary, "nvidia-pytriton wheel", dist / "backends", dist / "python_backend_stubs", libs)


def install_hint() -> str:
    return (
        "no tritonserver found: put one on PATH, or install the serve extra (bash scripts/setup.sh installs "
        "nvidia-pytriton, whose wheel carries Triton Inference Server 2.51)"
    )


def interpreter_libdir() -> Path | None:
    """The directory of the libpython this interpreter runs on (what the stub must load)."""
    libdir = sysconfig.get_config_var("LIBDIR")
    return Path(libdir) if libdir and Path(libdir).is_dir() else None


STUB_NUMPY = "triton-stub-site"  # folder in the project environment (sys.prefix) holding numpy<2 for the stub


def stub_numpy_dir() -> Path:
    return Path(sys.prefix) / STUB_NUMPY


def stub_python(workdir: Path) -> Path:
    """A minimal virtual environment for the embedded stub interpreter; returns its bin/ folder.

    sys.path inside the stub: the stdlib, then this folder's site-packages = NumPy 1.x
    (`stub_numpy_dir()`), then (via trtspec-stub.pth) this interpreter's own site-packages — the third-party
    packages the repository's runtime imports (`triton_repo.runtime.THIRD_PARTY`). A trtspec installed there
    is never used: the bootstrap model.py resolves builder / plugins / triton_repo in the repository only.
    """
    numpy_dir = stub_numpy_dir()
    if not (numpy_dir / "numpy").is_dir():
        raise ServerError(
            f"no NumPy 1.x for the Triton Python-backend stub at {numpy_dir} (the wheel's stub garbles "
            "tensors under NumPy 2): run bash scripts/setup.sh"
        )
    root = workdir / "stub-python"
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = root / "lib" / version / "site-packages"
    (root / "bin").mkdir(parents=True, exist_ok=True)
    site.mkdir(parents=True, exist_ok=True)
    base = Path(getattr(sys, "_base_executable", sys.executable)).resolve()
    for name in ("python3", "python"):
        link = root / "bin" / name
        if not link.is_symlink():
            link.symlink_to(base)
    (root / "pyvenv.cfg").write_text(
        f"home = {base.parent}\ninclude-system-site-packages = false\n"
        f"version = {'.'.join(map(str, sys.version_info[:3]))}\n"
    )
    sites = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    lines = [str(numpy_dir)] + [f"import site; site.addsitedir({p!r})" for p in sites]  # runs their .pth files too
    (site / "trtspec-stub.pth").write_text("\n".join(lines) + "\n")
    return root / "bin"


def stub_env(dist: Dist, stub_bin: Path | None = None, base: dict[str, str] | None = None) -> dict[str, str]:
    """The server's environment: LD_LIBRARY_PATH = this interpreter's LIBDIR, the wheel's libraries, the rest;
    PATH starts with the stub's bin/ (see `stub_python`)."""
    env = dict(os.environ if base is None else base)
    first = [str(p) for p in (interpreter_libdir(), *dist.libs) if p is not None]
    rest = [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p and p not in first]
    env["LD_LIBRARY_PATH"] = ":".join(first + rest)
    if stub_bin is not None:
        env["PATH"] = f"{stub_bin}:{env.get('PATH', '/usr/bin:/bin')}"
    env.pop("PYTHONPATH", None)  # ignored by the stub; its packages come from stub_python's environment
    return env


def prepare_backends(dist: Dist, workdir: Path) -> Path | None:
    """A backend directory whose Python backend has this interpreter's stub (wheel installs only)."""
    if dist.backends is None:
        return None
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = None if dist.stubs is None else dist.stubs / version / "triton_python_backend_stub"
    if stub is None or not stub.is_file():
        raise ServerError(f"the nvidia-pytriton wheel has no Python-backend stub for Python {version}")
    out = workdir / "backends"
    shutil.copytree(dist.backends, out, dirs_exist_ok=True)
    shutil.copy2(stub, out / "python" / "triton_python_backend_stub")
    return out


def shell_unsafe(path: Path) -> str:
    """The characters of `path` a shell would split or expand (whitespace, quotes, $, ;, …), described; "" if none."""
    bad = sorted({c for c in str(path) if c.isspace() or c in "'\"$`\\;&|<>()*?[]#~!{}"})
    return ", ".join(repr(c) for c in bad)


def free_ports(host: str = LOOPBACK) -> Ports:
    """Three ports free right now on `host` (for tests and parallel servers)."""
    socks = []
    try:
        for _ in range(3):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        http, grpc, metrics = (s.getsockname()[1] for s in socks)
        return Ports(http, grpc, metrics)
    finally:
        for s in socks:
            s.close()


@dataclass
class TritonServer:
    """tritonserver over `repo`, bound to `host` (loopback unless told otherwise)."""

    repo: Path
    host: str = LOOPBACK
    ports: Ports = field(default_factory=Ports)
    workdir: Path | None = None  # backends + log; a temp folder (removed on stop) when None
    log_verbose: int = 0
    extra_args: Sequence[str] = ()
    dist: Dist | None = None
    proc: subprocess.Popen | None = field(default=None, init=False)
    _tmp: Path | None = field(default=None, init=False)
    _seen: dict[int, float] = field(default_factory=dict, init=False)  # pid -> create time of every descendant seen

    @property
    def log_path(self) -> Path:
        assert self.workdir is not None, "start() first"
        return self.workdir / "tritonserver.log"

    @property
    def client_host(self) -> str:
        return LOOPBACK if self.host in ("0.0.0.0", "") else "[::1]" if self.host == "::" else self.host

    @property
    def endpoints(self) -> dict[str, str]:
        h = self.client_host
        return {
            "http": f"{h}:{self.ports.http}",
            "grpc": f"{h}:{self.ports.grpc}",
            "metrics": f"http://{h}:{self.ports.metrics}/metrics",
        }

    def command(self, backends: Path | None) -> list[str]:
        assert self.dist is not None
        args = [
            str(self.dist.binary),
            f"--model-repository={Path(self.repo).resolve()}",
            f"--http-address={self.host}",
            f"--http-port={self.ports.http}",
            f"--grpc-address={self.host}",
            f"--grpc-port={self.ports.grpc}",
            f"--metrics-address={self.host}",
            f"--metrics-port={self.ports.metrics}",
            "--allow-gpu-metrics=false",
            "--exit-on-error=true",
            "--disable-auto-complete-config",
            "--exit-timeout-secs=5",
            f"--log-verbose={self.log_verbose}",
            # explicit model control: a broken spec_decoder unloads itself (Triton 2.51's only way for a Python
            # model to report unready) and the front model reloads it after a crash of its stub
            "--model-control-mode=explicit",
            "--load-model=*",
            # one shared-memory namespace per server: parallel servers on one machine never collide
            f"--backend-config=python,shm-region-prefix-name=trtspec{os.getpid()}x{self.ports.grpc}",
        ]
        if backends is not None:
            args.append(f"--backend-directory={backends}")
        return args + list(self.extra_args)

    def start(self) -> "TritonServer":
        if self.proc is not None:
            raise ServerError("already started")
        if not (Path(self.repo) / "").is_dir():
            raise ServerError(f"no model repository at {self.repo}")
        unsafe = shell_unsafe(Path(self.repo).resolve())
        if unsafe:
            raise ServerError(
                f"the repository path {str(Path(self.repo).resolve())!r} holds {unsafe}: Triton's Python "
                "backend starts each model's stub through `bash -c` with the path unquoted "
                "(python_backend src/stub_launcher.cc), so move the repository to a path without them"
            )
        self.dist = self.dist or find_tritonserver()
        if self.dist is None:
            raise ServerError(install_hint())
        if self.workdir is None:
            self._tmp = self.workdir = Path(tempfile.mkdtemp(prefix="trtspec-serve-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        backends = prepare_backends(self.dist, self.workdir)
        stub_bin = None if backends is None else stub_python(self.workdir)
        log = open(self.log_path, "wb")
        try:
            self.proc = subprocess.Popen(
                self.command(backends),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=stub_env(self.dist, stub_bin),
                start_new_session=True,
            )
        finally:
            log.close()
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ready(self) -> bool:
        try:
            url = f"http://{self.client_host}:{self.ports.http}/v2/health/ready"
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Until the server (all models loaded) answers ready; ServerError with the log's tail otherwise."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._note_children()
            if not self.alive():
                code = None if self.proc is None else self.proc.returncode
                raise ServerError(f"tritonserver exited (code {code}) before it was ready\n{self.log_tail()}")
            if self.ready():
                self._note_children()
                return
            time.sleep(0.2)
        tail = self.log_tail()
        self.stop()
        raise ServerError(f"tritonserver not ready after {timeout:.0f} s\n{tail}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except (OSError, AssertionError):
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:])

    def processes(self) -> list[int]:
        """Pids of the server and every process in its group or seen descending from it, still alive."""
        if self.proc is None:
            return []
        self._note_children()
        pids = set(procs.group_members(self.proc.pid)) | {p for p, t in self._seen.items() if procs.same_process(p, t)}
        if self.proc.poll() is None:
            pids.add(self.proc.pid)
        return sorted(pids)

    def dump_stacks(self) -> list[str]:
        """Ask every Python-backend stub of this server for every thread's Python stack, into the server log
        (SIGUSR2: `faulthandler.register` in triton_repo/models/model.py; the stubs run on). The model files of the
        stubs signalled; the stacks appear in `log_path` within a moment."""
        from triton_repo.watch import stub_models

        if self.proc is None:
            return []
        out = []
        for pid, model in stub_models(Path(self.repo), self.proc.pid).items():
            try:  # only a model that registered the handler: the signal's default action ends a process
                if "faulthandler.register(STACKS_SIGNAL" not in Path(model).read_text(errors="replace"):
                    continue
                os.kill(pid, STACKS_SIGNAL)
            except OSError:
                continue
            out.append(model)
        return out

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM the group, wait up to `timeout`, then SIGKILL the group and every straggler."""
        if self.proc is None:
            return
        self._note_children()
        pgid = self.proc.pid  # start_new_session: the server leads its own group
        procs.signal_group(pgid, signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        deadline = time.monotonic() + 5.0
        while True:
            left = self.processes()
            if not left:
                break
            sig = signal.SIGKILL if time.monotonic() > deadline - 4.0 else signal.SIGTERM
            procs.signal_group(pgid, sig)
            for pid in left:
                procs.kill(pid, sig)
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5)
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> "TritonServer":
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _note_children(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        for pid in procs.descendants(self.proc.pid):
            t = procs.start_time(pid)
            if t is not None:
                self._seen.setdefault(pid, t)
