"""The preflight: what this host has, as facts the later steps' `needs` are read from, one PREFLIGHT line and
the known hazards.

Facts (`have[name]` true / false, `why[name]` the reason when false):

    cuda            torch with CUDA and at least one visible GPU
    triton          OpenAI Triton importable (the tree_verify kernel)
    tensorrt        TensorRT >= 10.15 with tensorrt.plugin (builder.engines.tensorrt.probe's rule)
    tensorrt_llm    the tensorrt_llm package installed (not imported here: it takes seconds and prints)
    trtspec         the CLI's imports work (pydantic, PyYAML, click, rich, NumPy): `python -m builder.cli`
    pydantic        pydantic v2 importable
    modelopt        nvidia-modelopt installed with every package it requires at import (pulp, omegaconf, ...),
                    read from its metadata (importing it costs ~15 s)
    onnx, onnxruntime, ml_dtypes, pytest, numpy   importable

Nothing here creates a CUDA context beyond torch's device queries, and no import that can take long (tensorrt_llm,
modelopt) is made: the preflight must answer in seconds on any host, including one with none of these.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata as md
import importlib.util
import os
import platform
import re
import sys
from pathlib import Path
from typing import Any

from devtools.gpu_check.steps import PASS, REPO, Context, Verdict

FACTS = (
    "cuda",
    "triton",
    "tensorrt",
    "tensorrt_llm",
    "trtspec",
    "pydantic",
    "modelopt",
    "onnx",
    "onnxruntime",
    "ml_dtypes",
    "pytest",
    "numpy",
)
MIN_TENSORRT = (10, 15)  # builder.engines.tensorrt.probe.MIN_VERSION: native attention / RoPE / KV-update layers
NUMPY_INT_OF_ARRAY = (2, 4)  # NumPy >= 2.4 refuses int() of a 1-element array (deprecated since 1.25)
PLUGIN_SOURCE = REPO / "plugins" / "tree_verify" / "trt_plugin.py"


def version_tuple(text: str) -> tuple[int, ...]:
    """(10, 15, 1) from "10.15.1.29"; leading digits of each dotted part (a "+cu130" / "rc1" tail is ignored)."""
    out = []
    for part in text.split("."):
        m = re.match(r"\d+", part)
        if m is None:
            break
        out.append(int(m.group()))
    return tuple(out)


def dist_version(*names: str) -> str | None:
    for name in names:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            continue
    return None


def missing_requirements(dist: str) -> list[str]:
    """Requirements of installed distribution `dist` (no extras, markers true here) that are not installed."""
    missing = []
    for req in md.requires(dist) or []:
        spec, _, marker = req.partition(";")
        if "extra" in marker or not _marker_true(marker.strip()):
            continue
        name = re.split(r"[\s<>=!~\[(]", spec.strip(), maxsplit=1)[0]
        if dist_version(name, name.replace("-", "_"), name.replace("_", "-")) is None:
            missing.append(name)
    return missing


def _marker_true(marker: str) -> bool:
    """The few environment markers modelopt-like metadata use: python_version / sys_platform comparisons."""
    if not marker:
        return True
    m = re.fullmatch(r"(python_version|sys_platform|platform_system)\s*(==|!=|<=|>=|<|>)\s*[\"']([^\"']+)[\"']", marker)
    if m is None:
        return True  # unknown marker: assume it applies (a requirement reported missing is the safe side)
    key, op, value = m.groups()
    here: Any = {
        "python_version": version_tuple(platform.python_version())[:2],
        "sys_platform": sys.platform,
        "platform_system": platform.system(),
    }[key]
    there: Any = version_tuple(value) if key == "python_version" else value
    return bool(
        {
            "==": here == there,
            "!=": here != there,
            "<=": here <= there,
            ">=": here >= there,
            "<": here < there,
            ">": here > there,
        }[op]
    )


def plugin_mode_annotation(path: Path = PLUGIN_SOURCE) -> str | None:
    """The annotation of the `mode` attribute in the tree_verify plugin's registered functions (source text)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.decorator_list:
            for arg in node.args.args + node.args.kwonlyargs:
                if arg.arg == "mode" and arg.annotation is not None:
                    return ast.unparse(arg.annotation)
    return None


class _Facts:
    def __init__(self, site: str | None) -> None:
        self.have: dict[str, bool] = {}
        self.why: dict[str, str] = {}
        self.versions: dict[str, str | None] = {}
        self.origin: dict[str, str] = {}
        self.site = site
        self.modules: dict[str, Any] = {}

    def imp(self, fact: str, module: str, version_of: str | None = None) -> Any:
        """Import `module`; set have[fact] and its version (from the module or distribution `version_of`)."""
        try:
            mod = importlib.import_module(module)
        except Exception as exc:  # ImportError, or a broken install raising anything at import
            self.have[fact], self.why[fact] = False, f"import {module} failed: {type(exc).__name__}: {exc}"[:300]
            self.versions[fact] = None
            return None
        self.have[fact] = True
        self.versions[fact] = getattr(mod, "__version__", None) or (dist_version(version_of) if version_of else None)
        path = str(getattr(mod, "__file__", "") or "")
        if self.site and path.startswith(self.site):
            self.origin[fact] = "wheelhouse"
        return mod


def collect(site: str | None = None) -> dict[str, Any]:
    """Every fact (module docstring), the GPUs and the hazards, as JSON-ready data."""
    f = _Facts(site)
    f.imp("numpy", "numpy")
    f.imp("pydantic", "pydantic")
    torch = f.imp("torch", "torch")
    gpus: list[dict[str, Any]] = []
    cuda_build = None
    if torch is not None:
        cuda_build = getattr(torch.version, "cuda", None)
        try:
            n = torch.cuda.device_count() if torch.cuda.is_available() else 0
            for i in range(n):
                p = torch.cuda.get_device_properties(i)
                gpus.append(
                    {
                        "index": i,
                        "name": p.name,
                        "capability": f"{p.major}.{p.minor}",
                        "memory_gib": round(p.total_memory / 2**30, 1),
                        "sms": p.multi_processor_count,
                    }
                )
        except Exception as exc:  # a driver / runtime mismatch shows up here
            f.why["cuda"] = f"torch.cuda failed: {type(exc).__name__}: {exc}"[:300]
    f.have["cuda"] = bool(gpus)
    if not gpus:
        hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
        f.why.setdefault(
            "cuda",
            "torch is not installed"
            if torch is None
            else f"no CUDA device (torch {torch.__version__}"
            + (f", CUDA_VISIBLE_DEVICES={hidden!r})" if hidden is not None else ")"),
        )
    f.imp("triton", "triton")
    trt = f.imp("tensorrt", "tensorrt")
    if trt is not None:
        version = str(getattr(trt, "__version__", "") or "")
        f.versions["tensorrt"] = version or None
        if not hasattr(trt, "Builder"):
            f.have["tensorrt"], f.why["tensorrt"] = False, "only type stubs (tensorrt-stubs): no tensorrt.Builder"
        elif version_tuple(version)[:2] < MIN_TENSORRT:
            f.have["tensorrt"] = False
            f.why["tensorrt"] = f"tensorrt {version} < {'.'.join(map(str, MIN_TENSORRT))} (no native attention layers)"
        else:
            try:
                importlib.import_module("tensorrt.plugin")
            except Exception as exc:
                f.have["tensorrt"], f.why["tensorrt"] = False, f"import tensorrt.plugin failed: {exc}"[:300]
    llm = importlib.util.find_spec("tensorrt_llm")
    f.have["tensorrt_llm"] = llm is not None
    f.versions["tensorrt_llm"] = dist_version("tensorrt_llm", "tensorrt-llm") if llm else None
    if llm is None:
        f.why["tensorrt_llm"] = "tensorrt_llm is not installed (NVIDIA's tritonserver:<yy.mm>-trtllm-python-py3 has it)"
    try:
        importlib.import_module("builder.cli")
        importlib.import_module("builder.recipe.loader")
        f.have["trtspec"] = True
    except Exception as exc:
        f.have["trtspec"] = False
        f.why["trtspec"] = f"the trtspec CLI does not import: {type(exc).__name__}: {exc}"[:300]
    mo = dist_version("nvidia-modelopt", "nvidia_modelopt")
    f.versions["modelopt"] = mo
    if mo is None:
        f.have["modelopt"], f.why["modelopt"] = False, "nvidia-modelopt is not installed"
    else:
        lacking = missing_requirements("nvidia-modelopt")
        f.have["modelopt"] = not lacking
        if lacking:
            f.why["modelopt"] = f"nvidia-modelopt {mo} lacks {', '.join(lacking)}"
    f.imp("onnx", "onnx")
    ort = f.imp("onnxruntime", "onnxruntime")
    providers = list(ort.get_available_providers()) if ort is not None else []
    f.imp("ml_dtypes", "ml_dtypes", "ml_dtypes")
    f.imp("pytest", "pytest")
    facts = {
        "python": platform.python_version(),
        "executable": sys.executable,
        "platform": platform.platform(),
        "have": {k: bool(f.have.get(k)) for k in FACTS},
        "why": f.why,
        "versions": f.versions,
        "origin": f.origin,
        "gpus": gpus,
        "cuda_build": cuda_build,
        "onnxruntime_providers": providers,
        "plugin_mode_annotation": plugin_mode_annotation(),
        "triton_interpret": os.environ.get("TRITON_INTERPRET"),
        "nvidia_device_nodes": Path("/dev/nvidiactl").exists(),
    }
    facts["hazards"] = hazards(facts)
    facts["device_kind"] = device_kind(gpus[0]["name"] if gpus else "")
    return facts


def hazards(facts: dict[str, Any]) -> list[str]:
    """Known traps on this host, one sentence each (what breaks, where it was seen or documented)."""
    have, v = facts["have"], facts["versions"]
    out = []
    numpy = version_tuple(v.get("numpy") or "")
    mode = facts.get("plugin_mode_annotation")
    if numpy and numpy[:2] >= NUMPY_INT_OF_ARRAY and mode == "int":
        where = "here" if have["tensorrt"] else "wherever TensorRT runs it"
        out.append(
            f"NumPy {v['numpy']} >= 2.4 with tensorrt.plugin: an int-annotated QDP attribute arrives from the "
            f"ONNX parser as a 1-element array and int() of it raises TypeError; plugins/tree_verify/"
            f"trt_plugin.py annotates `mode` as int, so TreeVerify fails to parse/build/deserialize {where}"
        )
    if not have["pydantic"]:
        out.append(
            "no pydantic: the trtspec CLI does not import, so the quantize, engine and TensorRT-LLM steps SKIP "
            "(carry the wheelhouse: scripts/wheelhouse.sh .whl, then run with .whl in place)"
        )
    elif not have["trtspec"]:
        out.append(
            f"{facts['why'].get('trtspec', 'the trtspec CLI does not import')}: the quantize, engine and "
            "TensorRT-LLM steps SKIP"
        )
    if not have["tensorrt"]:
        out.append("no TensorRT >= 10.15: the TensorRT probes and engine steps SKIP (they run on a TensorRT host)")
    if not have["cuda"]:
        out.append("no CUDA device: every GPU step SKIPs")
    if have["cuda"] and facts.get("triton_interpret") not in (None, "", "0"):
        out.append("TRITON_INTERPRET is set on a GPU host: the kernel would run in Triton's interpreter (unset it)")
    if facts.get("nvidia_device_nodes") and not have["cuda"]:
        out.append(
            f"an NVIDIA device node exists (/dev/nvidiactl) but torch sees no GPU: {facts['why'].get('cuda')} "
            "(a CPU build of torch, or a driver older than its CUDA)"
        )
    if v.get("modelopt") and not have["modelopt"]:
        out.append(f"{facts['why']['modelopt']}: the FP8 calibration step SKIPs")
    return out


def device_kind(gpu_name: str) -> str:
    """target.device for a GPU name (recipe schema: h100 | h100-pcie | h200 | a100 | l40s); h100 when unknown."""
    name = gpu_name.upper()
    for needle, kind in (
        ("H200", "h200"),
        ("H100 PCIE", "h100-pcie"),
        ("H100", "h100"),
        ("A100", "a100"),
        ("L40S", "l40s"),
    ):
        if needle in name:
            return kind
    return "h100"


def line(facts: dict[str, Any]) -> str:
    """The one PREFLIGHT line."""
    v, have, why, origin = facts["versions"], facts["have"], facts["why"], facts["origin"]

    def item(name: str, label: str | None = None) -> str:
        label = label or name
        if v.get(name):
            tail = " (wheelhouse)" if origin.get(name) == "wheelhouse" else ""
            ok = "" if have.get(name, True) else f" [unusable: {why.get(name, '?')}]"
            return f"{label} {v[name]}{tail}{ok}"
        return f"{label} absent"

    gpus = (
        "; ".join(
            f"GPU{g['index']} {g['name']} sm{g['capability'].replace('.', '')} {g['memory_gib']} GiB"
            for g in facts["gpus"]
        )
        or f"no GPU ({why.get('cuda', '?')})"
    )
    torch = item("torch") + (f" (CUDA {facts['cuda_build']})" if facts.get("cuda_build") else "")
    ort = item("onnxruntime") + (f" [{','.join(facts['onnxruntime_providers'])}]" if v.get("onnxruntime") else "")
    parts = [
        f"python {facts['python']}",
        item("numpy"),
        torch,
        gpus,
        item("triton"),
        item("tensorrt"),
        item("tensorrt_llm"),
        item("pydantic"),
        ort,
        item("onnx"),
        item("modelopt"),
        item("ml_dtypes"),
        f"trtspec CLI {'yes' if have['trtspec'] else 'no'}",
    ]
    return " · ".join(parts)


def preflight_step(ctx: Context) -> Verdict:
    site = str(Path(ctx.work_dir)) if ctx.work_dir else None
    facts = collect(site)
    return Verdict(
        PASS,
        f"{len(facts['gpus'])} GPU(s); facts {sum(facts['have'].values())}/{len(FACTS)} hold; "
        f"{len(facts['hazards'])} hazard(s)",
        {"facts": facts, "line": line(facts), "hazards": facts["hazards"]},
    )


if __name__ == "__main__":
    import json

    print(json.dumps(collect(), indent=1, default=str))
