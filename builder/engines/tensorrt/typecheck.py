"""Type-check the TensorRT adapter without TensorRT: mypy --strict against tensorrt-stubs (repaired in a
temporary MYPYPATH by `plugins.tree_verify.typecheck`, which also stubs `tensorrt.plugin`).

    python -m builder.engines.tensorrt.typecheck [files...]     (default: this package + its shared module)

Checked strictly: every module of this package and the backend-neutral modules it runs
(`builder.engines.batched` with `bindings`, `builder.engines.eagle_host`, `builder.engines.opened`).
The trtspec modules they import are analysed for their types but not reported on (`follow_imports =
silent`: other engineers' modules have their own checks); torch, triton and numpy are skipped (Any).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Sequence

HERE = Path(__file__).resolve().parent
SHARED = (
    "batched.py",
    "bindings.py",
    "eagle_host.py",
    "opened.py",
)  # builder/engines/: the host side the engines run
FILES = (*sorted(p for p in HERE.glob("*.py") if p.name != "typecheck.py"), *(HERE.parent / n for n in SHARED))
EXTRA_CONFIG = """
[mypy-builder.*,plugins.*,tests.*]
follow_imports = silent

[mypy-builder.engines.tensorrt.*,builder.engines.batched,builder.engines.bindings,builder.engines.eagle_host,builder.engines.opened]
follow_imports = normal

[mypy-onnx.*,onnxruntime.*,tokenizers.*,transformers.*,safetensors.*,huggingface_hub.*,pydantic.*,yaml.*]
follow_imports = skip
ignore_missing_imports = True
"""


def run(files: Sequence[str | Path] = FILES, work: Path | None = None) -> subprocess.CompletedProcess[str]:
    from plugins.tree_verify.typecheck import run_mypy

    if work is not None:
        return run_mypy(files, work, EXTRA_CONFIG)
    with tempfile.TemporaryDirectory() as tmp:
        return run_mypy(files, Path(tmp), EXTRA_CONFIG)


def main(argv: Sequence[str] | None = None) -> int:
    result = run(list(argv) if argv else FILES)
    print(result.stdout + result.stderr, end="")
    return result.returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
