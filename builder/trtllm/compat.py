"""Engine lock: engine.json, written once a TensorRT-LLM engine is built and checked before every launch.

A TensorRT engine runs only under the TensorRT it was built with, and TensorRT-LLM's runtime reads only
engines of its own release (`tensorrt_llm/builder.py` writes `version` into the engine's config.json and
`get_engine_version` reads it back); the kernels are compiled for one compute capability. So the serving
host must have the same TensorRT-LLM release, the same TensorRT version and GPUs of the engine's compute
capability, at least as many as the engine's world size (tp × pp ranks, one GPU each); and the engine files
must be the ones that were built (every file's size and sha256 is in engine.json).

This file is the ONE implementation of engine.json — `trtspec build` on a GPU host (builder/trtllm/engine.py)
and the bundle's build.sh / launch.sh both use it — and it uses only the standard library: `trtspec deploy`
copies it verbatim into the bundle as `check_engine.py`, which runs inside NVIDIA's Triton TRT-LLM container
(where trtspec is not installed):

    python3 check_engine.py preflight --build-json build.json   # before trtllm-build: pinned TRT-LLM, a GPU
    python3 check_engine.py lock ENGINE_DIR --build-json build.json [--checkpoint-dir C] [--output-dir O]
    python3 check_engine.py check ENGINE_DIR [--hashes once|always|never] [--stamp-dir DIR]
    python3 check_engine.py ENGINE_DIR                           # = check (once)

Exit 0: done; exit 2: one line saying what differs.

`check` compares versions and GPUs and every file's presence and size on every launch (cheap: one
nvidia-smi, a stat per file). The sha256 of every file is costly for a large engine. Measured on this
machine (AMD EPYC with SHA-NI, 2 shared cores): hashlib's sha256 runs at 1.77 GB/s per core on data in
memory and 0.85-0.9 GB/s through `sha256_file` on a page-cached 1 GB file (load average ~4.7, other jobs
running). So a 70 GB engine costs 40-80 s of one core; files are hashed in parallel (one thread per file, up
to `HASH_WORKERS`; hashlib releases the GIL), so a 70B tp=4 engine (4 rank files of ~17.5 GB) needs ~10-20 s
of wall time on 4 free cores if the disk keeps up — in practice reading 70 GB sets the time: ~10-25 s from
local NVMe (3-7 GB/s), minutes from a network volume. So by default (`--hashes once`) the hashes are
verified once per host and engine: a stamp keyed by the host (its GPUs' UUIDs, stable across containers;
the hostname where nvidia-smi lists none), the engine folder and the sha256 of engine.json records each
file's size, mtime, ctime and inode; a later launch re-hashes only when the stamp is missing or any of those
changed (a rewrite changes mtime and ctime, and ctime cannot be set back; what `once` cannot see is a change
that keeps all four, e.g. bytes altered on the block device). `always` hashes on every launch; `never` skips
the hashes (sizes are still checked). The stamp lives in a writable folder — the engine itself
is mounted read-only — `--stamp-dir`, else `/trtspec/state` when it is a writable folder (docker-run.sh
mounts a host folder there, k8s.yaml an emptyDir), else `$XDG_CACHE_HOME/trtspec/verified-engines`
(default `~/.cache/...`); when none can be written the launch goes on and says that the next one hashes again.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    from builder.errors import UserError
except ImportError:  # the standalone copy (check_engine.py) inside the serving container: no trtspec there

    class UserError(Exception):  # type: ignore[no-redef]
        def __init__(
            self, message: str, *, location: str | None = None, field: str | None = None, allowed: str | None = None
        ) -> None:
            super().__init__(message)
            self.message, self.location, self.field, self.allowed = message, location, field, allowed


ENGINE_JSON = "engine.json"
LOG_NAME = "trtllm-build.log"  # the engine stage's log (not part of the engine: never hashed)
FORMAT = 1
HASH_POLICIES = ("once", "always", "never")
STATE_MOUNT = "/trtspec/state"  # the writable folder docker-run.sh and k8s.yaml mount for the hash stamps
HASH_WORKERS = 8
_BLOCK = 8 << 20


@dataclass(frozen=True)
class Installed:
    """What a host has: versions (None when absent) and one compute capability (name, UUID) per visible GPU."""

    trtllm: str | None
    tensorrt: str | None
    compute_capabilities: tuple[tuple[int, int], ...]
    gpu_names: tuple[str, ...] = ()
    gpu_uuids: tuple[str, ...] = ()

    def describe(self) -> str:
        ccs = sorted(set(self.compute_capabilities))
        gpus = f"{len(self.compute_capabilities)} GPU(s) {', '.join(sm(c) for c in ccs)}" if ccs else "no GPU"
        return f"TensorRT-LLM {self.trtllm or 'none'} / TensorRT {self.tensorrt or 'none'}, {gpus}"


def sm(cc: tuple[int, int] | list[int]) -> str:
    return f"sm{cc[0]}{cc[1]}"


def _numbers(version: str) -> tuple[int, ...]:
    m = re.match(r"^\d+(?:\.\d+)*", version.strip())
    return tuple(int(x) for x in m.group(0).split(".")) if m else ()


def same_release(built: str, here: str) -> bool:
    """TensorRT-LLM: the same version string (1.2.1 ≠ 1.2.1rc1 ≠ 1.2.0)."""
    return built.strip() == here.strip()


def same_tensorrt(built: str, here: str) -> bool:
    """TensorRT: equal on every component both spell out, and on at least major.minor.patch
    ("10.14.1.48" matches "10.14.1.48" and "10.14.1", never "10.14.0" or "10.13")."""
    a, b = _numbers(built), _numbers(here)
    n = min(len(a), len(b))
    return n >= 3 and a[:n] == b[:n]


def _built(manifest: dict[str, Any]) -> tuple[str, str, tuple[int, int], int]:
    """(TensorRT-LLM, TensorRT, compute capability, world size) the engine was built with (engine.json)."""
    try:
        cc = manifest["gpu"]["compute_capability"]
        return (
            str(manifest["tensorrt_llm"]),
            str(manifest["tensorrt"]),
            (int(cc[0]), int(cc[1])),
            int(manifest["world_size"]),
        )
    except (KeyError, TypeError, ValueError, IndexError):
        raise UserError(
            "engine.json lacks tensorrt_llm / tensorrt / gpu.compute_capability / world_size (not a "
            "trtspec TRT-LLM engine manifest)",
            field="engine.json",
        ) from None


def check_engine(manifest: dict[str, Any], installed: Installed) -> None:
    """UserError (both sides named) unless `installed` can run the engine `manifest` describes."""
    trtllm, trt, cc, world = _built(manifest)
    built = f"engine built with TensorRT-LLM {trtllm} / TensorRT {trt} for {sm(cc)} × {world}"
    here = f"this host has {installed.describe()}"
    problems = []
    if installed.trtllm is None or not same_release(trtllm, installed.trtllm):
        problems.append("TensorRT-LLM differs")
    if installed.tensorrt is None or not same_tensorrt(trt, installed.tensorrt):
        problems.append("TensorRT differs")
    matching = [c for c in installed.compute_capabilities if tuple(c) == cc]
    if len(matching) < world:
        problems.append(f"needs {world} {sm(cc)} GPU(s), found {len(matching)}")
    if problems:
        raise UserError(
            f"{built}; {here} ({'; '.join(problems)}): rebuild the engine on this host's stack, or serve "
            "it in the container it was built for",
            field="engine.json",
        )


def build_problem(trtllm: str, cc: tuple[int, int], installed: Installed) -> str | None:
    """None when `installed` can build an engine of TensorRT-LLM `trtllm` for `cc`; else why not, in one phrase.
    (trtllm-build needs one GPU of the target's compute capability; `--workers` is capped at the visible GPUs.)"""
    if installed.trtllm is None:
        return "TensorRT-LLM is not installed here (neither its distribution metadata nor tensorrt_llm.__version__)"
    if not same_release(trtllm, installed.trtllm):
        return f"TensorRT-LLM {installed.trtllm} is installed; the engine pins {trtllm}"
    if installed.tensorrt is None:
        return "TensorRT's version cannot be read here (neither its distribution metadata nor tensorrt.__version__)"
    if not installed.compute_capabilities:
        return "no GPU here (nvidia-smi lists none)"
    if tuple(cc) not in [tuple(c) for c in installed.compute_capabilities]:
        return f"the engine targets {sm(cc)}; this host has {installed.describe()}"
    return None


# -- what this host has ------------------------------------------------------------------------------------


def _dist_version(*names: str) -> str | None:
    from importlib import metadata

    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _module_version(name: str) -> str | None:
    """`module.__version__` where the distribution metadata is missing (NVIDIA's containers install from source)."""
    import importlib

    try:
        return str(importlib.import_module(name).__version__)
    except Exception:  # an installed-but-broken GPU library raises anything from ImportError to OSError
        return None


def _query_gpus(fields: str, timeout: float) -> list[list[str]]:
    """`nvidia-smi --query-gpu=FIELDS --format=csv,noheader`, one list of stripped values per GPU; [] without one."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run(
            [exe, f"--query-gpu={fields}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [[v.strip() for v in line.split(",")] for line in out.splitlines() if line.strip()]


def gpus_here(timeout: float = 20.0) -> list[tuple[str, tuple[int, int]]]:
    """(name, compute capability) per visible GPU from `nvidia-smi`; [] without a driver."""
    return parse_gpu_query("\n".join(", ".join(row) for row in _query_gpus("name,compute_cap", timeout)))


def parse_gpu_query(text: str) -> list[tuple[str, tuple[int, int]]]:
    """`nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader` lines, e.g. "NVIDIA H100 80GB HBM3, 9.0"."""
    gpus = []
    for line in text.splitlines():
        name, _, cap = line.rpartition(",")
        m = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", cap)
        if name.strip() and m:
            gpus.append((name.strip(), (int(m.group(1)), int(m.group(2)))))
    return gpus


def installed_here(timeout: float = 20.0) -> Installed:
    """TensorRT-LLM and TensorRT versions (distribution metadata, else `__version__`) and the GPUs here."""
    trtllm = _dist_version("tensorrt_llm", "tensorrt-llm") or _module_version("tensorrt_llm")
    trt = _dist_version("tensorrt", "tensorrt-cu12", "tensorrt-cu13", "tensorrt-cu12-bindings") or _module_version(
        "tensorrt"
    )
    gpus = []
    for row in _query_gpus("name,compute_cap,uuid", timeout):
        m = re.fullmatch(r"(\d+)\.(\d+)", row[1]) if len(row) == 3 else None
        if m and row[0]:
            gpus.append((row[0], (int(m.group(1)), int(m.group(2))), row[2]))
    return Installed(trtllm, trt, tuple(g[1] for g in gpus), tuple(g[0] for g in gpus), tuple(g[2] for g in gpus))


# -- engine.json: write ------------------------------------------------------------------------------------


def expected_files(world_size: int) -> list[str]:
    """What trtllm-build leaves per engine folder (tensorrt_llm/builder.py Engine.save: config.json + one
    rank{N}.engine per rank; rank{N}_managed_weights.safetensors too with --fast_build, hashed like the rest)."""
    return ["config.json", *(f"rank{r}.engine" for r in range(world_size))]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    buf = bytearray(_BLOCK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as fh:
        while n := fh.readinto(buf):
            h.update(view[:n])  # hashlib releases the GIL on large blocks: files hash in parallel threads
    return h.hexdigest()


def hash_files(paths: list[Path]) -> dict[Path, str]:
    """sha256 of each path, largest first, one thread per file (up to HASH_WORKERS)."""
    order = sorted(paths, key=lambda p: -p.stat().st_size)
    workers = max(1, min(len(order), os.cpu_count() or 1, HASH_WORKERS))
    with ThreadPoolExecutor(workers) as pool:
        return dict(zip(order, pool.map(sha256_file, order)))


def engine_files(engine_dir: Path) -> list[Path]:
    """The engine's files (every file below engine_dir but engine.json, the build log and lock temp files)."""
    skip = (ENGINE_JSON, LOG_NAME)
    return [
        p
        for p in sorted(Path(engine_dir).rglob("*"))
        if p.is_file() and p.name not in skip and not p.name.startswith(f".{ENGINE_JSON}")
    ]


def file_entries(engine_dir: Path) -> list[dict[str, Any]]:
    files = engine_files(engine_dir)
    digests = hash_files(files)
    return [
        {"path": p.relative_to(engine_dir).as_posix(), "bytes": p.stat().st_size, "sha256": digests[p]} for p in files
    ]


def build_with_dirs(
    build: dict[str, Any], checkpoint_dir: str | None = None, output_dir: str | None = None
) -> dict[str, Any]:
    """A build manifest (build.json, `BuildCommand.manifest()`) with the folders trtllm-build really read/wrote."""
    new = {"--checkpoint_dir": checkpoint_dir, "--output_dir": output_dir}
    out = json.loads(json.dumps(build))
    argv = out.get("argv", [])
    for i, word in enumerate(argv[:-1]):
        if new.get(word) is not None:
            argv[i + 1] = new[word]
    for f in out.get("flags", []):
        if new.get(f.get("flag")) is not None:
            f["value"] = new[f["flag"]]
    return out


def lock_manifest(build: dict[str, Any], engine_dir: Path, installed: Installed) -> dict[str, Any]:
    """engine.json for a built engine folder: the stack that built it, the target, the build manifest, every file
    hashed. UserError when this host cannot say what built it or trtllm-build left a rank out."""
    target = build["target"]
    cc = (int(target["compute_capability"][0]), int(target["compute_capability"][1]))
    if installed.trtllm is None or installed.tensorrt is None:
        raise UserError(f"cannot describe the engine: this host reports {installed.describe()}")
    index = next((i for i, c in enumerate(installed.compute_capabilities) if tuple(c) == cc), None)
    if index is None:
        raise UserError(f"cannot describe the engine: built for {sm(cc)}, this host has {installed.describe()}")
    missing = [f for f in expected_files(int(target["world_size"])) if not (Path(engine_dir) / f).is_file()]
    if missing:
        raise UserError(f"trtllm-build left {engine_dir} without {', '.join(missing)}", field="files")
    name = installed.gpu_names[index] if index < len(installed.gpu_names) else target["gpu"]
    return {
        "format": FORMAT,
        "backend": "trtllm",
        "tensorrt_llm": installed.trtllm,
        "tensorrt": installed.tensorrt,
        "gpu": {"name": name, "compute_capability": list(cc), "device": target["device"]},
        "world_size": target["world_size"],
        "tp": target["tp"],
        "pp": target["pp"],
        "build": build,
        "files": file_entries(engine_dir),
    }


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_lock(engine_dir: Path, manifest: dict[str, Any]) -> Path:
    """engine_dir/engine.json, written to a temp name and renamed."""
    path = Path(engine_dir) / ENGINE_JSON
    _write_atomic(path, json.dumps(manifest, indent=2) + "\n")
    return path


# -- engine.json: check ------------------------------------------------------------------------------------


def read_manifest(engine_dir: Path) -> dict[str, Any]:
    return json.loads(_read_lock(engine_dir)[0])


def _read_lock(engine_dir: Path) -> tuple[bytes, dict[str, Any]]:
    """(engine.json's bytes, its content) — UserError when missing, not JSON or not a trtllm lock."""
    path = Path(engine_dir) / ENGINE_JSON
    try:
        raw = path.read_bytes()
        data = json.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        raise UserError(
            f"no {ENGINE_JSON} in {engine_dir} (not a trtspec TRT-LLM engine folder: build it with "
            "bundle/build.sh or `trtspec build`)"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("backend") != "trtllm":
        raise UserError(f"{path}: backend is not trtllm", field="backend", allowed="trtllm")
    return raw, data


def _listed(engine_dir: Path, manifest: dict[str, Any]) -> list[dict[str, Any]]:
    files = manifest.get("files")
    if not isinstance(files, list) or not all(isinstance(f, dict) and isinstance(f.get("path"), str) for f in files):
        raise UserError(f"{engine_dir}/{ENGINE_JSON}: no files list", field="files")
    listed = {f["path"] for f in files}
    for name in expected_files(int(manifest.get("world_size") or 0)):
        if name not in listed:
            raise UserError(f"{engine_dir}/{ENGINE_JSON} does not list {name}", field="files")
    return files


def verify_files(engine_dir: Path, manifest: dict[str, Any], hashes: bool = True) -> int:
    """Every file engine.json lists is present with its size (and its sha256 if `hashes`), one rank engine per
    rank; UserError naming the first difference. Returns the bytes hashed."""
    files = _listed(engine_dir, manifest)
    for f in files:
        path = Path(engine_dir) / f["path"]
        if not path.is_file():
            raise UserError(f"{path} is missing (engine.json lists it)", field="files")
        if path.stat().st_size != f.get("bytes"):
            raise UserError(
                f"{path}: {path.stat().st_size} bytes, engine.json says {f.get('bytes')} (changed since "
                "the build: rebuild or restore it)",
                field="files",
            )
    if not hashes:
        return 0
    paths = {Path(engine_dir) / f["path"]: f for f in files}
    for path, digest in sorted(hash_files(list(paths)).items()):
        if digest != paths[path].get("sha256"):
            raise UserError(
                f"{path}: sha256 differs from engine.json (changed since the build: rebuild or restore it)",
                field="files",
            )
    return sum(int(f["bytes"]) for f in files)


def host_id(installed: Installed) -> str:
    """The host as the stamp knows it: its GPUs' UUIDs (the same in every container on it), else the hostname."""
    return "gpus:" + ",".join(sorted(installed.gpu_uuids)) if installed.gpu_uuids else "host:" + socket.gethostname()


def default_stamp_dir() -> Path:
    """/trtspec/state when it is a writable folder (docker-run.sh, k8s.yaml), else the user's cache."""
    if os.path.isdir(STATE_MOUNT) and os.access(STATE_MOUNT, os.W_OK):
        return Path(STATE_MOUNT)
    cache = os.environ.get("XDG_CACHE_HOME") or (
        os.path.join(os.environ["HOME"], ".cache") if os.environ.get("HOME") else tempfile.gettempdir()
    )
    return Path(cache) / "trtspec" / "verified-engines"


def _stats(engine_dir: Path, files: list[dict[str, Any]]) -> dict[str, list[int]]:
    out = {}
    for f in files:
        st = (Path(engine_dir) / f["path"]).stat()
        out[f["path"]] = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
    return out


def stamp_path(stamp_dir: Path, host: str, engine_dir: Path, lock_sha256: str) -> Path:
    key = hashlib.sha256(f"{host}\0{os.path.realpath(engine_dir)}\0{lock_sha256}".encode()).hexdigest()[:32]
    return Path(stamp_dir) / f"{key}.json"


def verify_engine(
    engine_dir: Path, policy: str = "once", stamp_dir: Path | None = None, installed: Installed | None = None
) -> str:
    """The launch check: versions and GPUs, every file's presence and size, and the sha256 per `policy`
    (module docstring). UserError naming the first difference; else a sentence saying what was verified."""
    if policy not in HASH_POLICIES:
        raise UserError(f"unknown hash policy {policy!r}", field="VERIFY_HASHES", allowed=", ".join(HASH_POLICIES))
    raw, manifest = _read_lock(engine_dir)
    here = installed if installed is not None else installed_here()
    check_engine(manifest, here)
    verify_files(engine_dir, manifest, hashes=False)
    head = f"{engine_dir} matches this host ({here.describe()}); sizes of {len(manifest['files'])} files checked"
    if policy == "never":
        return f"{head}; sha256 not verified (VERIFY_HASHES=never)"
    lock_sha = hashlib.sha256(raw).hexdigest()
    stamp = stamp_path(stamp_dir or default_stamp_dir(), host_id(here), engine_dir, lock_sha)
    stats = _stats(engine_dir, manifest["files"])
    if policy == "once" and _stamp_matches(stamp, lock_sha, stats):
        return f"{head}; sha256 verified on this host before, files unchanged since (stamp {stamp})"
    t0 = time.monotonic()
    n = verify_files(engine_dir, manifest, hashes=True)
    dt = time.monotonic() - t0
    said = f"{head}; sha256 of {len(manifest['files'])} files ({n / 1e9:.2f} GB) verified in {dt:.1f} s"
    record = {
        "format": 1,
        "host": host_id(here),
        "engine_dir": os.path.realpath(engine_dir),
        "engine_json_sha256": lock_sha,
        "verified_unix": int(time.time()),
        "files": stats,
    }
    try:
        stamp.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic(stamp, json.dumps(record, indent=1) + "\n")
    except OSError as exc:
        return f"{said}; stamp not written ({stamp}: {exc.strerror}), so the next launch hashes again"
    return said


def _stamp_matches(stamp: Path, lock_sha: str, stats: dict[str, list[int]]) -> bool:
    try:
        data = json.loads(stamp.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("engine_json_sha256") == lock_sha and data.get("files") == stats


# -- command line (check_engine.py) ------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="check_engine.py", description="TensorRT-LLM engine lock (engine.json).")
    sub = p.add_subparsers(dest="mode", required=True)
    pre = sub.add_parser("preflight", help="can this host build the engine build.json describes?")
    pre.add_argument("--build-json", required=True, type=Path)
    lock = sub.add_parser("lock", help="write ENGINE_DIR/engine.json after trtllm-build")
    lock.add_argument("engine_dir", type=Path)
    lock.add_argument("--build-json", required=True, type=Path)
    lock.add_argument("--checkpoint-dir", help="the checkpoint folder trtllm-build read (recorded)")
    lock.add_argument("--output-dir", help="the engine folder as it will be served from (recorded)")
    check = sub.add_parser("check", help="can this host serve ENGINE_DIR, and are its files the built ones?")
    check.add_argument("engine_dir", type=Path)
    check.add_argument("--hashes", default="once", choices=HASH_POLICIES)
    check.add_argument("--stamp-dir", default="", help="where hash stamps go (empty: default_stamp_dir)")
    return p


def _read_build(path: Path) -> dict[str, Any]:
    try:
        build = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: not a trtspec build.json ({exc})") from None
    target = build.get("target") if isinstance(build, dict) else None
    keys = ("device", "gpu", "compute_capability", "tp", "pp", "world_size")
    if not isinstance(target, dict) or not all(k in target for k in keys) or "tensorrt_llm" not in build:
        raise UserError(f"{path}: not a trtspec build.json (needs tensorrt_llm and target.{{{', '.join(keys)}}})")
    return build


def _run(args: argparse.Namespace) -> str:
    if args.mode == "check":
        return verify_engine(args.engine_dir, args.hashes, Path(args.stamp_dir) if args.stamp_dir else None)
    build = _read_build(args.build_json)
    here = installed_here()
    if args.mode == "preflight":
        target = build["target"]
        problem = build_problem(build["tensorrt_llm"], tuple(target["compute_capability"]), here)
        if problem is not None:
            raise UserError(
                f"cannot build this engine here: {problem} (run build.sh inside the recipe's container "
                "on a host with its GPU)"
            )
        said = f"this host can build it ({here.describe()})"
        if build.get("tensorrt") and not same_tensorrt(str(build["tensorrt"]), str(here.tensorrt)):
            said += f"; note: TensorRT {here.tensorrt} here, trtspec's table lists {build['tensorrt']} for this release"
        return said
    t0 = time.monotonic()
    dirs = {k: os.path.abspath(v) if v else None for k, v in (("c", args.checkpoint_dir), ("o", args.output_dir))}
    manifest = lock_manifest(build_with_dirs(build, dirs["c"], dirs["o"]), args.engine_dir, here)
    write_lock(args.engine_dir, manifest)
    size = sum(f["bytes"] for f in manifest["files"])
    return (
        f"locked {args.engine_dir}/{ENGINE_JSON}: {len(manifest['files'])} files, {size / 1e9:.2f} GB hashed in "
        f"{time.monotonic() - t0:.1f} s; {here.describe()}"
    )


def main(argv: list[str]) -> int:
    """0 when done; 2 and one line why not (see the module docstring for the modes)."""
    if argv and argv[0] not in ("preflight", "lock", "check", "-h", "--help"):
        argv = ["check", *argv]  # `check_engine.py ENGINE_DIR` (the form of earlier bundles)
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse: usage on stderr; --help exits 0
        return 0 if exc.code == 0 else 2
    try:
        said = _run(args)
    except UserError as exc:
        print(f"check_engine: {exc.message}", file=sys.stderr)
        return 2
    print(f"check_engine: {said}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
