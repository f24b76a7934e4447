"""Type-check the TensorRT face without TensorRT: mypy against tensorrt-stubs plus our stub of
`tensorrt.plugin` (this is how CI checks `trt_plugin.py`; `python -m plugins.tree_verify.typecheck`).

tensorrt-stubs 10.13.0.35.1 installs `tensorrt/__init__.pyi` and `tensorrt_bindings/*.pyi` straight
into site-packages without a py.typed marker, so mypy skips them ("missing library stubs"), and
its `tensorrt.pyi` does not parse (parameters named `in`; `add_scale_nd` puts a parameter without a
default after defaulted ones). `stub_root` copies them into a folder for MYPYPATH with exactly those
lines repaired, adds an empty `tensorrt_libs` stub and `stubs/tensorrt/plugin/__init__.pyi`.
Note that the same layout makes `import tensorrt` succeed here as an empty namespace package:
probe `tensorrt.Builder` or `tensorrt.plugin`, not the bare import, to tell whether TensorRT is present.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Sequence

HERE = Path(__file__).resolve().parent
MYPY_INI = """\
[mypy]
python_version = 3.11
strict = True
warn_unreachable = True

[mypy-tensorrt_bindings.*,tensorrt_libs]
ignore_errors = True

[mypy-torch.*,triton.*,numpy.*,plugins.tree_verify.kernel,plugins.tree_verify.reference]
follow_imports = skip
"""


def _installed_stubs() -> tuple[Path, Path]:
    for entry in map(Path, sys.path):
        if (entry / "tensorrt" / "__init__.pyi").is_file() and (entry / "tensorrt_bindings").is_dir():
            return entry / "tensorrt" / "__init__.pyi", entry / "tensorrt_bindings"
    raise FileNotFoundError("tensorrt-stubs is not installed (pip install tensorrt-stubs)")


def stub_root(dest: Path, extra_config: str = "") -> Path:
    """Write a MYPYPATH folder (tensorrt + tensorrt_bindings stubs, repaired; tensorrt.plugin stub) with
    mypy.ini (MYPY_INI, then `extra_config`: further per-module sections)."""
    trt_init, bindings = _installed_stubs()
    (dest / "tensorrt").mkdir(parents=True, exist_ok=True)
    (dest / "tensorrt_bindings").mkdir(exist_ok=True)
    shutil.copyfile(trt_init, dest / "tensorrt" / "__init__.pyi")
    for stub in bindings.glob("*.pyi"):
        text = re.sub(r"([(,] *)in:", r"\1in_:", stub.read_text())  # `in` is a keyword
        text = text.replace("channel_axis: int) -> IScaleLayer", "channel_axis: int = ...) -> IScaleLayer")
        (dest / "tensorrt_bindings" / stub.name).write_text(text)
    (dest / "tensorrt_libs.pyi").write_text("")
    shutil.copytree(HERE / "stubs" / "tensorrt" / "plugin", dest / "tensorrt" / "plugin", dirs_exist_ok=True)
    (dest / "mypy.ini").write_text(MYPY_INI + extra_config)
    return dest


def run_mypy(files: Sequence[str | Path], work: Path, extra_config: str = "") -> subprocess.CompletedProcess[str]:
    """Run mypy (this interpreter's) on `files` against the stub root built under `work`."""
    root = stub_root(work / "stubs", extra_config)
    cmd = [sys.executable, "-m", "mypy", "--config-file", str(root / "mypy.ini"), "--cache-dir", str(work / "cache"),
           *map(str, files)]  # fmt: skip
    env = {"MYPYPATH": str(root), "PATH": "/usr/bin:/bin"}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=HERE.parent.parent, check=False)


def main(argv: Sequence[str] | None = None) -> int:
    import tempfile

    files: list[str | Path] = list(argv) if argv else [HERE / "trt_plugin.py"]
    with tempfile.TemporaryDirectory() as tmp:
        result = run_mypy(files, Path(tmp))
    print(result.stdout + result.stderr, end="")
    return result.returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
