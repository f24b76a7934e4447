"""The Triton `llmapi` repository: TensorRT-LLM's Python model `tensorrt_llm` that runs `LLM(**model.yaml)`.

Upstream: NVIDIA/TensorRT-LLM `triton_backend/all_models/llmapi/tensorrt_llm/` — config.pbtxt @ 0a71057313ec (the
interface below, recorded as data), 1/model.yaml @ 0ebb1536ac12 (`model`, `backend: "pytorch"`, the parallel sizes
and every other `LLM(**kwargs)` key at top level; `triton_config: {max_batch_size, decoupled}` is read by model.py's
`auto_complete_config`, which is why config.pbtxt names neither and the server must not run with
`--disable-auto-complete-config`) and 1/model.py. model.py is upstream's code and is not copied into this
repository: the Triton TRT-LLM container ships it at `MODEL_PY` (tensorrtllm_backend
dockerfile/Dockerfile.triton.trt_llm_backend: `COPY … triton_backend/all_models all_models` under WORKDIR /app), and
the bundle's launch-triton.sh copies the repository to a writable folder and the container's model.py into it
before tritonserver starts (`builder.trtllm.llmapi.bundle`).

config.pbtxt is rendered from a ModelConfig protobuf (STYLE §10). Left out of upstream's inputs: `image_url`
(multimodal) and the LoRA inputs (a Llama 3 text recipe has neither); every output is kept.
"""

# trtllm: this module is the trtllm-llmapi backend's (builder/trtllm/llmapi)

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml

MODEL = "tensorrt_llm"  # upstream's model name (the launch copies model.py into <repo>/tensorrt_llm/1/)
MODEL_PY = "/app/all_models/llmapi/tensorrt_llm/1/model.py"  # in NVIDIA's Triton TRT-LLM container
INFO = "llmapi_repo.json"
SOURCES = {
    "triton_backend/all_models/llmapi/tensorrt_llm/config.pbtxt": "0a71057313ec0626527e164a8fc0205c5822e2f5",
    "triton_backend/all_models/llmapi/tensorrt_llm/1/model.yaml": "0ebb1536ac12bbe27201185de960df3ab00bcecc",
}
# (name, Triton type, dims, optional) as upstream's config.pbtxt declares them
INPUTS: tuple[tuple[str, str, tuple[int, ...], bool], ...] = (
    ("text_input", "STRING", (-1,), False),
    ("streaming", "BOOL", (1,), True),
    ("sampling_param_best_of", "INT32", (1,), True),
    ("sampling_param_temperature", "FP32", (1,), True),
    ("sampling_param_top_k", "INT32", (1,), True),
    ("sampling_param_top_p", "FP32", (1,), True),
    ("sampling_param_frequency_penalty", "FP32", (1,), True),
    ("sampling_param_presence_penalty", "FP32", (1,), True),
    ("sampling_param_max_tokens", "INT32", (1,), True),
    ("sampling_param_stop", "STRING", (-1,), True),
    ("sampling_param_seed", "UINT64", (1,), True),
    ("sampling_param_exclude_input_from_output", "BOOL", (1,), True),
    ("sampling_param_return_perf_metrics", "BOOL", (1,), True),
    ("return_finish_reason", "BOOL", (1,), True),
    ("return_stop_reason", "BOOL", (1,), True),
    ("return_cumulative_logprob", "BOOL", (1,), True),
    ("stop", "BOOL", (1,), True),
)
OUTPUTS: tuple[tuple[str, str, tuple[int, ...]], ...] = (
    ("text_output", "STRING", (-1,)),
    ("finish_reason", "STRING", (-1,)),
    ("stop_reason", "STRING", (-1,)),
    ("cumulative_logprob", "FP32", (-1,)),
    ("kv_cache_reused_block", "INT32", (-1,)),
    ("kv_cache_missed_block", "INT32", (-1,)),
    ("kv_cache_alloc_new_blocks", "INT32", (-1,)),
    ("kv_cache_alloc_total_blocks", "INT32", (-1,)),
    ("kv_cache_hit_rate", "FP32", (-1,)),
    ("arrival_time_ns", "INT64", (1,)),
    ("first_scheduled_time_ns", "INT64", (1,)),
    ("first_token_time_ns", "INT64", (1,)),
    ("last_token_time_ns", "INT64", (1,)),
    ("acceptance_rate", "FP32", (1,)),
    ("total_accepted_draft_tokens", "INT32", (1,)),
    ("total_draft_tokens", "INT32", (1,)),
)


def model_config():
    """config.pbtxt's ModelConfig (name, python backend, one KIND_CPU instance: the LLM places itself on the GPUs)."""
    from triton_repo.config import pb2

    m = pb2()
    cfg = m.ModelConfig(name=MODEL, backend="python")
    cfg.instance_group.add(count=1, kind=m.ModelInstanceGroup.KIND_CPU)
    for name, dtype, dims, optional in INPUTS:
        entry = cfg.input.add(name=name, data_type=m.DataType.Value(f"TYPE_{dtype}"), dims=list(dims))
        entry.optional = optional
    for name, dtype, dims in OUTPUTS:
        cfg.output.add(name=name, data_type=m.DataType.Value(f"TYPE_{dtype}"), dims=list(dims))
    return cfg


def model_yaml(model: str, options: dict[str, Any], decoupled: bool) -> dict[str, Any]:
    """1/model.yaml: `model`, `backend`, every LLM option at top level, then `triton_config` (upstream's layout;
    max_batch_size 0: Triton does not batch, the LLM's own scheduler batches in flight)."""
    return {
        "model": model,
        "backend": "pytorch",
        **options,
        "triton_config": {"max_batch_size": 0, "decoupled": decoupled},
    }


def render_repository(out: Path, model: str, options: dict[str, Any], decoupled: bool) -> dict[str, Any]:
    """Write the repository at `out` (created whole in a temp folder beside it, then renamed); its facts."""
    from triton_repo.config import render

    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"{out} exists and is not an empty folder")
    doc = model_yaml(model, options, decoupled)
    facts = {
        "model": MODEL,
        "model_py": {"from": MODEL_PY, "upstream": "triton_backend/all_models/llmapi/tensorrt_llm/1/model.py"},
        "llm": model,
        "decoupled": decoupled,
        "sources": SOURCES,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        (tmp / MODEL / "1").mkdir(parents=True)
        (tmp / MODEL / "config.pbtxt").write_text(render(model_config()), encoding="utf-8")
        (tmp / MODEL / "1" / "model.yaml").write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        (tmp / INFO).write_text(json.dumps(facts, indent=2) + "\n", encoding="utf-8")
        os.chmod(tmp, 0o755)
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return facts


def precheck(repo: Path) -> list[str]:
    """What a server would refuse in the repository, found on this CPU (empty: none): the files present,
    config.pbtxt parsing as a ModelConfig of the python backend without max_batch_size / a transaction policy
    (model.py sets them from triton_config), model.yaml's keys fields of the pinned `LLM` (llm_args_table) or
    `triton_config`."""
    from builder.trtllm.llmapi.llm_args_table import fields
    from builder.trtllm.llmapi.options import key_paths
    from triton_repo.config import parse

    problems: list[str] = []
    cfg_path, yaml_path = repo / MODEL / "config.pbtxt", repo / MODEL / "1" / "model.yaml"
    for p in (cfg_path, yaml_path):
        if not p.is_file():
            problems.append(f"missing {p.relative_to(repo)}")
    if problems:
        return problems
    cfg = parse(cfg_path.read_text(encoding="utf-8"))
    if cfg.name != MODEL or cfg.backend != "python":
        problems.append(f"config.pbtxt: name {cfg.name!r} backend {cfg.backend!r}")
    if cfg.max_batch_size or cfg.HasField("model_transaction_policy"):
        problems.append("config.pbtxt sets max_batch_size / decoupled: model.py's triton_config would conflict")
    doc = yaml.safe_load(yaml_path.read_text(encoding="utf-8"))
    tc = doc.pop("triton_config", None)
    if not isinstance(tc, dict) or set(tc) != {"max_batch_size", "decoupled"}:
        problems.append(f"model.yaml triton_config {tc!r}: want max_batch_size and decoupled")
    if doc.get("backend") != "pytorch" or "model" not in doc:
        problems.append("model.yaml needs model and backend: pytorch")
    for cls, key in key_paths(doc):
        if key not in fields(cls):
            problems.append(f"model.yaml: {key} is not a field of {cls}")
    return problems
