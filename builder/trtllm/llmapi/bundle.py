"""The deployment bundle of a `target.backend: trtllm-llmapi` recipe: trtllm-serve and Triton `llmapi` launches in
the pinned container, docker-run.sh, k8s.yaml and bench.sh (perf_analyzer against Triton, aiperf against
trtllm-serve). Every file is rendered from Python data.

- `llm_api_options.yaml`: `builder.trtllm.llmapi.options.llm_options` with the folders as the container sees them
  (MOUNTS). `launch.sh` runs `trtllm-serve MODEL --backend pytorch --host --port --extra_llm_api_options FILE`
  (NVIDIA/TensorRT-LLM tensorrt_llm/commands/serve.py @ 00209af1: `--config` and `--extra_llm_api_options` are one
  option; the file is merged over the command line's arguments by `update_llm_args_with_extra_dict`, so the
  parallel sizes and limits live in the file only). On one node the LLM starts its tp × pp workers itself; several
  nodes take `mpirun … trtllm-llmapi-launch trtllm-serve …` (upstream's docs), which is not written here.
- `launch-triton.sh`: copies the read-only repository to a writable folder, adds upstream's model.py from the
  container (`repo.MODEL_PY`), then `mpirun --allow-run-as-root -n 1 tritonserver --model-repository=…` (upstream's
  triton_backend/scripts/launch_triton_server.py runs the llmapi repository as world size 1 under mpirun; the LLM
  spawns its own ranks). No `--disable-auto-complete-config`: model.py's auto_complete_config sets max_batch_size
  and the transaction policy from model.yaml's triton_config.
- `docker-run.sh [serve|triton]`: `docker run --gpus N --shm-size --ulimit memlock=-1 --ulimit stack=…`, the
  checkpoint, repository and bundle mounted read-only; the environment's launch settings passed in with `-e NAME`.
- `k8s.yaml` (`builder.trtllm.llmapi.k8s`): trtllm-serve in one pod with all tp × pp GPUs.
- `bench.sh`: per concurrency level, aiperf (genai-perf's successor, PyPI `aiperf`; the flags of TensorRT-LLM's
  own examples/serve/aiperf_client.sh @ 376f7e1b, the 1.2.1 docs' "Aiperf Client" page, plus `--concurrency` and
  `--artifact-dir`) against trtllm-serve's OpenAI endpoint, and with TRITON_RUN=1 perf_analyzer 2.51 over gRPC
  streaming against the Triton `tensorrt_llm` model (inputs text_input, sampling_param_max_tokens, streaming).
"""

# trtllm: this module is the trtllm-llmapi backend's (builder/trtllm/llmapi)

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from builder.recipe.schema import Recipe
from builder.trtllm.bundle import (
    ENV_ARGS,
    PASS_KNOBS,
    TRITONSERVER,
    docker_head,
    perf_analyzer_words,
    prompt_files,
    sh_command,
    sh_defaults,
    tokenizer_files,
    write_files,
)
from builder.trtllm.k8s import world_size
from builder.trtllm.llmapi.k8s import MOUNTS, k8s_name, render_k8s
from builder.trtllm.llmapi.repo import MODEL, MODEL_PY

OPTIONS = "llm_api_options.yaml"


@dataclass(frozen=True)
class HostPaths:
    """Where the served folders are on the host that runs docker (mounted read-only into the container)."""

    checkpoint: Path  # holds model/ and draft/
    repository: Path
    tokenizer: Path | None = None  # tokenizer.json's folder: copied into the bundle for aiperf


def launch_knobs(recipe: Recipe) -> dict[str, str]:
    """launch.sh's and launch-triton.sh's settings (environment variable -> default)."""
    p = recipe.triton.ports
    return {
        "MODEL_DIR": f"{MOUNTS['checkpoint']}/model",
        "MODEL_REPO": MOUNTS["repository"],
        "OPTIONS": f"{MOUNTS['bundle']}/{OPTIONS}",
        "HOST": "0.0.0.0",
        "HTTP_PORT": str(p.http),
        "GRPC_PORT": str(p.grpc),
        "METRICS_PORT": str(p.metrics),
        "TRTLLM_SERVE": "trtllm-serve",
        "TRITONSERVER": TRITONSERVER,
        "LLMAPI_MODEL_PY": MODEL_PY,
        "WORK_DIR": "/tmp/trtspec-llmapi",
    }


def serve_command() -> list[str]:
    """trtllm-serve's words (module docstring), with @VARS@ from launch_knobs."""
    return [
        "@TRTLLM_SERVE@",
        "@MODEL_DIR@",
        "--backend",
        "pytorch",
        "--host",
        "@HOST@",
        "--port",
        "@HTTP_PORT@",
        "--extra_llm_api_options",
        "@OPTIONS@",
    ]


def triton_command() -> list[str]:
    return [
        "mpirun",
        "--allow-run-as-root",
        "-n",
        "1",
        "@TRITONSERVER@",
        "--model-repository=@WORK_DIR@/repository",
        "--http-port=@HTTP_PORT@",
        "--grpc-port=@GRPC_PORT@",
        "--metrics-port=@METRICS_PORT@",
    ]


def _head(recipe: Recipe, what: str) -> list[str]:
    v = recipe.trtllm.version
    return [
        "#!/usr/bin/env bash",
        f"# {what} {recipe.triton.model_name}: TensorRT-LLM {v} PyTorch flow ({recipe.speculative.method}), "
        f"tp={recipe.parallelism.tp} pp={recipe.parallelism.pp}, inside {recipe.trtllm.llmapi_image}.",
        "# Written by trtspec; every setting below can be overridden from the environment.",
        "set -euo pipefail",
        'BUNDLE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        *sh_defaults(launch_knobs(recipe)),
    ]


def render_launch_script(recipe: Recipe) -> str:
    return "\n".join(
        [
            *_head(recipe, "Serve (trtllm-serve, OpenAI API)"),
            '[ -d "$MODEL_DIR" ] || { echo "launch.sh: no model folder $MODEL_DIR" >&2; exit 2; }',
            '[ -f "$OPTIONS" ] || { echo "launch.sh: no options file $OPTIONS" >&2; exit 2; }',
            "exec " + sh_command(serve_command()),
            "",
        ]
    )


def render_triton_script(recipe: Recipe) -> str:
    return "\n".join(
        [
            *_head(recipe, "Serve (Triton llmapi model)"),
            '[ -f "$LLMAPI_MODEL_PY" ] || { echo "launch-triton.sh: no upstream llmapi model.py at $LLMAPI_MODEL_PY '
            "(NVIDIA's Triton TRT-LLM container ships it; set LLMAPI_MODEL_PY)\" >&2; exit 2; }",
            'rm -rf "$WORK_DIR/repository"',
            'mkdir -p "$WORK_DIR"',
            'cp -R "$MODEL_REPO" "$WORK_DIR/repository"',
            f'cp "$LLMAPI_MODEL_PY" "$WORK_DIR/repository/{MODEL}/1/model.py"',
            "exec " + sh_command(triton_command()),
            "",
        ]
    )


def docker_command(recipe: Recipe, script: str) -> list[str]:
    cmd = docker_head(recipe, "@NAME@")
    for port in ("http_port", "grpc_port", "metrics_port"):
        cmd += ["-p", f"@BIND_ADDRESS@:@{port}@:@{port}@"]
    for var, key in (("CHECKPOINT", "checkpoint"), ("REPOSITORY", "repository"), ("BUNDLE_DIR", "bundle")):
        cmd += ["-v", f"@{var}@:{MOUNTS[key]}:ro"]
    return cmd + [ENV_ARGS, "@IMAGE@", "bash", f"{MOUNTS['bundle']}/{script}"]


def render_docker_script(recipe: Recipe, host: HostPaths) -> str:
    p = recipe.triton.ports
    knobs = " ".join(launch_knobs(recipe))
    defaults = {
        "IMAGE": recipe.trtllm.llmapi_image,
        "NAME": k8s_name(recipe),
        "BIND_ADDRESS": recipe.triton.bind_address,
        "CHECKPOINT": str(host.checkpoint),
        "REPOSITORY": str(host.repository),
    }
    return "\n".join(
        [
            "#!/usr/bin/env bash",
            f"# Run {recipe.triton.model_name} in {recipe.trtllm.llmapi_image} on this host "
            f"({world_size(recipe)} GPU(s)).",
            "#   bash docker-run.sh [serve]   launch.sh: trtllm-serve (OpenAI API on HTTP_PORT)",
            "#   bash docker-run.sh triton    launch-triton.sh: tritonserver with the llmapi repository",
            "# Host settings (environment): IMAGE NAME BIND_ADDRESS CHECKPOINT REPOSITORY. Passed in when set here:",
            f"#   {knobs}",
            "set -euo pipefail",
            'BUNDLE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
            'MODE="${1:-serve}"',
            *sh_defaults(defaults),
            f'http_port="${{HTTP_PORT:-{p.http}}}"',
            f'grpc_port="${{GRPC_PORT:-{p.grpc}}}"',
            f'metrics_port="${{METRICS_PORT:-{p.metrics}}}"',
            'case "$MODE" in',
            "  serve) script=launch.sh ;;",
            "  triton) script=launch-triton.sh ;;",
            '  *) echo "usage: docker-run.sh [serve|triton]" >&2; exit 2 ;;',
            "esac",
            f"knobs=({knobs})",
            *PASS_KNOBS,
            'if [ "$MODE" = serve ]; then',
            "  exec " + sh_command(docker_command(recipe, "launch.sh"), "    "),
            "fi",
            "exec " + sh_command(docker_command(recipe, "launch-triton.sh")),
            "",
        ]
    )


# -- bench.sh ------------------------------------------------------------------------------------------------------


def triton_input_data(prompts: list[str], output_len: int, stream: bool = True) -> dict[str, Any]:
    """perf_analyzer --input-data for the llmapi model: each prompt, `output_len` tokens (upstream's inputs)."""
    if not prompts:
        raise ValueError("no prompts")
    return {
        "data": [{"text_input": [p], "sampling_param_max_tokens": [output_len], "streaming": [stream]} for p in prompts]
    }


def aiperf_words(model: str, concurrency: str, output_len: int, input_len: int, out: str) -> list[str]:
    """aiperf against trtllm-serve's OpenAI chat endpoint (module docstring)."""
    return [
        "@AIPERF@",
        "profile",
        "-m",
        model,
        "--tokenizer",
        "@TOKENIZER@",
        "--endpoint-type",
        "chat",
        "--url",
        "@HTTP_URL@",
        "--streaming",
        "--random-seed",
        "123",
        "--synthetic-input-tokens-mean",
        str(input_len),
        "--synthetic-input-tokens-stddev",
        "0",
        "--output-tokens-mean",
        str(output_len),
        "--output-tokens-stddev",
        "0",
        "--concurrency",
        concurrency,
        "--request-count",
        "@REQUESTS@",
        "--artifact-dir",
        out,
    ]


def render_bench_script(recipe: Recipe, served_model: str) -> str:
    b, p = recipe.bench, recipe.triton.ports
    levels = " ".join(str(c) for c in b.concurrency)
    # perf_analyzer against the llmapi model: its own thread count, no profile export file
    perf = perf_analyzer_words(MODEL, "@c@", "@WINDOW_MS@", "@OUT@/perf_c@c@", max_threads=None, export=False)
    return "\n".join(
        [
            "#!/usr/bin/env bash",
            f"# aiperf against trtllm-serve (and, with TRITON_RUN=1, perf_analyzer against the Triton llmapi model): "
            f"concurrency {levels}, {b.input_len} input / {b.output_len} output tokens per request.",
            "set -euo pipefail",
            'BUNDLE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
            *sh_defaults(
                {
                    "HTTP_URL": f"127.0.0.1:{p.http}",
                    "GRPC_URL": f"127.0.0.1:{p.grpc}",
                    "AIPERF": "aiperf",
                    "PERF_ANALYZER": "perf_analyzer",
                    "TOKENIZER": "@BUNDLE_DIR@/tokenizer",
                    "INPUT_DATA": "@BUNDLE_DIR@/inputs.json",
                    "OUT": "bench-out",
                    "REQUESTS": "64",
                    "WINDOW_MS": str(b.measurement_window_ms),
                    "STABILITY": "1000.0",
                    "MAX_TRIALS": "3",
                    "TRITON_RUN": "0",
                    "AIPERF_RUN": "1",
                }
            ),
            'mkdir -p "$OUT"',
            f"for c in {levels}; do",
            '  if [ "$AIPERF_RUN" = 1 ]; then',
            "    "
            + sh_command(aiperf_words(served_model, "@c@", b.output_len, b.input_len, "@OUT@/aiperf_c@c@"), "      "),
            "  fi",
            '  if [ "$TRITON_RUN" = 1 ]; then',
            "    " + sh_command(perf, "      "),
            "  fi",
            "done",
            "",
        ]
    )


def bundle_files(
    recipe: Recipe, host: HostPaths, options: dict[str, Any], served_model: str, prompts: list[str] | None = None
) -> dict[str, tuple[str, int]]:
    """name -> (text, mode) of every bundle file. `options`: the LLM options with container paths."""
    files = {
        OPTIONS: (yaml.safe_dump(options, sort_keys=False), 0o644),
        "launch.sh": (render_launch_script(recipe), 0o755),
        "launch-triton.sh": (render_triton_script(recipe), 0o755),
        "docker-run.sh": (render_docker_script(recipe, host), 0o755),
        "bench.sh": (render_bench_script(recipe, served_model), 0o755),
        "k8s.yaml": (render_k8s(recipe), 0o644),
        **tokenizer_files(host.tokenizer),
    }
    if prompts:
        files.update(prompt_files(prompts, triton_input_data(prompts, recipe.bench.output_len)))
    return files


def write_bundle(
    recipe: Recipe,
    out: Path,
    host: HostPaths,
    options: dict[str, Any],
    served_model: str,
    prompts: list[str] | None = None,
) -> dict[str, Path]:
    """Write the bundle into `out` (whole, in a temp folder beside it, then renamed: `bundle.write_files`)."""
    return write_files(bundle_files(recipe, host, options, served_model, prompts), out)
