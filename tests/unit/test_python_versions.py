"""trtspec's core package on the Pythons it must run on besides this machine's 3.11: 3.12 (NVIDIA's TensorRT-LLM
containers, the borrowed GPU machines) and 3.13 — installed with `pip install` and no extras (no torch), then
`validate`, `plan` (a tiny recipe, an 8B own-TensorRT recipe, a 70B TensorRT-LLM recipe), `schema`, `doctor`, and
the deployment bundle's stdlib script `check_engine.py` with no site-packages at all.

Oracles: plan's JSON (less the cache keys, which hash the tool versions installed) and the schema equal what this
interpreter computes from the same sources; the venv holds no torch; check_engine.py exits 2 on a missing engine.

The venvs are cached per interpreter and core requirement set (in .venv/ beside the project environment, else the
system's temp folder), so only the first run pays for creating them and resolving the core dependencies (~30 s per
Python, network needed); every run reinstalls trtspec itself from a copy of the current sources (~5 s per Python).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.cli import cli

ROOT = Path(__file__).resolve().parents[2]
PYENV = Path("/root/.pyenv/versions")
PYTHONS = {"3.12": PYENV / "3.12.1" / "bin" / "python", "3.13": PYENV / "3.13.0" / "bin" / "python"}
RECIPES = (
    "recipes/tiny-llama3.yaml",
    "recipes/llama3-8b-1xh100-fp8-eagle.yaml",
    "recipes/llama3-70b-tp4-h100-fp8-trtllm-eagle.yaml",
)
SOURCES = ("pyproject.toml", "README.md", "builder", "plugins", "triton_repo")
DONE = ".trtspec-core-ready"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _run(args: list[str], timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=_env(), **kw)


def _pip(venv: Path, *args: str) -> None:
    done = _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *args])
    assert done.returncode == 0, f"pip install {' '.join(args)}:\n{done.stdout[-1500:]}\n{done.stderr[-3000:]}"


def _sources(dst: Path) -> Path:
    """A copy of what `pip install .` reads (so building it leaves nothing in the working tree)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in SOURCES:
        src = ROOT / name
        (shutil.copytree(src, dst / name, ignore=ignore) if src.is_dir() else shutil.copy2(src, dst / name))
    return dst


def core_venv(python: Path, minor: str, src: Path) -> Path:
    """A venv of `python` with trtspec from `src` installed without extras; created once per core requirement set
    (pyproject.toml's requires-python and dependencies: editing an extra or a comment keeps the venv)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    core = json.dumps([project["requires-python"], project["dependencies"]])
    digest = hashlib.sha256(core.encode()).hexdigest()[:12]
    home = ROOT / ".venv" if (ROOT / ".venv").is_dir() else Path(tempfile.gettempdir())
    venv = home / f"core-py{minor}-{digest}"
    with open(home / f".core-py{minor}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder at a time; the others wait and reuse
        if not (venv / DONE).is_file():  # absent or left half-made by an interrupted run
            shutil.rmtree(venv, ignore_errors=True)
            for old in home.glob(f"core-py{minor}-*"):  # earlier pyproject.toml versions
                shutil.rmtree(old, ignore_errors=True)
            done = _run([str(python), "-m", "venv", str(venv)])
            assert done.returncode == 0, done.stderr
            _pip(venv, "setuptools>=68")  # the build backend, so reinstalls need no isolated build env
            _pip(venv, str(src))  # resolves the core dependencies for this Python (and checks requires-python)
            (venv / DONE).write_text(digest)
        _pip(venv, "--no-deps", "--no-build-isolation", "--force-reinstall", str(src))
    return venv


def _host_plan(recipe: str, cache: Path) -> dict:
    result = CliRunner().invoke(cli, ["plan", str(ROOT / recipe), "--json", "--cache-dir", str(cache)])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _comparable(plan: dict) -> dict:
    """A plan without what depends on the installed tools (stage and upstream keys hash their versions) or on paths."""
    drop = ("key", "upstream", "output", "cached")
    return {
        **plan,
        "recipe": Path(plan["recipe"]).name,
        "stages": [{k: v for k, v in s.items() if k not in drop} for s in plan["stages"]],
    }


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    return _sources(tmp_path_factory.mktemp("trtspec-src"))


@pytest.mark.parametrize("minor", sorted(PYTHONS))
def test_core_install_runs_validate_plan_schema_doctor_and_the_bundle_scripts(
    minor: str, src: Path, tmp_path: Path
) -> None:
    python = PYTHONS[minor]
    if not python.is_file():
        pytest.skip(f"no Python {minor} at {python}")
    venv = core_venv(python, minor, src)
    py, trtspec = str(venv / "bin" / "python"), str(venv / "bin" / "trtspec")

    def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
        return _run(list(args), timeout=300, cwd=cwd)

    version = run(py, "-c", "import sys, importlib.util as u; print(sys.version_info[:2], u.find_spec('torch'))")
    assert version.stdout.strip() == f"({minor.replace('.', ', ')}) None", version.stdout  # core only: no torch

    done = run(trtspec, "validate", *RECIPES)
    assert done.returncode == 0, done.stderr
    for recipe in RECIPES:
        done = run(trtspec, "plan", recipe, "--json", "--cache-dir", str(tmp_path / "cache"))
        assert done.returncode == 0, done.stderr
        assert _comparable(json.loads(done.stdout)) == _comparable(_host_plan(recipe, tmp_path / "host-cache"))

    done = run(trtspec, "schema")
    assert done.returncode == 0 and json.loads(done.stdout) == json.loads(CliRunner().invoke(cli, ["schema"]).stdout)

    done = run(trtspec, "doctor", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["host"]["python"].startswith(minor + ".") and doc["host"]["versions"]["torch"] is None
    assert "torch not installed" in doc["backends"]["onnxruntime"]["build"]["why"]

    # the bundle's check_engine.py is builder/trtllm/compat.py verbatim (builder/trtllm/bundle.py); run the
    # installed copy with no site-packages (-I -S): the standard library is all it may need
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    site = run(py, "-c", "import builder.trtllm.compat as c; print(c.__file__)", cwd=tmp_path).stdout.strip()
    shutil.copy2(site, bundle / "check_engine.py")
    helped = run(py, "-I", "-S", str(bundle / "check_engine.py"), "--help", cwd=bundle)
    assert helped.returncode in (0, 2) and "usage" in (helped.stdout + helped.stderr).lower(), helped.stderr
    missing = run(py, "-I", "-S", str(bundle / "check_engine.py"), str(tmp_path / "no-such-engine"), cwd=bundle)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr, missing.stderr
