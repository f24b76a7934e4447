"""Stand-ins for what a TensorRT-LLM GPU host has and this machine lacks, for running the deployment bundle's
scripts (build.sh, launch.sh, docker-run.sh) for real: `trtllm-build`, `nvidia-smi`, `mpirun` and `docker`
(bash scripts in tests/fixtures/standins/, each saying what it emulates) and the container's `python3` — this
interpreter with `-S` (no site-packages: no trtspec, no torch, like NVIDIA's container as far as the bundle's
stdlib script can tell) and, on its path, fake `tensorrt_llm` / `tensorrt` packages whose `__version__` is all
they have (the version source check_engine.py falls back to where distribution metadata is missing).

    env = standin_env(tmp_path)                     # PATH, PYTHONPATH, HOME/XDG_CACHE_HOME in tmp_path, STANDIN_*
    env = standin_env(tmp_path, gpus=2, trtllm="1.2.0")
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STANDINS = REPO / "tests" / "fixtures" / "standins"
H100 = "NVIDIA H100 80GB HBM3"
TRTLLM, TENSORRT = "1.2.1", "10.14.1.48"  # the tiny recipes' trtllm.version and its TensorRT (our release table)


def standin_bin(root: Path) -> Path:
    """root/bin with the stand-ins (copied, made executable) and the container's python3."""
    bin_ = root / "bin"
    if bin_.is_dir():
        return bin_
    bin_.mkdir(parents=True)
    for src in sorted(STANDINS.iterdir()):
        shutil.copy(src, bin_ / src.name)
        (bin_ / src.name).chmod(0o755)
    (bin_ / "python3").write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')  # stdlib + PYTHONPATH only
    (bin_ / "python3").chmod(0o755)
    site = root / "standin-site"
    for pkg, var in (("tensorrt_llm", "STANDIN_TRTLLM_VERSION"), ("tensorrt", "STANDIN_TENSORRT_VERSION")):
        (site / pkg).mkdir(parents=True)
        (site / pkg / "__init__.py").write_text(
            f'"""FAKE {pkg} (a stand-in: only __version__)."""\nimport os\n\n__version__ = os.environ["{var}"]\n'
        )
    return bin_


def standin_env(
    root: Path,
    *,
    gpus: int = 1,
    gpu: str = H100,
    cc: str = "9.0",
    trtllm: str = TRTLLM,
    tensorrt: str = TENSORRT,
    host: str = "standin",
) -> dict[str, str]:
    """The environment of a GPU host / container made of stand-ins: `gpus` × `gpu` of compute capability `cc`,
    TensorRT-LLM `trtllm`, TensorRT `tensorrt`; HOME and the cache below root (hash stamps land there)."""
    bin_ = standin_bin(root)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STANDIN_")}
    env.update(
        {
            "PATH": f"{bin_}:{os.environ['PATH']}",
            "PYTHONPATH": str(root / "standin-site"),
            "HOME": str(root / "home"),
            "XDG_CACHE_HOME": str(root / "home" / ".cache"),
            "STANDIN_GPUS": "\n".join([f"{gpu};{cc}"] * gpus),
            "STANDIN_HOST": host,
            "STANDIN_TRTLLM_VERSION": trtllm,
            "STANDIN_TENSORRT_VERSION": tensorrt,
            "STANDIN_MPIRUN_ARGV": str(root / "mpirun.argv"),
        }
    )
    for knob in (
        "MODEL_REPO",
        "ENGINE_DIR",
        "CHECKPOINT_DIR",
        "TRITONSERVER",
        "HTTP_PORT",
        "GRPC_PORT",
        "METRICS_PORT",
        "PYTHON",
        "VERIFY_HASHES",
        "VERIFY_STAMP_DIR",
        "TRTLLM_BUILD",
    ):
        env.pop(knob, None)  # the bundle scripts' settings: only what a test sets
    return env


def read_argv(path: Path) -> list[str]:
    """NUL-separated words as the stand-ins record them."""
    return path.read_text().split("\0")[:-1]


def shellcheck() -> str | None:
    return shutil.which("shellcheck") or shutil.which("shellcheck", path=str(Path(sys.executable).parent))
