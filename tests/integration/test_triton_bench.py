"""`trtspec bench` end to end on the tiny recipe (Lookahead): a real tritonserver and perf_analyzer 2.51.

A short run (concurrency 1,2, tiny lengths, sub-second windows) finishes with 0 errors, writes every
file, holds both modes for every level, every request generated exactly output_len tokens (probes and
every measured request), the report's ratios are the JSON's numbers divided, and no server or client
process is left. An interrupted run writes nothing and leaves nothing running."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from builder.serve.perf import find_perf_analyzer
from tests.integration.conftest import REPO_ROOT, build_repo

RECIPE = "recipes/tiny-llama3.yaml"
OUTPUT_LEN = 12
SHORT = [
    "--concurrency",
    "1,2",
    "--input-len",
    "24",
    "--output-len",
    str(OUTPUT_LEN),
    "--window-ms",
    "700",
    "--num-prompts",
    "8",
    "--probes",
    "2",
    # the whole draft (Lookahead W=1 N=4 G=1: 6 nodes) at every batch size: on the tiny fixture the engine's measured
    # draft budget rule may turn speculation off (drafting pays little on an L3-resident model), and this test checks
    # the counters of a drafting server
    "--set",
    "triton.draft_schedule=[[4, 6]]",
]

if find_perf_analyzer() is None:
    pytest.skip("no perf_analyzer binary (install the serve extra: bash scripts/setup.sh)", allow_module_level=True)


def _bench(out: Path, *extra: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "TRTSPEC_CACHE_DIR": os.environ.get("TRTSPEC_CACHE_DIR", ".trtspec-cache")}
    cache = env["TRTSPEC_CACHE_DIR"]
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "builder.cli",
            "bench",
            str(REPO_ROOT / RECIPE),
            "--out",
            str(out),
            "--cache-dir",
            cache,
            *SHORT,
            *extra,
        ],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def _alive_with(needle: str) -> list[int]:
    """Pids whose command line contains `needle` (zombies excluded)."""
    pids = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (p / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in cmd and state != "Z":
            pids.append(int(p.name))
    return pids


@pytest.fixture(scope="module")
def built():
    return build_repo(RECIPE)  # cached for the subprocess (same cache folder)


def test_short_bench_run_writes_a_consistent_report(built, tmp_path):
    out = tmp_path / "bench"
    proc = _bench(out)
    stdout, stderr = proc.communicate(timeout=170)
    assert proc.returncode == 0, stdout[-2000:] + stderr[-3000:]
    assert "errors: 0" in stdout and f"report: {out / 'report.md'}" in stdout
    res = json.loads((out / "bench.json").read_text())
    for name in (
        "bench.csv",
        "report.md",
        "throughput.png",
        "latency.png",
        "ttft.png",
        "itl.png",
        "tau.png",
        "raw/tritonserver.log",
    ):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    assert {(r["concurrency"], r["mode"]) for r in res["levels"]} == {
        (c, m) for c in (1, 2) for m in ("speculative", "baseline")
    }
    for r in res["levels"]:
        assert r["errors"] == 0 and r["failed_requests"] == 0, r
        assert r["token_counts_ok"] and r["measured_requests"] > 0, r
        assert (out / r["csv"]).is_file() and (out / r["export"]).is_file()
        assert r["output_tokens_per_s"] == pytest.approx(r["requests_per_s"] * OUTPUT_LEN)
        # the server's own counters over the run (warm-up included) cover perf_analyzer's measured requests
        v = r["server"]
        assert v is not None and v["requests"] >= r["measured_requests"] and sum(v["errors"].values()) == 0, v
        assert v["output_tokens"] >= r["measured_requests"] * OUTPUT_LEN and v["queued_after"] == 0, v
        if r["mode"] == "baseline":
            assert r["tau"] == 1.0
        else:
            assert r["tau"] > 1.0  # the Lookahead drafter is accepted on these prompts
            assert r["draft_budget"] == 6  # (spec_decoder's metric trtspec_draft_budget: the pinned schedule)
    for mode, p in res["probes"].items():
        assert [q["output_tokens"] for q in p["requests"]] == [OUTPUT_LEN] * 2, mode
        assert {q["finish_reason"] for q in p["requests"]} == {"length"}
    # the report's ratios are the JSON's numbers divided (recomputed here)
    report = (out / "report.md").read_text()
    for c in (1, 2):
        spec = next(r for r in res["levels"] if r["concurrency"] == c and r["mode"] == "speculative")
        base = next(r for r in res["levels"] if r["concurrency"] == c and r["mode"] == "baseline")
        row = re.search(rf"^\| {c} \| ([\d.]+) \| ([\d.]+) \| \*\*([\d.]+)×\*\* \|", report, re.M)
        assert row, report
        assert float(row.group(1)) == round(spec["output_tokens_per_s"], 1)
        assert float(row.group(2)) == round(base["output_tokens_per_s"], 1)
        assert row.group(3) == f"{spec['output_tokens_per_s'] / base['output_tokens_per_s']:.2f}"
    csv_lines = (out / "bench.csv").read_text().splitlines()
    assert "## the server's view" in report and "the pinned schedule [[4, 6]]" in report
    assert len(csv_lines) == 5 and csv_lines[0].startswith("concurrency,mode,output_tokens_per_s")
    assert not _alive_with(f"--grpc-port={res['endpoints']['grpc'].rsplit(':', 1)[1]}")
    assert not _alive_with(res["endpoints"]["grpc"])  # no perf_analyzer left
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".bench.")]  # no temp folder left


def test_interrupted_run_writes_nothing_and_stops_everything(built, tmp_path):
    out = tmp_path / "bench"
    proc = _bench(out, start_new_session=True)
    port = None
    deadline = time.monotonic() + 120
    assert proc.stderr is not None
    for line in proc.stderr:  # wait for the first perf_analyzer run to start
        m = re.search(r"gRPC 127\.0\.0\.1:(\d+)", line)
        port = port or (m and m.group(1))
        if line.startswith("probe baseline") or time.monotonic() > deadline:
            break
    assert port, "the bench never reported its server"
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2, stdout + stderr
    assert "interrupted" in stderr
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".bench.")]
    time.sleep(0.5)
    assert not _alive_with(f"--grpc-port={port}") and not _alive_with(f"127.0.0.1:{port}")
