"""The GPU check's wheelhouse (`devtools.gpu_check.wheelhouse`, scripts/wheelhouse.sh): its list and checks on
made-up wheel files, the choice of what to install on a host, the pip-less unpacking; and end to end — the real
Python 3.12 wheelhouse downloaded here (within the 64 MiB a device call carries, beside the tracked tree),
installed offline (--no-index) into a clean Python 3.12 venv, where the check's preflight runs and finds pydantic
from the wheelhouse.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from devtools.gpu_check import wheelhouse as wh

REPO = Path(__file__).resolve().parents[2]
PY312 = Path("/root/.pyenv/versions/3.12.1/bin/python")


def fake_wheel(folder: Path, name: str, version: str, tags: str = "py3-none-any", files: dict | None = None) -> Path:
    path = folder / f"{name.replace('-', '_')}-{version}-{tags}.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for arc, text in (files or {f"{name.replace('-', '_')}/__init__.py": ""}).items():
            zf.writestr(arc, text)
    return path


def pinned_folder(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, version in wh.pinned().items():
        tags = "cp312-cp312-manylinux2014_x86_64" if name == "pydantic-core" else "py3-none-any"
        fake_wheel(folder, name, version, tags)
    return folder


def test_check_accepts_exactly_the_pinned_set_and_names_every_problem(tmp_path):
    folder = pinned_folder(tmp_path / "w")
    assert wh.check(folder, tree_bytes=0) == []
    fake_wheel(folder, "pydantic", "2.0.0")  # a second version
    fake_wheel(folder, "left-pad", "1.0")  # not pinned
    fake_wheel(folder, "numpy", "2.5.2", "cp311-cp311-manylinux2014_x86_64")  # another Python
    fake_wheel(folder, "rich", "15.0.0", "py3-none-macosx_11_0_arm64")  # another machine
    (folder / next(iter(folder.glob("omegaconf-*.whl"))).name).unlink()
    problems = wh.check(folder, tree_bytes=wh.LIMIT_BYTES)
    text = "\n".join(problems)
    for needle in (
        "pydantic: 2 versions (2.0.0, 2.14.4); keep one",
        "left-pad: not in REQUIREMENTS",
        "not for CPython 3.12",
        "not an x86-64 wheel",
        "omegaconf==2.4.0: missing",
        "MiB > 64 MiB (one device call's limit)",
    ):
        assert needle in text, text


def test_download_command_asks_for_binary_python_312_manylinux_wheels_of_the_pins(tmp_path):
    cmd = wh.download_command(tmp_path, "py")
    assert cmd[:4] == ["py", "-m", "pip", "download"] and "--no-deps" in cmd and "--only-binary=:all:" in cmd
    assert cmd[cmd.index("--python-version") + 1] == "3.12" and cmd[cmd.index("-d") + 1] == str(tmp_path)
    platforms = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--platform"]
    assert platforms == list(wh.PLATFORMS) and "manylinux2014_x86_64" in platforms
    assert cmd[-len(wh.REQUIREMENTS) :] == list(wh.REQUIREMENTS)
    assert all("==" in r for r in wh.REQUIREMENTS)  # exact pins: the same wheelhouse every time


def test_only_wheels_the_host_lacks_or_has_older_are_installed(tmp_path):
    from importlib.metadata import version

    here = version("pytest")
    same = fake_wheel(tmp_path, "pytest", here)
    newer = fake_wheel(tmp_path, "pytest", "999.0")
    absent = fake_wheel(tmp_path, "surely-not-installed-pkg", "1.0")
    todo, kept = wh.choose([same, newer, absent])
    assert todo == [newer, absent] and kept == [f"pytest {here}"]


def test_unpack_installs_a_wheel_without_pip(tmp_path):
    files = {
        "tinypkg/__init__.py": "VALUE = 7\n",
        "tinypkg-1.0.dist-info/METADATA": "Name: tinypkg\nVersion: 1.0\n",
        "tinypkg-1.0.data/purelib/tinyextra.py": "X = 1\n",
        "tinypkg-1.0.data/scripts/tool": "#!/bin/sh\n",
    }
    wheel = fake_wheel(tmp_path, "tinypkg", "1.0", files=files)
    site = tmp_path / "site"
    wh.unpack(wheel, site)
    assert (site / "tinypkg" / "__init__.py").read_text() == "VALUE = 7\n" and (site / "tinyextra.py").is_file()
    assert not (site / "tool").exists() and (site / "tinypkg-1.0.dist-info" / "METADATA").is_file()
    res = subprocess.run(
        [sys.executable, "-c", "import tinypkg, tinyextra; print(tinypkg.VALUE + tinyextra.X)"],
        env={"PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.stdout.strip() == "8", res.stderr


def test_install_without_pip_unpacks_what_the_host_lacks(tmp_path):
    from importlib.metadata import version

    folder = tmp_path / "w"
    folder.mkdir()
    fake_wheel(folder, "surely-not-installed-pkg", "1.0")
    fake_wheel(folder, "pytest", version("pytest"))  # the host has it: kept
    installed, kept, how = wh.install(folder, tmp_path / "site", python="/bin/false")  # an interpreter without pip
    assert how == "unpacked (no pip here)" and installed == ["surely-not-installed-pkg 1.0"]
    assert kept == [f"pytest {version('pytest')}"]
    assert (tmp_path / "site" / "surely_not_installed_pkg" / "__init__.py").is_file()


def test_wheelhouse_installs_offline_in_a_clean_python_312_venv_and_the_preflight_runs(tmp_path):
    """Downloads ~21 MB from the package index (a few seconds here), makes a venv (~5 s), runs the preflight."""
    if not PY312.exists():
        pytest.skip(f"{PY312} is not installed")
    folder = tmp_path / ".whl"
    res = subprocess.run(
        ["bash", str(REPO / "scripts" / "wheelhouse.sh"), str(folder)],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHON=sys.executable),
        timeout=600,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert wh.check(folder, wh.tracked_bytes()) == []  # the pinned set, and within 64 MiB beside the tree
    size = sum(p.stat().st_size for p in folder.glob("*.whl"))
    assert 15 * 2**20 < size < 28 * 2**20, size  # ~20.7 MiB as measured; a big new dependency shows here
    venv = tmp_path / "venv"
    subprocess.run([str(PY312), "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("OUT", "PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHON"] = str(python)
    env["PIP_NO_INDEX"] = "1"  # offline: nothing may come from the index
    out = tmp_path / "out"
    res = subprocess.run(
        [
            "bash",
            str(REPO / "scripts" / "gpu_check.sh"),
            "--preflight-only",
            "--wheelhouse",
            str(folder),
            "--out",
            str(out),
            "--work-dir",
            str(tmp_path / "work"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads((out / "gpu_check.json").read_text())
    steps = {s["name"]: s for s in doc["steps"]}
    assert steps["wheelhouse"]["status"] == "PASS" and "--no-index" in res.stdout
    assert sorted(steps["wheelhouse"]["details"]["installed"]) == sorted(f"{n} {v}" for n, v in wh.pinned().items())
    facts = steps["preflight"]["details"]["facts"]
    assert facts["python"].startswith("3.12.") and facts["have"]["pydantic"]
    assert facts["origin"]["pydantic"] == "wheelhouse"
    assert facts["versions"]["modelopt"] == "0.47.0" and not facts["have"]["cuda"]
    assert "PREFLIGHT python 3.12." in res.stdout and "pydantic 2.14.4 (wheelhouse)" in res.stdout
