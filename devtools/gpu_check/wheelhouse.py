"""The GPU check's wheelhouse: the packages its steps need that the borrowed GPU machines lack, downloaded here
for their Python (3.12, x86-64 manylinux) and installed there offline.

    scripts/wheelhouse.sh OUTDIR        # python -m devtools.gpu_check.wheelhouse download OUTDIR
    python -m devtools.gpu_check.wheelhouse check OUTDIR

The borrowed machines (/work/.library/device/KINDS.md, "Python packages already there") have torch with CUDA,
Triton, NumPy 2.5, onnx, CPU onnxruntime, PyYAML, click, rich, tqdm, fsspec, safetensors, tokenizers,
transformers, ml_dtypes, pytest — and no pydantic and no nvidia-modelopt, and nothing can be downloaded there.
Without pydantic the trtspec CLI does not import (the FP8 calibration, engine and TensorRT-LLM steps need it);
without modelopt there is no PTQ. So the wheelhouse holds exactly those and what they import that the image
lacks (read from each wheel's Requires-Dist): pydantic's four packages, and modelopt with pulp and omegaconf.

Sizes (Python 3.12 manylinux wheels, measured here):

    pydantic 2.14.4 0.49 MB · pydantic-core 2.50.5 2.26 MB · annotated-types 0.8.0 0.01 MB ·
    typing-inspection 0.4.5 0.01 MB · typing-extensions 4.16.0 0.05 MB · nvidia-modelopt 0.47.0 2.19 MB ·
    pulp 3.3.2 16.39 MB (it bundles the CBC solver) · omegaconf 2.4.0 0.25 MB        total ~21.7 MB (20.7 MiB)

    not carried (the image has them): click 0.13 · rich 0.31 · pyyaml 0.85 · tqdm 0.08 · fsspec 0.22 ·
    safetensors 0.52 · tokenizers 3.27 · ml_dtypes 0.46 · onnx 8.88 · onnxruntime 27.78 · tritonclient 13.96 MB

What travels to a device machine is the working tree (tracked and untracked-not-ignored files: ~36 MiB, the
tiny fixture is 33 MiB of it) plus the carried paths, 64 MiB in all: the wheelhouse's ~21 MiB fits beside the
tree; `check` reports both.

Install (`install`, the runner's first step when a wheelhouse is found): only the wheels whose distribution is
missing here or older than the wheel (a host's own newer pydantic is kept), into a --target folder that goes
first on the steps' PYTHONPATH:

    python -m pip install --no-index --no-deps --no-compile --target SITE WHEEL...

and, where pip itself is missing, by unpacking the wheels into SITE (a wheel is a zip; purelib / platlib of
its .data folder go to SITE too) — enough for these packages, which have no scripts or headers that matter.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from devtools.gpu_check.steps import PASS, REPO, SKIP, Context, Fail, Verdict

PYTHON_VERSION = "3.12"  # the borrowed machines' Python (and NVIDIA's TensorRT-LLM 1.2 containers')
# the device tool's README: pip matches manylinux_2_N exactly, so name every tag the image's glibc accepts
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)
REQUIREMENTS = (
    "pydantic==2.14.4",
    "pydantic-core==2.50.5",  # pydantic 2.14.4 pins it
    "annotated-types==0.8.0",
    "typing-inspection==0.4.5",
    "typing-extensions==4.16.0",  # pydantic-core 2.50 needs >= 4.16
    "nvidia-modelopt==0.47.0",  # the version builder/quantize is written against (pyproject's cpu extra)
    "pulp==3.3.2",  # imported by modelopt.torch at import time
    "omegaconf==2.4.0",  # likewise; needs only PyYAML
)
LIMIT_BYTES = 64 * 2**20  # what one device call carries: working tree + carried paths


def normalize(name: str) -> str:
    """PEP 503 name: lower case, runs of -_. as one '-'."""
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_name_version(path: Path) -> tuple[str, str]:
    """(normalized distribution name, version) from a wheel's file name."""
    parts = path.name[: -len(".whl")].split("-")
    if len(parts) < 5:
        raise ValueError(f"{path.name}: not a wheel file name (name-version[-build]-python-abi-platform.whl)")
    return normalize(parts[0]), parts[1]


def pinned() -> dict[str, str]:
    """{normalized name: version} of REQUIREMENTS."""
    out = {}
    for req in REQUIREMENTS:
        name, _, version = req.partition("==")
        out[normalize(name)] = version
    return out


def download_command(out: Path, python: str = sys.executable) -> list[str]:
    cmd = [
        python,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        PYTHON_VERSION,
        "--implementation",
        "cp",
        "-d",
        str(out),
    ]
    for tag in PLATFORMS:
        cmd += ["--platform", tag]
    return cmd + list(REQUIREMENTS)


def tracked_bytes(repo: Path = REPO) -> int | None:
    """Bytes of what travels to a device machine besides carried paths — the files git tracks and the untracked
    ones it does not ignore; None without git."""
    try:
        names = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=repo,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    total = 0
    for name in names.decode().split("\0"):
        path = repo / name
        if name and path.is_file():
            total += path.stat().st_size
    return total


def check(folder: Path, tree_bytes: int | None = None) -> list[str]:
    """Problems with a wheelhouse folder (empty list: good): one wheel per pinned package at its version, nothing
    else, every wheel usable by CPython 3.12 on x86-64 Linux, and wheelhouse + tracked tree within LIMIT_BYTES."""
    wheels = sorted(folder.glob("*.whl"))
    problems = []
    seen: dict[str, list[str]] = {}
    for w in wheels:
        name, version = wheel_name_version(w)
        seen.setdefault(name, []).append(version)
        tags = w.name[: -len(".whl")].split("-")[-3:]
        py, abi, plat = tags
        if not any(t in ("py3", "cp312") for t in py.split(".")) or abi not in ("none", "abi3", "cp312"):
            problems.append(f"{w.name}: not for CPython {PYTHON_VERSION}")
        if plat != "any" and "x86_64" not in plat:
            problems.append(f"{w.name}: not an x86-64 wheel")
    for name, versions in seen.items():
        if len(versions) > 1:
            problems.append(f"{name}: {len(versions)} versions ({', '.join(versions)}); keep one")
    want = pinned()
    for name, version in want.items():
        if seen.get(name) != [version]:
            problems.append(f"{name}=={version}: missing (have {seen.get(name) or 'none'})")
    problems += [f"{name}: not in REQUIREMENTS" for name in seen if name not in want]
    size = sum(w.stat().st_size for w in wheels)
    if tree_bytes is not None and size + tree_bytes > LIMIT_BYTES:
        problems.append(
            f"wheelhouse {size / 2**20:.1f} MiB + tracked tree {tree_bytes / 2**20:.1f} MiB > "
            f"{LIMIT_BYTES / 2**20:.0f} MiB (one device call's limit)"
        )
    return problems


def installed_version(name: str) -> str | None:
    for candidate in (name, name.replace("-", "_")):
        try:
            return md.version(candidate)
        except md.PackageNotFoundError:
            continue
    return None


def _vt(version: str) -> tuple[int, ...]:
    return tuple(int(m.group()) for m in (re.match(r"\d+", p) for p in version.split(".")) if m)


def choose(wheels: list[Path]) -> tuple[list[Path], list[str]]:
    """(wheels to install, notes on the ones kept from the host): missing here or older here than the wheel."""
    todo, kept = [], []
    for w in wheels:
        name, version = wheel_name_version(w)
        have = installed_version(name)
        if have is not None and _vt(have) >= _vt(version):
            kept.append(f"{name} {have}")
        else:
            todo.append(w)
    return todo, kept


def unpack(wheel: Path, site: Path) -> None:
    """Install a wheel without pip: its files into `site`, its .data/purelib and .data/platlib too."""
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            parts = info.filename.split("/")
            if parts[0].endswith(".data"):
                if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                    continue
                parts = parts[2:]
            dest = site.joinpath(*parts)
            if info.is_dir():
                dest.mkdir(parents=True, exist_ok=True)
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(zf.read(info))


def have_pip(python: str = sys.executable) -> bool:
    return subprocess.run([python, "-m", "pip", "--version"], capture_output=True, check=False).returncode == 0


def install(wheelhouse: Path, site: Path, python: str = sys.executable) -> tuple[list[str], list[str], str]:
    """Install what `choose` picks into `site`; (installed, kept from the host, how)."""
    todo, kept = choose(sorted(wheelhouse.glob("*.whl")))
    if not todo:
        return [], kept, "nothing to install"
    site.mkdir(parents=True, exist_ok=True)
    names = [" ".join(wheel_name_version(w)) for w in todo]
    if have_pip(python):
        cmd = [
            python,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--upgrade",
            "--disable-pip-version-check",
            "--target",
            str(site),
            *map(str, todo),
        ]
        print("$ " + " ".join(cmd))
        subprocess.run(cmd, check=True)
        return names, kept, "pip install --no-index --no-deps --target"
    for w in todo:
        unpack(w, site)
    return names, kept, "unpacked (no pip here)"


def install_step(ctx: Context) -> Verdict:
    folder, site = ctx.params.get("wheelhouse"), Path(ctx.params["site"])
    if not folder:
        return Verdict(SKIP, "no wheelhouse (.whl/ holds no wheels; make one with scripts/wheelhouse.sh .whl)")
    wheelhouse = Path(folder)
    if not any(wheelhouse.glob("*.whl")):
        raise Fail(f"{wheelhouse}: no .whl files")
    t0 = time.monotonic()
    installed, kept, how = install(wheelhouse, site)
    reason = (
        f"{how}: {', '.join(installed) or 'nothing'} into {site}"
        + (f"; kept the host's {', '.join(kept)}" if kept else "")
        + f" ({time.monotonic() - t0:.1f} s)"
    )
    return Verdict(PASS, reason, {"installed": installed, "kept": kept, "site": str(site), "how": how})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="scripts/wheelhouse.sh", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("action", choices=["download", "check", "list"])
    ap.add_argument("folder", nargs="?", default=str(REPO / ".whl"))
    args = ap.parse_args(argv)
    folder = Path(args.folder)
    if args.action == "list":
        print("\n".join(REQUIREMENTS))
        return 0
    if args.action == "download":
        folder.mkdir(parents=True, exist_ok=True)
        want = pinned()
        for stale in folder.glob("*.whl"):  # one version of each: two stop an install
            name, version = wheel_name_version(stale)
            if want.get(name) != version:
                stale.unlink()
        cmd = download_command(folder)
        print("$ " + " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    tree = tracked_bytes()
    wheels = sorted(folder.glob("*.whl"))
    for w in wheels:
        print(f"{w.stat().st_size / 1e6:8.2f} MB  {w.name}")
    size = sum(w.stat().st_size for w in wheels)
    tree_text = "unknown" if tree is None else f"{tree / 2**20:.1f} MiB"
    print(
        f"wheelhouse {size / 2**20:.1f} MiB ({len(wheels)} wheels) + tracked tree {tree_text} "
        f"(limit {LIMIT_BYTES / 2**20:.0f} MiB per device call)"
    )
    problems = check(folder, tree)
    for p in problems:
        print(f"problem: {p}")
    print(
        f"offline install: {sys.executable} -m pip install --no-index --no-deps --no-compile --target SITE "
        f"{folder}/*.whl   (scripts/gpu_check.sh does it when {folder} holds wheels)"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
