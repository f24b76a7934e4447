"""Scale check of export and the ONNX Runtime engine: a Llama-3-8B-width model cut to 2 layers.

hidden 4096, 32/8 heads (D 128), intermediate 14336, vocab 128256, untied LM head, random weights
(N(0, 0.02), norms 1), built directly as `builder.model.llama.Llama` in fp32: 1.49 G parameters, 5.95 GB
(the embeddings and the LM head are 4.2 GB of it). FP8: the decoder linears quantized per tensor
(amax / 448, as modelopt's FP8_DEFAULT_CFG does; not run through modelopt itself, whose HF path would
need a second 6 GB copy), input and KV scales from one fp32 pass over random tokens; LM head and
embeddings stay fp32 (the recipes' default exclude_modules).

Each measurement runs in its own subprocess (`python -m devtools.bench.scale PHASE …`, one JSON line
out), so peak RSS is that phase's alone:
* export — build the model (and the FP8 spec), reset the kernel's high-water mark
  (/proc/self/clear_refs), export the standard greedy target graph; time, VmHWM (the model itself
  included), the files' sizes;
* engine — open an ORT session on the ORT-ready graph (time, RSS), then time one step at T = 1, 4, 16
  (a random tree after `PAST` committed slots; caches bound in place) with 1 or 2 intra-op threads.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from builder.timing import markdown_table

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "num_hidden_layers": 2,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": False,
}
CAPACITY, PAST = 256, 128
NODES = (1, 4, 16)


def _status(field: str) -> int:  # bytes, from /proc/self/status (VmHWM, VmRSS)
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def config():
    from builder.model.config import LlamaConfig

    return LlamaConfig.from_hf_dict(CONFIG, "bench config")


def make_model(seed: int = 0):
    """The random fp32 model (weights written in place: no init pass, no copy)."""
    import torch

    from builder.model.llama import Llama

    with torch.device("meta"):
        model = Llama(config())
    model.to_empty(device="cpu")
    model.inv_freq = model.inv_freq.to("cpu") if model.inv_freq.device.type != "meta" else _inv_freq(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.fill_(1.0) if name.endswith("norm.weight") else p.normal_(0, 0.02, generator=gen)
    return model.eval()


def _inv_freq(model):
    from builder.model.llama import rope_inv_freq

    return rope_inv_freq(model.cfg)


def fp8_spec(model, seed: int = 0):
    """Per-tensor FP8 decoder linears and input / KV scales from one fp32 pass (module docstring)."""
    import ml_dtypes
    import numpy as np
    import torch

    from builder.export.qdq import FP8_MAX, Fp8Spec, LinearFp8
    from builder.model.kv_cache import KVCache
    from builder.model.llama import causal_mask

    cfg, hooks = model.cfg, []
    amax: dict[str, float] = {}
    names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n.startswith("layers.")]
    for n in names:
        hooks.append(
            model.get_submodule(n).register_forward_pre_hook(
                lambda _m, args, n=n: amax.__setitem__(n, float(args[0].abs().max()))
            )
        )
    T = 16
    tokens = torch.randint(0, cfg.vocab_size, (1, T), generator=torch.Generator().manual_seed(seed))
    cache = KVCache(cfg.num_hidden_layers, 1, cfg.num_key_value_heads, cfg.head_dim, T, torch.float32)
    with torch.no_grad():
        model(tokens, torch.arange(T)[None], causal_mask(T), cache=cache)
    for h in hooks:
        h.remove()
    linears = {}
    for n in names:
        w = model.get_submodule(n).weight.detach()
        s = (w.abs().max() / FP8_MAX).float()
        q = (w / s).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).view(torch.uint8).numpy()  # e4m3 bytes
        linears[n] = LinearFp8(
            q.view(ml_dtypes.float8_e4m3fn), np.array(s.item(), np.float32), np.array(amax[n] / FP8_MAX, np.float32)
        )
    kv = {
        i: (float(cache.k[i].abs().max()) / FP8_MAX, float(cache.v[i].abs().max()) / FP8_MAX)
        for i in range(cfg.num_hidden_layers)
    }
    return Fp8Spec(linears, kv)


def phase_export(out_dir: str, fp8: bool) -> dict[str, Any]:
    from builder.export.target import export_target

    t0 = time.perf_counter()
    model = make_model()
    spec = fp8_spec(model) if fp8 else None
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    build_s = time.perf_counter() - t0
    rss_model = _status("VmRSS")
    _reset_peak()
    t0 = time.perf_counter()
    res = export_target(model, out_dir, variant="standard", mode="greedy", max_seq_len=CAPACITY, fp8=spec)
    export_s = time.perf_counter() - t0
    return {
        "phase": "export",
        "precision": "fp8" if fp8 else "fp32",
        "weight_bytes": weight_bytes,
        "model_build_s": round(build_s, 2),
        "rss_before_export": rss_model,
        "export_s": round(export_s, 2),
        "peak_rss": _status("VmHWM"),
        "peak_over_weights": round(_status("VmHWM") / weight_bytes, 3),
        "files": {p.name: p.stat().st_size for p in Path(out_dir).iterdir()},
        "ort_graph": str(res.ort),
    }


def phase_engine(graph: str, threads: int, repeats: int) -> dict[str, Any]:
    import onnxruntime  # noqa: F401  (import cost outside the measured load)

    from devtools.bench.export_variants import StepTimer, step_feeds

    base = _status("VmRSS")
    _reset_peak()
    cfg = config()
    t0 = time.perf_counter()
    shell: Any = SimpleNamespace(cfg=cfg)  # what StepTimer / step_feeds read of a model: its config
    timer = StepTimer(Path(graph), shell, 1, CAPACITY, threads=threads)
    load_s = time.perf_counter() - t0
    loaded = {
        "load_s": round(load_s, 2),
        "rss_after_load": _status("VmRSS") - base,
        "peak_rss_load": _status("VmHWM") - base,
    }
    steps = {}
    for t in NODES:
        times = timer.time(step_feeds(shell, 1, t, PAST), warmup=2, repeats=repeats)
        steps[t] = round(1e3 * statistics.median(times), 2)
    return {"phase": "engine", "threads": threads, **loaded, "step_ms": steps}


def _sub(*args: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "devtools.bench.scale", *args],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(
    work: Path,
    repeats: int = 5,
    precisions: tuple[str, ...] = ("fp32", "fp8"),
    threads: tuple[int, ...] = (1, 2),
    log=print,
) -> dict[str, Any]:
    """Every phase in its own subprocess; graphs in `work` (≈ 6 GB per precision)."""
    rows: dict[str, Any] = {}
    for prec in precisions:
        log(f"[{prec}] export …")
        exp = _sub("export", str(work / prec), prec)
        log(f"[{prec}] export {exp['export_s']} s, peak RSS {exp['peak_rss'] / 2**30:.2f} GiB")
        engines = []
        for n in threads:
            log(f"[{prec}] engine, {n} thread(s) …")
            engines.append(_sub("engine", exp["ort_graph"], str(n), str(repeats)))
        rows[prec] = {"export": exp, "engine": engines}
    return {
        "config": CONFIG,
        "capacity": CAPACITY,
        "past_len": PAST,
        "nodes": list(NODES),
        "repeats": repeats,
        "machine": {"cores": os.cpu_count(), "load_avg": os.getloadavg()},
        "results": rows,
    }


def table(report: dict[str, Any]) -> str:
    gib = lambda b: f"{b / 2**30:.2f}"  # noqa: E731
    header = (
        "precision",
        "fp32 model GiB",
        "export s",
        "export peak RSS GiB (× weights)",
        "graph files GiB",
        "ORT threads",
        "session load s",
        "session RSS GiB",
        "step ms T=1",
        "T=4",
        "T=16",
    )
    rows = [
        (
            prec,
            gib(e["weight_bytes"]),
            e["export_s"],
            f"{gib(e['peak_rss'])} (×{e['peak_over_weights']})",
            gib(sum(e["files"].values())),
            eng["threads"],
            eng["load_s"],
            gib(eng["rss_after_load"]),
            eng["step_ms"]["1"],
            eng["step_ms"]["4"],
            eng["step_ms"]["16"],
        )
        for prec, r in report["results"].items()
        for e in [r["export"]]
        for eng in r["engine"]
    ]
    return "\n".join(markdown_table(header, rows))


if __name__ == "__main__":
    phase, *rest = sys.argv[1:]
    if phase == "export":
        result = phase_export(rest[0], rest[1] == "fp8")
    else:
        result = phase_engine(rest[0], int(rest[1]), int(rest[2]))
    print(json.dumps(result))
