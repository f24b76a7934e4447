"""`trtspec doctor`: what this host has, and per backend whether trtspec can build and serve here — and why not.

trtspec installs in three homes (pyproject.toml): this CPU toolchain (`cpu`), NVIDIA's TensorRT-LLM containers
(`trtllm`), GPU hosts with TensorRT (`tensorrt`). The doctor reads the host once (`read_host`) and judges it with a
pure function (`judge`), so the verdicts are tested on made-up hosts:

    trtspec doctor           # one screen
    trtspec doctor --json    # the same facts and verdicts for machines

Nothing here may break on a broken install: versions come from distribution metadata (no import); torch and
TensorRT are imported only when their metadata or module is present, each in its own child interpreter with a
time limit (a library that raises, hangs or aborts on import becomes a fact, not a crash); TensorRT-LLM is never
imported (its import starts MPI and takes tens of seconds): its version comes from metadata or its version.py.
The version ranges judged against are the extras' own, read from pyproject.toml (a source checkout) or trtspec's
installed metadata: one source for what `pip install` asks and what the doctor expects.
"""

# trtllm: the host report checks every backend's tools and says per backend whether it can build/serve here

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import click

TRITONSERVER_HOME = Path("/opt/tritonserver")  # NVIDIA's Triton containers
PROBE_TIMEOUT_S = 120.0

# what the doctor reports: label -> distribution names (the first installed one counts)
DISTS = {
    "numpy": ("numpy",),
    "torch": ("torch",),
    "tensorrt": ("tensorrt", "tensorrt-cu13", "tensorrt-cu12"),
    "tensorrt_llm": ("tensorrt-llm",),
    "onnx": ("onnx",),
    "onnxruntime": ("onnxruntime", "onnxruntime-gpu"),
    "modelopt": ("nvidia-modelopt",),
    "transformers": ("transformers",),
    "safetensors": ("safetensors",),
    "triton": ("triton", "pytorch-triton"),
    "tritonclient": ("tritonclient",),
    "pydantic": ("pydantic",),
}
MODULES = {"tensorrt_llm": "tensorrt_llm", "tensorrt": "tensorrt", "triton": "triton", "torch": "torch"}

# child-interpreter probes: print one JSON line; an exception is reported, not raised
_TORCH_PROBE = """import json, torch
c = torch.cuda.is_available()
print(json.dumps({"version": torch.__version__, "cuda": torch.version.cuda, "cuda_available": c,
                  "devices": torch.cuda.device_count() if c else 0}))"""
TENSORRT_PROBE = """import json, importlib.util, tensorrt
plugin = importlib.util.find_spec("tensorrt.plugin") is not None
print(json.dumps({"version": tensorrt.__version__, "plugin": plugin}))"""


@dataclass(frozen=True)
class Host:
    """What the doctor judges: versions (None: absent), probe results, binaries, GPUs, the extras' ranges."""

    python: str
    versions: dict[str, str | None]
    torch_cuda: str | None = None  # torch.version.cuda (None: a CPU build, or torch absent/broken)
    cuda_available: bool = False
    torch_error: str | None = None  # why `import torch` failed here
    tensorrt_error: str | None = None  # why `import tensorrt` failed here
    tensorrt_plugin: bool = False  # tensorrt.plugin (the QDP API tree_verify is written against)
    gpus: list[tuple[str, tuple[int, int]]] = field(default_factory=list)
    tritonserver: str | None = None
    tensorrtllm_backend: str | None = None  # <tritonserver>/backends/tensorrtllm
    perf_analyzer: str | None = None
    trtllm_build: str | None = None
    ranges: dict[str, str] = field(default_factory=dict)  # "extra:dist" -> specifier, from pyproject / metadata
    releases: tuple[str, ...] = ()  # TensorRT-LLM versions in trtspec's release table


# -- reading the host --------------------------------------------------------------------------------------


def _version(names: tuple[str, ...]) -> str | None:
    from importlib import metadata

    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        except Exception:  # a damaged dist-info: report it as absent rather than stop
            continue
    return None


def _module_dir(module: str) -> Path | None:
    """The folder of an importable package, found without importing it."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin in (None, "namespace"):
        return None  # absent, or a bare namespace (e.g. what tensorrt-stubs leaves: .pyi files, no module)
    return Path(spec.origin).parent


def _trtllm_source_version(pkg: Path | None) -> str | None:
    """`__version__` from tensorrt_llm/version.py, read as text (NVIDIA's containers may lack the metadata)."""
    try:
        text = (pkg / "version.py").read_text(encoding="utf-8") if pkg else ""
    except OSError:
        return None
    m = re.search(r"""__version__\s*=\s*["']([^"']+)["']""", text)
    return m.group(1) if m else None


def probe(code: str, timeout: float = PROBE_TIMEOUT_S) -> tuple[dict | None, str | None]:
    """Run `code` in a child of this interpreter; (its JSON line, None) or (None, why it failed)."""
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"import did not finish in {timeout:.0f} s"
    except OSError as exc:
        return None, f"could not start {sys.executable}: {exc}"
    if done.returncode < 0:
        return None, f"import crashed the interpreter (signal {-done.returncode})"
    if done.returncode != 0:
        lines = [x for x in done.stderr.strip().splitlines() if x.strip()]
        return None, (lines[-1].strip() if lines else f"exit {done.returncode}")[:300]
    try:
        return json.loads(done.stdout.strip().splitlines()[-1]), None
    except (ValueError, IndexError):
        return None, f"unexpected probe output: {done.stdout.strip()[:200]!r}"


def declared_ranges() -> dict[str, str]:
    """ "extra:dist" -> specifier for every requirement of trtspec's extras ("core:dist" for the core)."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    lines: list[tuple[str, str]] = []
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    if pyproject.is_file():
        import tomllib

        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        lines = [("core", r) for r in project.get("dependencies", [])]
        lines += [(extra, r) for extra, reqs in project.get("optional-dependencies", {}).items() for r in reqs]
    else:
        from importlib import metadata

        try:
            for r in metadata.requires("trtspec") or []:
                m = re.search(r"""extra\s*==\s*["']([^"']+)["']""", r)
                lines.append((m.group(1) if m else "core", r))
        except metadata.PackageNotFoundError:
            pass
    out = {}
    for extra, line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        out[f"{extra}:{canonicalize_name(req.name)}"] = str(req.specifier)
    return out


def read_host() -> Host:
    """Everything `judge` needs, read without importing a heavy library in this process."""
    import platform

    from builder.recipe.trtllm import RELEASES
    from builder.serve.perf import find_perf_analyzer
    from builder.serve.server import find_tritonserver
    from builder.trtllm.compat import gpus_here

    versions = {label: _version(names) for label, names in DISTS.items()}
    dirs = {label: _module_dir(module) for label, module in MODULES.items()}
    if versions["tensorrt_llm"] is None and dirs["tensorrt_llm"] is not None:
        versions["tensorrt_llm"] = _trtllm_source_version(dirs["tensorrt_llm"]) or "unknown"
    facts: dict = {}
    if versions["torch"] or dirs["torch"]:
        got, err = probe(_TORCH_PROBE)
        if got:
            versions["torch"] = versions["torch"] or got["version"]
            facts.update(torch_cuda=got["cuda"], cuda_available=bool(got["cuda_available"]))
        facts["torch_error"] = err
    if versions["tensorrt"] or dirs["tensorrt"]:
        got, err = probe(TENSORRT_PROBE)
        if got:
            versions["tensorrt"] = versions["tensorrt"] or got["version"]
            facts["tensorrt_plugin"] = bool(got["plugin"])
        facts["tensorrt_error"] = err
    server = find_tritonserver()
    binary = server.binary if server else None
    if binary is None and (TRITONSERVER_HOME / "bin" / "tritonserver").is_file():
        binary = TRITONSERVER_HOME / "bin" / "tritonserver"
    backend = binary.resolve().parent.parent / "backends" / "tensorrtllm" if binary else None
    perf = find_perf_analyzer()
    return Host(
        python=platform.python_version(),
        versions=versions,
        gpus=gpus_here(),
        **facts,
        tritonserver=str(binary) if binary else None,
        tensorrtllm_backend=str(backend) if backend and backend.is_dir() else None,
        perf_analyzer=str(perf) if perf else None,
        trtllm_build=shutil.which("trtllm-build"),
        ranges=declared_ranges(),
        releases=tuple(RELEASES),
    )


# -- judging it --------------------------------------------------------------------------------------------


def _outside(host: Host, key: str, label: str) -> str | None:
    """ "<dist> X outside <extra>'s RANGE" when the installed version misses the extra's range."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    have, spec = host.versions.get(label), host.ranges.get(key)
    if not have or not spec:
        return None
    try:
        ok = SpecifierSet(spec).contains(Version(have), prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return None
    extra, dist = key.split(":")
    return None if ok else f"{dist} {have} is outside the {extra} extra's {spec}"


def _need(host: Host, *labels: str) -> list[str]:
    return [f"{label} not installed" for label in labels if not host.versions.get(label)]


def _cuda(host: Host) -> list[str]:
    """Why CUDA work cannot run here ([] when a GPU and a CUDA build of torch are both present)."""
    why = [] if host.gpus else ["no GPU (nvidia-smi lists none)"]
    if host.versions.get("torch") and not host.torch_error and not host.cuda_available:
        why.append("torch has no usable CUDA" + ("" if host.torch_cuda else " (a CPU build)"))
    return why


def _torch(host: Host) -> list[str]:
    if host.torch_error:
        return [f"torch not importable ({host.torch_error})"]
    return [] if host.versions.get("torch") else ["torch not installed"]


def _tensorrt(host: Host) -> list[str]:
    if host.tensorrt_error:
        return [f"tensorrt not importable ({host.tensorrt_error})"]
    if not host.versions.get("tensorrt"):
        return ["tensorrt not importable (not installed)"]
    why = [w for w in [_outside(host, "tensorrt:tensorrt", "tensorrt")] if w]
    return why + ([] if host.tensorrt_plugin else ["tensorrt has no tensorrt.plugin (the QDP API tree_verify uses)"])


def _trtllm(host: Host) -> list[str]:
    version = host.versions.get("tensorrt_llm")
    if not version:
        return ["tensorrt_llm not installed"]
    if host.releases and version not in host.releases:
        return [f"TensorRT-LLM {version} is not in trtspec's release table ({', '.join(host.releases)})"]
    return []


def judge(host: Host) -> dict[str, dict[str, list[str]]]:
    """backend -> {"build": reasons, "serve": reasons}; no reasons: it can. Also "quantize" (FP8 PTQ) -> build."""
    stages = _torch(host) + _need(host, "transformers", "safetensors")  # load (and checkpoint) before any engine
    server = [] if host.tritonserver else ["no tritonserver (PATH, /opt/tritonserver or the nvidia-pytriton wheel)"]
    out = {
        "onnxruntime": {
            "build": stages + _need(host, "onnx", "onnxruntime"),
            "serve": server + _need(host, "onnxruntime"),
        },
        "tensorrt": {
            "build": stages + _need(host, "onnx") + _tensorrt(host) + _need(host, "triton") + _cuda(host),
            "serve": server + _tensorrt(host) + _cuda(host),
        },
        "trtllm": {
            "build": stages
            + _trtllm(host)
            + ([] if host.trtllm_build else ["trtllm-build not on PATH"])
            + ([] if host.gpus else ["no GPU (nvidia-smi lists none)"]),
            "serve": server
            + _trtllm(host)
            + ([] if host.tensorrtllm_backend or not host.tritonserver else ["tritonserver has no tensorrtllm backend"])
            + ([] if host.gpus else ["no GPU (nvidia-smi lists none)"]),
        },
    }
    modelopt = _need(host, "modelopt") or [w for w in [_outside(host, "cpu:nvidia-modelopt", "modelopt")] if w]
    out["quantize"] = {"build": _torch(host) + _need(host, "transformers") + modelopt}
    return out


# -- showing it --------------------------------------------------------------------------------------------


def _rows(host: Host) -> list[tuple[str, str]]:
    v = host.versions

    def ver(label: str, extra: str = "") -> str:
        return f"{v[label]}{extra}" if v.get(label) else "not installed"

    if host.torch_error:
        torch = f"{v['torch'] or '?'} (import fails: {host.torch_error})"
    elif not v.get("torch"):
        torch = "not installed"
    else:
        cuda = f"CUDA {host.torch_cuda}, {'available' if host.cuda_available else 'not available'}"
        torch = f"{v['torch']} ({cuda if host.torch_cuda else 'CPU build'})"
    gpus = ", ".join(f"{name} (sm{cc[0]}{cc[1]})" for name, cc in host.gpus) or "none (nvidia-smi lists none)"
    trt = (
        ver("tensorrt") if not host.tensorrt_error else f"{v['tensorrt'] or '?'} (import fails: {host.tensorrt_error})"
    )
    trtllm = ver("tensorrt_llm") + (f", trtllm-build {host.trtllm_build}" if host.trtllm_build else ", no trtllm-build")
    server = host.tritonserver or "not found"
    if host.tritonserver:
        server += " (tensorrtllm backend)" if host.tensorrtllm_backend else ""
    modelopt = ver(
        "modelopt",
        f" (quantize supports {host.ranges['cpu:nvidia-modelopt']})" if host.ranges.get("cpu:nvidia-modelopt") else "",
    )
    return [
        ("Python", host.python),
        ("NumPy", ver("numpy")),
        ("torch", torch),
        ("GPUs", gpus),
        ("TensorRT", trt),
        ("TensorRT-LLM", trtllm),
        ("tritonserver", server),
        ("perf_analyzer", host.perf_analyzer or "not found"),
        ("onnxruntime", ver("onnxruntime")),
        ("modelopt", modelopt),
        ("transformers", ver("transformers")),
        ("triton (kernels)", ver("triton")),
    ]


def _verdict(reasons: list[str]) -> str:
    return "yes" if not reasons else "no: " + "; ".join(reasons)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the facts and verdicts as one JSON object.")
def doctor(as_json: bool) -> None:
    """What this host has (Python, NumPy, torch + CUDA, GPUs, TensorRT, TensorRT-LLM, tritonserver, modelopt …) and,
    per backend, whether trtspec can build and serve here — and why not. Always exits 0."""
    host = read_host()
    verdicts = judge(host)
    if as_json:
        doc = {
            "host": asdict(host),
            "backends": {b: {k: {"ok": not r, "why": r} for k, r in v.items()} for b, v in verdicts.items()},
        }
        click.echo(json.dumps(doc, indent=2))
        return
    for label, value in _rows(host):
        click.echo(f"{label:17s}{value}")
    click.echo("")
    for backend in ("onnxruntime", "tensorrt", "trtllm"):
        click.echo(f"{backend:12s} build: {_verdict(verdicts[backend]['build'])}")
        click.echo(f"{'':12s} serve: {_verdict(verdicts[backend]['serve'])}")
    where = "on the GPU" if host.gpus and host.cuda_available else "on the CPU in fp32 (small models only)"
    quantize = verdicts["quantize"]["build"]
    click.echo(f"{'FP8 PTQ':12s} {'yes, ' + where if not quantize else _verdict(quantize)}")
    click.echo(
        f"{'deploy':12s} yes: `trtspec deploy` writes a TensorRT-LLM bundle anywhere; it builds in the pinned container"
    )
