"""`trtspec doctor`: run on this host (no GPU, no TensorRT, no TensorRT-LLM: it must say so, per backend), its
verdicts on made-up hosts (a TensorRT GPU host, the borrowed GPU machines, NVIDIA's TensorRT-LLM container, …),
and broken installs as facts, not crashes (stand-in `tensorrt` packages that raise or abort on import)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from dataclasses import replace
from importlib import metadata
from pathlib import Path

import pytest

from builder.commands.doctor_cmds import TENSORRT_PROBE, Host, declared_ranges, judge, probe
from builder.recipe.trtllm import RELEASES

ROOT = Path(__file__).resolve().parents[2]


def _absent(dist: str) -> bool:
    try:
        metadata.version(dist)
    except metadata.PackageNotFoundError:
        return True
    return False


BARE_HERE = shutil.which("nvidia-smi") is None and _absent("tensorrt") and _absent("tensorrt-llm")

# The doctor through the CLI in a fresh interpreter: its exit code, both outputs, and which heavy modules the
# doctor's own process imported (none may be: torch and TensorRT are probed in children).
_RUN = textwrap.dedent("""
    import json, sys
    from click.testing import CliRunner
    from builder.cli import cli
    text = CliRunner().invoke(cli, ["doctor"])
    js = CliRunner().invoke(cli, ["doctor", "--json"])
    heavy = sorted(m for m in ("torch", "tensorrt", "tensorrt_llm", "transformers", "onnxruntime", "modelopt")
                   if m in sys.modules)
    print(json.dumps({"codes": [text.exit_code, js.exit_code], "text": text.output, "json": js.output, "heavy": heavy}))
""")


@pytest.fixture(scope="module")
def here() -> dict:
    done = subprocess.run([sys.executable, "-c", _RUN], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _verdicts(text: str) -> dict[tuple[str, str], str]:
    """(backend, "build" | "serve") -> the text after "build: " / "serve: " on the doctor's screen."""
    lines, out = text.splitlines(), {}
    for i, line in enumerate(lines):
        backend = line.split(" ", 1)[0]
        if backend in ("onnxruntime", "tensorrt", "trtllm") and "build: " in line:
            out[backend, "build"] = line.split("build: ", 1)[1]
            out[backend, "serve"] = lines[i + 1].split("serve: ", 1)[1]
    return out


@pytest.mark.skipif(not BARE_HERE, reason="this host has a GPU driver, TensorRT or TensorRT-LLM")
def test_doctor_here_says_why_each_gpu_backend_cannot_build(here: dict) -> None:
    assert here["codes"] == [0, 0]
    rows = {line.split()[0]: line for line in here["text"].splitlines() if line.strip()}
    assert rows["GPUs"].split(None, 1)[1].startswith("none") and "not installed" in rows["TensorRT"]
    v = _verdicts(here["text"])
    for backend, what in (("tensorrt", "build"), ("tensorrt", "serve"), ("trtllm", "build"), ("trtllm", "serve")):
        assert v[backend, what].startswith("no: ") and "no GPU" in v[backend, what]
    assert "tensorrt not importable" in v["tensorrt", "build"]
    assert "tensorrt_llm not installed" in v["trtllm", "build"] and "trtllm-build not on PATH" in v["trtllm", "build"]


def test_doctor_json_carries_the_same_verdicts_and_imports_nothing_heavy(here: dict) -> None:
    doc, text = json.loads(here["json"]), _verdicts(here["text"])
    assert set(doc["backends"]) == {"onnxruntime", "tensorrt", "trtllm", "quantize"}
    for (backend, what), line in text.items():
        got = doc["backends"][backend][what]
        assert got["ok"] == (not got["why"]) == (line == "yes")
        assert got["ok"] or line == "no: " + "; ".join(got["why"])
    assert doc["host"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert doc["host"]["versions"]["numpy"] == metadata.version("numpy")
    assert here["heavy"] == []


# -- verdicts on made-up hosts -------------------------------------------------------------------------------

RANGES = declared_ranges()  # the extras' ranges from pyproject.toml: the one source the doctor judges against
H100 = ("NVIDIA H100 80GB HBM3", (9, 0))
CPU_STACK = {
    "numpy": "1.26.4",
    "transformers": "4.57.3",
    "safetensors": "0.4.5",
    "onnx": "1.19.1",
    "onnxruntime": "1.22.0",
    "pydantic": "2.11.0",
}


def host(**kw) -> Host:
    versions = {**CPU_STACK, **kw.pop("versions", {})}
    return Host(python="3.12.3", versions=versions, ranges=RANGES, releases=tuple(RELEASES), **kw)


TENSORRT_HOST = host(
    versions={"torch": "2.9.1+cu128", "tensorrt": "10.15.1.29", "triton": "3.5.1", "modelopt": "0.47.0"},
    torch_cuda="12.8",
    cuda_available=True,
    tensorrt_plugin=True,
    gpus=[H100],
    tritonserver="/opt/tritonserver/bin/tritonserver",
)
TRTLLM_CONTAINER = host(
    versions={
        "torch": "2.10.0a0+b4e4ee81d3.nv25.12",
        "tensorrt": "10.14.1.48",
        "tensorrt_llm": "1.2.1",
        "triton": "3.5.1+gitbfeb0668.nv25.12",
        "modelopt": "0.37.0",
    },
    torch_cuda="13.0",
    cuda_available=True,
    tensorrt_plugin=True,
    gpus=[H100] * 4,
    tritonserver="/opt/tritonserver/bin/tritonserver",
    tensorrtllm_backend="/opt/tritonserver/backends/tensorrtllm",
    trtllm_build="/usr/local/bin/trtllm-build",
)


def test_a_tensorrt_gpu_host_builds_and_serves_own_engines_not_trtllm() -> None:
    v = judge(TENSORRT_HOST)
    assert (v["tensorrt"]["build"], v["tensorrt"]["serve"], v["onnxruntime"]["build"]) == ([], [], [])
    assert v["trtllm"]["build"] == ["tensorrt_llm not installed", "trtllm-build not on PATH"]
    assert v["quantize"]["build"] == []


def test_the_trtllm_container_builds_and_serves_trtllm_and_refuses_its_older_tensorrt_for_own_engines() -> None:
    v = judge(TRTLLM_CONTAINER)
    assert (v["trtllm"]["build"], v["trtllm"]["serve"], v["quantize"]["build"]) == ([], [], [])
    assert v["tensorrt"]["build"] == [
        f"tensorrt 10.14.1.48 is outside the tensorrt extra's {RANGES['tensorrt:tensorrt']}"
    ]


def test_the_borrowed_gpu_machines_lack_tensorrt_and_the_cpu_stack() -> None:
    """Python 3.12, CUDA torch + Triton, NumPy 2.5, nothing else (issue 36): every build names what is missing."""
    borrowed = Host(
        python="3.12.3",
        versions={"numpy": "2.5.0", "torch": "2.9.1+cu128", "triton": "3.5.1"},
        torch_cuda="12.8",
        cuda_available=True,
        gpus=[H100],
        ranges=RANGES,
        releases=tuple(RELEASES),
    )
    v = judge(borrowed)
    assert v["tensorrt"]["build"] == [
        "transformers not installed",
        "safetensors not installed",
        "onnx not installed",
        "tensorrt not importable (not installed)",
    ]
    assert v["tensorrt"]["serve"] == [
        "no tritonserver (PATH, /opt/tritonserver or the nvidia-pytriton wheel)",
        "tensorrt not importable (not installed)",
    ]
    assert v["quantize"]["build"] == ["transformers not installed", "modelopt not installed"]


@pytest.mark.parametrize(
    "change, backend, what, reason",
    [
        ({"gpus": []}, "tensorrt", "build", "no GPU (nvidia-smi lists none)"),
        ({"cuda_available": False, "torch_cuda": None}, "tensorrt", "build", "torch has no usable CUDA (a CPU build)"),
        (
            {"tensorrt_plugin": False},
            "tensorrt",
            "build",
            "tensorrt has no tensorrt.plugin (the QDP API tree_verify uses)",
        ),
        (
            {"tensorrt_error": "ImportError: libnvinfer.so.10"},
            "tensorrt",
            "serve",
            "tensorrt not importable (ImportError: libnvinfer.so.10)",
        ),
        ({"torch_error": "OSError: libcudart"}, "onnxruntime", "build", "torch not importable (OSError: libcudart)"),
        (
            {"tritonserver": None},
            "onnxruntime",
            "serve",
            "no tritonserver (PATH, /opt/tritonserver or the nvidia-pytriton wheel)",
        ),
    ],
)
def test_each_missing_piece_is_named(change: dict, backend: str, what: str, reason: str) -> None:
    assert reason in judge(replace(TENSORRT_HOST, **change))[backend][what]


def test_trtllm_outside_the_release_table_or_without_its_backend_is_named() -> None:
    newer = replace(TRTLLM_CONTAINER, versions={**TRTLLM_CONTAINER.versions, "tensorrt_llm": "1.3.0"})
    assert judge(newer)["trtllm"]["build"] == [
        f"TensorRT-LLM 1.3.0 is not in trtspec's release table ({', '.join(RELEASES)})"
    ]
    wheel_server = replace(TRTLLM_CONTAINER, tensorrtllm_backend=None)
    assert judge(wheel_server)["trtllm"]["serve"] == ["tritonserver has no tensorrtllm backend"]


def test_a_modelopt_outside_the_quantize_range_is_named() -> None:
    old = replace(TRTLLM_CONTAINER, versions={**TRTLLM_CONTAINER.versions, "modelopt": "0.35.1"})
    assert judge(old)["quantize"]["build"] == [
        f"nvidia-modelopt 0.35.1 is outside the cpu extra's {RANGES['cpu:nvidia-modelopt']}"
    ]


# -- broken installs: stand-ins for a damaged TensorRT --------------------------------------------------------


def _stand_in_tensorrt(root: Path, body: str) -> Path:
    (root / "tensorrt").mkdir(parents=True)
    (root / "tensorrt" / "__init__.py").write_text(body, encoding="utf-8")
    info = root / "tensorrt-10.15.1.29.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tensorrt\nVersion: 10.15.1.29\n", encoding="utf-8")
    return root


@pytest.mark.parametrize(
    "body, says",
    [
        ("raise OSError('libnvinfer.so.10: cannot open shared object file')", "OSError: libnvinfer.so.10"),
        ("import os\nos.abort()", "crashed the interpreter (signal 6)"),
    ],
)
def test_a_broken_tensorrt_is_a_reason_not_a_crash(tmp_path: Path, monkeypatch, body: str, says: str) -> None:
    """stand-in tensorrt packages: metadata says installed; import raises / aborts the child interpreter."""
    from click.testing import CliRunner

    from builder.cli import cli

    root = _stand_in_tensorrt(tmp_path / "site", body)
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("PYTHONPATH", str(root))
    got, err = probe(TENSORRT_PROBE)
    assert got is None and says in err
    result = CliRunner().invoke(cli, ["doctor", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["host"]["versions"]["tensorrt"] == "10.15.1.29" and says in doc["host"]["tensorrt_error"]
    assert any(says in why for why in doc["backends"]["tensorrt"]["build"]["why"])
