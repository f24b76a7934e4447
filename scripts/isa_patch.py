#!/usr/bin/env python3
"""Patched copies of the libraries that pick their kernels from CPUID, for scripts/with_isa.sh on a machine
that cannot trap CPUID (no Linux CPUID faulting: e.g. a Firecracker microVM). Not used where it can.

Every CPUID (0F A2) and XGETBV (0F 01 D0) instruction in a library's code is found by disassembly
(binutils' objdump) and its first byte replaced by INT3 (CC): the instruction now traps (SIGTRAP) and
scripts/cpu_mask.c, preloaded, runs the real one, clears what the chosen level hides (CPUID's feature bits;
XGETBV's AVX-512 state bits, so code that checks the OS's support sees none either) and steps over it. The
byte after the INT3 is the original instruction's second byte, which is how the handler knows the site is
ours (CC A2, CC 01 D0) and not some other breakpoint. Kernels then run natively, at full speed, on the smaller
ISA's code paths; only those start-up calls trap.

    .venv/bin/python scripts/isa_patch.py site DEST      a site-packages folder for PYTHONPATH: copies of
                                                         onnxruntime, onnxruntime_genai and numpy (with its
                                                         OpenBLAS), their libraries patched (cached: made
                                                         again only when those packages change)
    .venv/bin/python scripts/isa_patch.py file SRC DEST  one ELF file (an executable or a shared library)

What it reaches: the copied packages (ONNX Runtime's MLAS and cpuinfo, GenAI's library, NumPy's dispatch and
its OpenBLAS). PyTorch is too big to copy per run: with_isa.sh pins its kernels with ATEN_CPU_CAPABILITY; the
rest of it (oneDNN) and anything else native — tritonserver — sees the real CPU.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PACKAGES = ("onnxruntime", "onnxruntime_genai", "numpy")  # (+ each one's bundled libraries, NAME.libs)
INSN = {"cpuid": b"\x0f\xa2", "xgetbv": b"\x0f\x01\xd0"}
INT3 = 0xCC
_LINE = re.compile(r"^\s*([0-9a-f]+):\s+((?:[0-9a-f]{2} )+)\s*(cpuid|xgetbv)\s*$")


class PatchError(RuntimeError):
    pass


def _sections(path: Path) -> list[tuple[int, int, int]]:
    """(VMA, file offset, size) of each section objdump lists."""
    out = subprocess.run(["objdump", "-h", str(path)], capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 6 and f[0].isdigit():
            rows.append((int(f[3], 16), int(f[5], 16), int(f[2], 16)))
    return rows


def sites(path: Path) -> list[tuple[int, str]]:
    """(file offset, mnemonic) of every CPUID / XGETBV instruction in the file's code."""
    if shutil.which("objdump") is None:
        raise PatchError("needs objdump (Debian package binutils)")
    dis = subprocess.Popen(["objdump", "-d", str(path)], stdout=subprocess.PIPE)
    grep = subprocess.run(["grep", "-E", r"\s(cpuid|xgetbv)\s*$"], stdin=dis.stdout, capture_output=True, text=True)
    if dis.stdout is not None:
        dis.stdout.close()
    if dis.wait() != 0 or grep.returncode > 1:  # (grep: 1 = no line matched)
        raise PatchError(f"objdump could not disassemble {path}")
    secs = _sections(path)
    found = []
    for line in grep.stdout.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        va, raw, name = int(m.group(1), 16), bytes.fromhex(m.group(2).replace(" ", "")), m.group(3)
        if raw != INSN[name]:
            continue  # (a prefixed form: none seen; left alone)
        for vma, off, size in secs:
            if vma <= va < vma + size:
                found.append((va - vma + off, name))
                break
    return found


def patch_file(src: Path, dest: Path) -> int:
    """Copy `src` to `dest` with every CPUID / XGETBV made to trap; the number of sites patched."""
    data = bytearray(src.read_bytes())
    found = sites(src)
    for off, name in found:
        if bytes(data[off : off + len(INSN[name])]) != INSN[name]:
            raise PatchError(f"{src}: offset {off:#x} does not hold {name}")
        data[off] = INT3
    tmp = dest.with_name(dest.name + ".part")
    tmp.write_bytes(data)
    os.chmod(tmp, src.stat().st_mode)
    os.replace(tmp, dest)
    return len(found)


def _elf(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _stamp(dirs: list[Path]) -> str:
    """What a made site depends on: this file and every library of the packages (names, sizes, mtimes)."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    for d in dirs:
        for p in sorted(d.rglob("*")):
            if p.is_file() and _elf(p):
                st = p.stat()
                h.update(f"{p.relative_to(d.parent)}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def _dirs() -> list[Path]:
    """The installed PACKAGES' folders, each followed by its bundled libraries' folder (NAME.libs) if any."""
    dirs = []
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue  # (not installed)
        d = Path(list(spec.submodule_search_locations)[0])
        dirs.append(d)
        libs = d.with_name(d.name + ".libs")
        if libs.is_dir():
            dirs.append(libs)
    return dirs


def make_site(dest: Path) -> dict[str, int]:
    """`dest` holding patched copies of PACKAGES (those installed); made again only when they changed. Two
    callers at once (two with_isa.sh runs) take turns: the second finds the first one's site made."""
    dest.mkdir(parents=True, exist_ok=True)
    with open(dest / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _make_site(dest)


def _make_site(dest: Path) -> dict[str, int]:
    dirs = _dirs()
    if not dirs:
        raise PatchError(f"none of {', '.join(PACKAGES)} is installed")
    stamp = _stamp(dirs)
    manifest = dest / "isa_patch.json"
    try:
        made = json.loads(manifest.read_text())
        if made.get("stamp") == stamp:
            return dict(made["patched"])
    except (OSError, ValueError):  # none yet (or unreadable): make it
        pass
    work = Path(tempfile.mkdtemp(prefix=".isa_patch.", dir=dest))
    try:
        jobs = []
        for d in dirs:
            shutil.copytree(d, work / d.name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
            jobs += [
                (d / p.relative_to(work / d.name), p)
                for p in sorted((work / d.name).rglob("*"))
                if p.is_file() and not p.is_symlink() and _elf(p)
            ]
        with ThreadPoolExecutor(max(1, min(4, os.cpu_count() or 1))) as pool:  # (objdump does the work)
            counts = list(pool.map(lambda job: patch_file(*job), jobs))
        patched = {str(p.relative_to(work)): n for (_, p), n in zip(jobs, counts) if n}
        for d in dirs:  # swap in (an interrupted run leaves only the .isa_patch.* work folder, removed below)
            old = dest / d.name
            if old.exists():
                shutil.rmtree(old)
            os.replace(work / d.name, old)
        part = manifest.with_name(manifest.name + ".part")
        part.write_text(json.dumps({"stamp": stamp, "patched": patched}, indent=1))
        os.replace(part, manifest)
        return patched
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str]) -> int:
    try:
        if len(argv) == 2 and argv[0] == "site":
            patched = make_site(Path(argv[1]))
            print(" ".join(f"{k}:{v}" for k, v in sorted(patched.items())))
            return 0
        if len(argv) == 3 and argv[0] == "file":
            print(patch_file(Path(argv[1]), Path(argv[2])))
            return 0
    except (PatchError, OSError, subprocess.CalledProcessError) as e:
        print(f"isa_patch: {e}", file=sys.stderr)
        return 2
    print("usage: isa_patch.py site DEST | isa_patch.py file SRC DEST", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
