"""Type-check the TensorRT face without TensorRT: mypy against tensorrt-stubs plus our stub of
`tensorrt.plugin` (this is how CI checks `trt_plugin.py`; `python -m plugins.tree_verify.typecheck`).

tensorrt-stubs 10.13.0.35.1 installs `tensorrt/__init__.pyi` and `tensorrt_bindings/*.pyi` straight
into site-packages without a py.typed marker, so mypy skips them ("missing library stubs"), and
its `tensorrt.pyi` does not parse (parameters named `in`; `add_scale_nd` puts a parameter without a
default after defaulted ones). `stub_root` copies them into a folder for MYPYPATH with exactly those
lines repaired, adds an empty `tensorrt_libs` stub and `stubs/tensorrt/plugin/__init__.pyi`.
Note that the same layout makes `import tensorrt` succeed here as an empty namespace package:
probe `tensorrt.Builder` or `tensorrt.plugin`, not the bare import, to tell whether TensorRT is present.

The `tensorrt.plugin` stub is checked against TensorRT's own Python source: the pure-Python package ships as
`tensorrt_bindings/plugin/*.py` inside the `tensorrt-cu13-bindings` wheels (`pip download --no-deps`; readable,
not importable here). `plugin_api` reads its public API (every `@public_api()` function and class, classes
with their in-package bases' members) without importing it; `stubs/tensorrt_plugin_api.json` records that
API per checked wheel (version, file name, sha256, files read), and `stub_mismatches` lists every name or
signature of the stub that the recorded API does not have (tests/unit/test_plugin_mypy.py). To record a new
wheel: `python -m plugins.tree_verify.typecheck --record-plugin-api WHEEL...`.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

HERE = Path(__file__).resolve().parent
PLUGIN_STUB = HERE / "stubs" / "tensorrt" / "plugin" / "__init__.pyi"
PLUGIN_API = HERE / "stubs" / "tensorrt_plugin_api.json"
WHEEL_PLUGIN_DIR = "tensorrt_bindings/plugin/"
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
    cmd = [
        sys.executable,
        "-m",
        "mypy",
        "--config-file",
        str(root / "mypy.ini"),
        "--cache-dir",
        str(work / "cache"),
        *map(str, files),
    ]
    env = {"MYPYPATH": str(root), "PATH": "/usr/bin:/bin"}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=HERE.parent.parent, check=False)


# -- the tensorrt.plugin stub against TensorRT's own source --------------------------------------------------

Api = dict[str, Any]  # {"functions": {name: params}, "classes": {name: {member: "property" | "[classmethod ]params"}}}


def _params(args: ast.arguments) -> str:
    """A signature's parameters as text: names in order, "=" after those with a default, "*" / "**" before
    variadic ones, a bare "*" before keyword-only ones (e.g. "self, io_types=, *, strict=, **kw")."""
    pos = [*args.posonlyargs, *args.args]
    defaults = [False] * (len(pos) - len(args.defaults)) + [True] * len(args.defaults)
    out = [a.arg + ("=" if d else "") for a, d in zip(pos, defaults)]
    out += [f"*{args.vararg.arg}"] if args.vararg else (["*"] if args.kwonlyargs else [])
    out += [a.arg + ("" if d is None else "=") for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    out += [f"**{args.kwarg.arg}"] if args.kwarg else []
    return ", ".join(out)


def _public(name: str) -> bool:
    return not name.startswith("_") or (name.startswith("__") and name.endswith("__"))


def _members(cls: ast.ClassDef) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in cls.body:
        if not isinstance(item, ast.FunctionDef) or not _public(item.name):
            continue
        names = {d.id for d in item.decorator_list if isinstance(d, ast.Name)}
        if any(isinstance(d, ast.Attribute) for d in item.decorator_list):  # @x.setter: x stays a property
            continue
        kind = next((k for k in ("property", "classmethod", "staticmethod") if k in names), "")
        out[item.name] = "property" if kind == "property" else f"{kind} ({_params(item.args)})".lstrip()
    return out


def _defs(body: Sequence[ast.stmt]) -> Iterator[ast.stmt]:
    """Module-level definitions, including those under `if` (TensorRT guards its AOT API by version)."""
    for node in body:
        if isinstance(node, ast.If):
            yield from _defs([*node.body, *node.orelse])
        else:
            yield node


def _api(modules: Sequence[ast.Module], exported: Any) -> Api:
    """Functions and classes that `exported(node)` accepts; classes flattened over bases defined here too."""
    classes = {n.name: n for m in modules for n in _defs(m.body) if isinstance(n, ast.ClassDef)}

    def flat(name: str) -> dict[str, str]:
        node = classes[name]
        out: dict[str, str] = {}
        for base in reversed(node.bases):
            if isinstance(base, ast.Name) and base.id in classes:
                out |= flat(base.id)
        return out | _members(node)

    nodes = [n for m in modules for n in _defs(m.body) if exported(n)]
    return {
        "functions": {n.name: _params(n.args) for n in nodes if isinstance(n, ast.FunctionDef)},
        "classes": {n.name: flat(n.name) for n in nodes if isinstance(n, ast.ClassDef)},
    }


def _is_public_api(node: ast.stmt) -> bool:
    """Decorated `@public_api()` (TensorRT's `_export.public_api` puts the name into `tensorrt.plugin`)."""
    if not isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return False
    calls = [d.func for d in node.decorator_list if isinstance(d, ast.Call)]
    return any(isinstance(f, ast.Name) and f.id == "public_api" for f in calls)


def plugin_api(sources: Mapping[str, str]) -> Api:
    """The public API of TensorRT's `tensorrt.plugin` from its source files (file name -> text)."""
    import warnings

    with warnings.catch_warnings():  # its docstrings hold invalid escapes ("\\s"): a warning, not our concern
        warnings.simplefilter("ignore", SyntaxWarning)
        warnings.simplefilter("ignore", DeprecationWarning)  # (Python 3.11 calls it that)
        modules = [ast.parse(text) for _, text in sorted(sources.items())]
    return _api(modules, _is_public_api)


def stub_api(stub: str) -> Api:
    """What our stub declares (its public functions and classes)."""
    return _api([ast.parse(stub)], lambda n: isinstance(n, (ast.FunctionDef, ast.ClassDef)) and _public(n.name))


def stub_mismatches(stub: Api, real: Api) -> list[str]:
    """Every function, class, member or signature of `stub` that `real` lacks or declares otherwise."""
    out = []
    for name, params in stub["functions"].items():
        if name not in real["functions"]:
            out.append(f"function {name}: not in tensorrt.plugin")
        elif params != real["functions"][name]:
            out.append(f"function {name}({params}): tensorrt.plugin has ({real['functions'][name]})")
    for cls, members in stub["classes"].items():
        theirs = real["classes"].get(cls)
        if theirs is None:
            out.append(f"class {cls}: not in tensorrt.plugin")
            continue
        for name, member in members.items():
            if name not in theirs:
                out.append(f"{cls}.{name}: not in tensorrt.plugin")
            elif member != theirs[name]:
                out.append(f"{cls}.{name} {member}: tensorrt.plugin has {theirs[name]}")
    return out


def wheel_record(wheel: Path) -> dict[str, Any]:
    """The recorded form of one bindings wheel: its name, sha256, the plugin files read and their API."""
    with zipfile.ZipFile(wheel) as z:
        sources = {n: z.read(n).decode() for n in z.namelist() if n.startswith(WHEEL_PLUGIN_DIR) and n.endswith(".py")}
    if not sources:
        raise ValueError(f"{wheel}: no {WHEEL_PLUGIN_DIR}*.py (not a tensorrt-cuXX-bindings wheel?)")
    version = wheel.name.split("-")[1]
    return {
        "version": version,
        "wheel": wheel.name,
        "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
        "files": sorted(sources),
        "api": plugin_api(sources),
    }


def recorded_api() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(PLUGIN_API.read_text(encoding="utf-8"))
    return data


def record_plugin_api(wheels: Sequence[Path]) -> None:
    data = recorded_api() if PLUGIN_API.is_file() else {"versions": {}}
    data["about"] = (
        f"public API of tensorrt.plugin read (not imported) from {WHEEL_PLUGIN_DIR}*.py in "
        "tensorrt-cu13-bindings wheels (pip download --no-deps), by plugins.tree_verify.typecheck."
        "wheel_record; params: names in order, '=' marks a default"
    )
    for wheel in wheels:
        rec = wheel_record(Path(wheel))
        data["versions"][rec["version"]] = rec
    PLUGIN_API.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    import tempfile

    args = list(argv or [])
    if args[:1] == ["--record-plugin-api"]:
        record_plugin_api([Path(a) for a in args[1:]])
        return 0
    files: list[str | Path] = list(args) if args else [HERE / "trt_plugin.py"]
    with tempfile.TemporaryDirectory() as tmp:
        result = run_mypy(files, Path(tmp))
    print(result.stdout + result.stderr, end="")
    return result.returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
