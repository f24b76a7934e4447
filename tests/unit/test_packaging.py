"""pyproject.toml against the places trtspec installs: NVIDIA's TensorRT-LLM containers, this CPU machine's lock.

A static specifier check (no container, no network): every requirement of the core package and of the `trtllm`
extra must be met by the package set recorded for each TensorRT-LLM release in our table
(constraints/containers/trtllm-<version>.json, each entry citing the upstream file it comes from), in place —
pip keeps an installed distribution when `specifier.contains(version, prereleases=True)` (pip 26.3
`src/pip/_internal/resolution/resolvelib/factory.py`, `_get_installed_candidate`), which is what `_admits` asks —
or be a package the container lacks whose own requirements the container meets. Where upstream records a range
rather than a version, our specifier must admit the whole range (`covers`, probed at every bound of both sides and
just beside it). And the lock this machine installs (constraints/cpu-py311.txt) must satisfy the ranges.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from builder.recipe.trtllm import RELEASES

ROOT = Path(__file__).resolve().parents[2]
CONTAINERS = ROOT / "constraints" / "containers"
LOCK = ROOT / "constraints" / "cpu-py311.txt"


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def container(version: str) -> dict:
    return json.loads((CONTAINERS / f"trtllm-{version}.json").read_text(encoding="utf-8"))


def _env(python: str, extra: str = "") -> dict[str, str]:
    env = dict(default_environment())
    env.update(
        python_version=".".join(python.split(".")[:2]),
        python_full_version=python,
        sys_platform="linux",
        platform_system="Linux",
        platform_machine="x86_64",
        extra=extra,
    )
    return env


def requirements(lines: list[str], python: str, extra: str = "") -> list[Requirement]:
    """The requirements that apply on Linux x86-64 with this Python (markers evaluated)."""
    reqs = [Requirement(line) for line in lines]
    return [r for r in reqs if r.marker is None or r.marker.evaluate(_env(python, extra))]


def _admits(spec: SpecifierSet, version: str) -> bool:
    return spec.contains(Version(version), prereleases=True)


def _bounds(spec: SpecifierSet) -> list[Version]:
    out = []
    for s in spec:
        v = Version(s.version.removesuffix(".*"))
        rel = list(v.release) + [0] * (3 - len(v.release))
        out += [
            v,
            Version(".".join(map(str, rel[:2] + [rel[2] + 1]))),
            Version(".".join(map(str, [rel[0], rel[1] + 1, 0]))),
            Version(f"{rel[0] + 1}.0.0"),
        ]
        if any(rel):  # just below the bound: 3 -> 2.9999, 0.38.0 -> 0.37.9999
            i = max(k for k, x in enumerate(rel) if x)
            below = rel[:i] + [rel[i] - 1, 9999]
            out.append(Version(".".join(map(str, below))))
    return out


def covers(ours: SpecifierSet, theirs: SpecifierSet) -> bool:
    """Does every version `theirs` allows satisfy `ours`? Checked at the bounds of both and just beside them."""
    probes = {Version("0"), Version("99999"), *_bounds(ours), *_bounds(theirs)}
    return all(ours.contains(p, prereleases=True) for p in probes if theirs.contains(p, prereleases=True))


def problems(reqs: list[Requirement], box: dict, *, unrecorded_ok: bool = False) -> list[str]:
    """What in `reqs` the recorded container would not meet in place (empty: installs beside it unchanged).
    `unrecorded_ok`: for the requirements of an installable package, a package the record does not name is one
    pip adds beside the container."""
    packages = {canonicalize_name(k): v for k, v in box["packages"].items()}
    installable = {canonicalize_name(k): v for k, v in box["installable"].items()}
    shadowed = {canonicalize_name(k): v for k, v in box.get("shadowed", {}).items()}
    out = []
    for req in reqs:
        name = canonicalize_name(req.name)
        if name in shadowed:
            out.append(f"{req}: {shadowed[name]}")
        elif name in packages:
            have = packages[name]
            if "version" in have and not _admits(req.specifier, have["version"]):
                out.append(f"{req}: the container has {have['version']} ({have['source']}); pip would replace it")
            if "range" in have and not covers(req.specifier, SpecifierSet(have["range"])):
                out.append(f"{req}: the container has {name}{have['range']} ({have['source']}), not all of it admitted")
        elif name in installable:
            add = installable[name]
            if not _admits(req.specifier, add["version"]):
                out.append(f"{req}: the recorded installable {name} is {add['version']}")
            deps = requirements(add["requires"], box["python"]["version"])
            out += [f"{name} {add['version']} needs {p}" for p in problems(deps, box, unrecorded_ok=True)]
        elif not unrecorded_ok:
            out.append(f"{req}: not recorded for this container (add it to packages, installable or shadowed)")
    return out


def core_and_trtllm(python: str) -> list[Requirement]:
    project = pyproject()
    return requirements(project["dependencies"] + project["optional-dependencies"]["trtllm"], python, "trtllm")


@pytest.mark.parametrize("version", sorted(RELEASES))
def test_recorded_container_is_the_one_our_release_table_pins(version: str) -> None:
    """The recorded package set is that of the containers RELEASES names (an independent upstream reading)."""
    box, release = container(version), RELEASES[version]
    assert box["tensorrt_llm"] == version
    assert tuple(box["containers"]) == release.containers
    assert box["python"]["version"] == release.python
    assert box["packages"]["tensorrt"]["version"] == release.tensorrt
    assert box["packages"]["tensorrt-llm"]["version"] == version
    cited = {s.strip().split(" ")[0] for v in box["packages"].values() for s in v["source"].split(",")}
    assert cited <= set(box["sources"]), f"entries cite sources that are not recorded: {cited - set(box['sources'])}"


def test_every_recorded_container_is_in_the_release_table() -> None:
    recorded = {p.name.removeprefix("trtllm-").removesuffix(".json") for p in CONTAINERS.glob("trtllm-*.json")}
    assert recorded == set(RELEASES)


@pytest.mark.parametrize("version", sorted(RELEASES))
def test_core_and_trtllm_extra_install_into_the_container_unchanged(version: str) -> None:
    box = container(version)
    requires_python = SpecifierSet(pyproject()["requires-python"])
    assert _admits(requires_python, box["python"]["version"]), f"requires-python {requires_python} refuses it"
    assert problems(core_and_trtllm(box["python"]["version"]), box) == []


@pytest.mark.parametrize(
    "extra_line, word",
    [
        ("torch==2.13", "torch"),  # the old cpu extra's pin: a CUDA torch from PyPI over NVIDIA's build
        ("numpy>=2", "numpy"),
        ("transformers>=5", "transformers"),
        ("nvidia-modelopt>=0.47", "nvidia-modelopt"),  # the container's ~=0.37.0 would be replaced
        ("tensorrt>=10.15", "tensorrt"),  # the old gpu extra's TensorRT against the containers' 10.14.1.48
        ("tensorrt-llm<1.2", "tensorrt-llm"),
        ("triton>=3.2", "pytorch-triton"),  # shadowed: the module comes from another distribution
        ("pydantic>=2.11", "pydantic"),  # the container may hold any pydantic from 2.9.1 on
        ("tritonclient>=2.60", "tritonclient"),  # not the installable version recorded
        ("left-pad>=1", "not recorded"),
    ],
)
def test_the_check_refuses_what_would_move_or_miss_the_container(extra_line: str, word: str) -> None:
    """The check can fail: each of these lines, added to the trtllm extra, is named among the problems."""
    box = container("1.2.1")
    found = problems(core_and_trtllm("3.12.3") + [Requirement(extra_line)], box)
    assert len(found) == 1 and word in found[0], found


def test_covers_on_hand_worked_ranges() -> None:
    assert covers(SpecifierSet(">=0.37,<0.48"), SpecifierSet("~=0.37.0"))
    assert not covers(SpecifierSet(">=0.37.1,<0.48"), SpecifierSet("~=0.37.0"))  # 0.37.0 left out
    assert not covers(SpecifierSet(">=0.37,<0.37.5"), SpecifierSet("~=0.37.0"))  # 0.37.5 … 0.37.x left out
    assert covers(SpecifierSet(">=2.7,<3"), SpecifierSet(">=2.9.1,<3"))
    assert not covers(SpecifierSet(">=2.7,<3"), SpecifierSet(">=2.9.1"))
    assert not covers(SpecifierSet("<2"), SpecifierSet(">=1.26"))
    assert covers(SpecifierSet(""), SpecifierSet(">=1"))


def test_requires_python_admits_every_home() -> None:
    spec = SpecifierSet(pyproject()["requires-python"])
    assert all(_admits(spec, v) for v in ("3.11.7", "3.12.1", "3.12.3", "3.13.0"))


def test_the_tensorrt_extra_asks_for_the_tensorrt_the_code_targets_and_no_tensorrt_llm() -> None:
    """Our own engines use TensorRT 10.15's QDP and native layers; TensorRT-LLM 1.2 pins 10.14: never together."""
    extras = pyproject()["optional-dependencies"]
    tensorrt = {canonicalize_name(r.name): r for r in requirements(extras["tensorrt"], "3.12.3", "tensorrt")}
    assert "tensorrt-llm" not in tensorrt
    spec = tensorrt["tensorrt"].specifier
    assert _admits(spec, "10.15.1.29") and not _admits(spec, "10.14.1.48")
    assert {"triton", "ml-dtypes"} <= set(tensorrt)
    for name, lines in extras.items():  # no extra asks for two TensorRTs at once (the old `gpu` extra did)
        names = {canonicalize_name(r.name) for r in requirements(lines, "3.12.3", name)}
        assert not {"tensorrt", "tensorrt-llm"} <= names, name


def _lock() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in LOCK.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = list(req.specifier)
            assert spec.operator == "==", line
            assert canonicalize_name(req.name) not in pins, f"{req.name} pinned twice"
            pins[canonicalize_name(req.name)] = spec.version
    return pins


def test_the_lock_meets_every_range_setup_installs() -> None:
    """constraints/cpu-py311.txt (what scripts/setup.sh applies with -c) satisfies core + cpu, dev, serve, peers."""
    project, pins = pyproject(), _lock()
    reqs = requirements(project["dependencies"], "3.11.7")
    for extra in ("cpu", "dev", "serve", "peers"):
        reqs += requirements(project["optional-dependencies"][extra], "3.11.7", extra)
    missing = [str(r) for r in reqs if canonicalize_name(r.name) not in pins]
    pinned = [(r, pins[canonicalize_name(r.name)]) for r in reqs if canonicalize_name(r.name) in pins]
    wrong = [f"{r} vs {pin}" for r, pin in pinned if not _admits(r.specifier, pin)]
    assert (missing, wrong) == ([], [])


def test_setup_pins_what_it_installs_by_name_and_restamps_on_a_new_lock() -> None:
    setup = (ROOT / "scripts" / "setup.sh").read_text(encoding="utf-8")
    pins = _lock()
    for line in setup.splitlines():
        if line.lstrip().startswith("#") or "triton-stub-site" in line:
            continue  # the Python-backend stub's own NumPy 1.x goes to its own folder, outside the lock
        for name, version in re.findall(r'"([A-Za-z0-9_.-]+)==([^"]+)"', line):
            assert pins.get(canonicalize_name(name)) == version, (
                f"setup.sh: {name}=={version}, the lock: {pins.get(name)}"
            )
    want = next(line for line in setup.splitlines() if line.startswith("want="))
    assert "$CONSTRAINTS" in want and "pyproject.toml" in want


def test_the_quantize_stage_modelopt_range_spans_the_container_and_this_machine() -> None:
    """nvidia-modelopt: the containers carry ~=0.37.0 (TensorRT-LLM 1.2.x), this machine 0.47 (the lock)."""
    extras = pyproject()["optional-dependencies"]
    for extra in ("cpu", "trtllm"):
        reqs = requirements(extras[extra], "3.12.3", extra)
        (req,) = [r for r in reqs if canonicalize_name(r.name) == "nvidia-modelopt"]
        assert covers(req.specifier, SpecifierSet(container("1.2.1")["packages"]["nvidia-modelopt"]["range"]))
        assert _admits(req.specifier, _lock()["nvidia-modelopt"])
