"""`trtspec build`: cache hits, atomic outputs under kill -9, locking, precise errors.

Every build runs the real CLI in a subprocess on the tiny fixture recipe, into a temporary cache.
"Complete" is checked from the outside: each stage folder's manifest lists every file with its size and
sha256, and the files must match (Manifest.problems with hashes); the engine folder must open and
decode the same tokens as the torch reference.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from builder.stages.manifest import Manifest

REPO = Path(__file__).resolve().parents[2]
RECIPE = str(REPO / "recipes" / "tiny-llama3.yaml")
STAGES = ["load", "export", "engine", "repo"]


def trtspec(*args: str, cache: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "builder.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, "TRTSPEC_CACHE_DIR": str(cache)},
    )


def build_json(cache: Path, *extra: str) -> dict:
    r = trtspec("build", RECIPE, "--cache-dir", str(cache), "--json", *extra, cache=cache)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def assert_complete(cache: Path) -> None:
    """Every stage folder present is complete and unchanged; no folder is half-written."""
    for stage_dir in cache.iterdir():
        if stage_dir.name.startswith("."):
            continue
        for out in stage_dir.iterdir():
            if out.name.startswith(".tmp-"):
                continue  # a killed build's leftover: never read, removed by the next build
            m = Manifest.read(out)
            assert m is not None, f"{out} has no readable manifest"
            assert m.problems(out, hashes=True) == [], out


def test_build_then_rebuild_is_all_cache_hits(tmp_path):
    first = build_json(tmp_path)
    assert [s["stage"] for s in first["stages"]] == STAGES
    assert all(s["status"] == "built" for s in first["stages"])
    t0 = time.perf_counter()
    second = build_json(tmp_path)
    wall = time.perf_counter() - t0
    assert all(s["status"] == "cached" for s in second["stages"])
    assert [s["output"] for s in second["stages"]] == [s["output"] for s in first["stages"]]
    assert wall < 10, f"a fully cached rebuild took {wall:.1f} s"  # generous: CI machines are loaded
    assert_complete(tmp_path)
    plan = trtspec("plan", RECIPE, "--cache-dir", str(tmp_path), "--json", cache=tmp_path)
    cached = {s["name"]: s["cached"] for s in json.loads(plan.stdout)["stages"]}
    assert all(cached[s] for s in STAGES)
    m = Manifest.read(Path(first["stages"][1]["output"]))
    assert m is not None and m.wall_s > 0 and m.peak_rss_bytes > 0 and "onnxruntime" in m.versions


def test_a_changed_input_rebuilds_only_what_depends_on_it(tmp_path):
    build_json(tmp_path)
    changed = build_json(tmp_path, "--set", "build.max_seq_len=900")
    status = {s["stage"]: s["status"] for s in changed["stages"]}
    assert status == {"load": "cached", "export": "built", "engine": "built", "repo": "built"}


def test_the_engine_folder_decodes_like_the_reference(tmp_path):
    from builder.engines.ort.load import open_ort_engine
    from builder.recipe.loader import load_recipe
    from builder.speculative.decoding import generate
    from builder.stages.decoders import build_decoder

    summary = build_json(tmp_path)
    opened = open_ort_engine(next(s["output"] for s in summary["stages"] if s["stage"] == "engine"))
    ref = build_decoder(load_recipe(RECIPE), engine="torch")
    prompt = ref.tokenizer.encode("def add(a, b):\n").ids
    want = generate(ref.engine, prompt, 24, ref.make_drafter()).token_ids
    assert generate(opened.engine, prompt, 24, opened.make_drafter()).token_ids == want


@pytest.mark.parametrize("delay", [0.5, 1.5, 2.5])
def test_kill_9_at_any_moment_then_build_completes(tmp_path, delay):
    env = {**os.environ, "TRTSPEC_CACHE_DIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "builder.cli", "build", RECIPE, "--cache-dir", str(tmp_path), "--quiet"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    if tmp_path.exists():
        assert_complete(tmp_path)  # whatever is there is whole
    summary = build_json(tmp_path)
    assert len(summary["stages"]) == len(STAGES)
    assert_complete(tmp_path)
    assert not list(tmp_path.glob("*/.tmp-*")), "the next build removes a killed build's temp folders"


def test_two_concurrent_builds_both_succeed(tmp_path):
    env = {**os.environ, "TRTSPEC_CACHE_DIR": str(tmp_path)}
    cmd = [sys.executable, "-m", "builder.cli", "build", RECIPE, "--cache-dir", str(tmp_path), "--json"]
    procs = [
        subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=240) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    built = [[s["status"] for s in json.loads(o[0])["stages"]] for o in outs]
    for stage in range(len(STAGES)):  # each stage built exactly once; the other build found it cached
        assert sorted(b[stage] for b in built) == ["built", "cached"]
    assert_complete(tmp_path)


def test_user_errors_exit_2_naming_the_field(tmp_path):
    missing = trtspec(
        "build",
        RECIPE,
        "--cache-dir",
        str(tmp_path),
        "--set",
        f"speculative.checkpoint={tmp_path / 'nope'}",
        cache=tmp_path,
    )
    assert missing.returncode == 2 and "speculative.checkpoint" in missing.stderr and "Traceback" not in missing.stderr
    gpu_recipe = str(REPO / "recipes" / "llama3-8b-1xh100-fp8-none.yaml")  # hf:// checkpoint, not on this machine
    hub = trtspec(
        "build",
        gpu_recipe,
        "--cache-dir",
        str(tmp_path),
        "--set",
        "model.checkpoint=hf://nobody/nothing",
        cache=tmp_path,
    )
    assert hub.returncode == 2 and "hf download nobody/nothing" in hub.stderr and "Traceback" not in hub.stderr
    until = trtspec("build", RECIPE, "--cache-dir", str(tmp_path), "--until", "bake", cache=tmp_path)
    assert until.returncode == 2 and "--until" in until.stderr and "engine" in until.stderr
    assert not any(p for p in tmp_path.rglob("manifest.json"))  # nothing was built
