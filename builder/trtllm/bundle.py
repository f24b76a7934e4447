"""The deployment bundle beside a TensorRT-LLM model repository: build.sh, launch.sh, docker-run.sh, k8s.yaml, bench.sh.

    paths = write_bundle(recipe, out_dir, HostPaths(repository=..., engine=..., tokenizer=...), prompts=texts)

Files (all rendered from Python data; nothing is template-substituted):
- `check_engine.py`: a verbatim copy of `builder/trtllm/compat.py` (standard library only: trtspec is not in
  NVIDIA's container), the one implementation of the engine lock engine.json. `build.sh` + `build.json`
  (`builder.trtllm.build_cmd`, written by `trtspec deploy`) run trtllm-build and then `check_engine.py lock`.
- `launch.sh`: runs inside the pinned container (`recipe.trtllm.image`). It first runs `check_engine.py check`
  — engine.json against the container's TensorRT-LLM / TensorRT and GPUs and the files' sizes on every launch,
  their sha256 per VERIFY_HASHES (once per host and engine by default; compat's docstring says what a 70 GB
  engine costs) — then starts
  one tritonserver per rank under `mpirun --allow-run-as-root`, built the way upstream's
  `scripts/launch_triton_server.py` `get_cmd` builds it (triton-inference-server/tensorrtllm_backend
  v0.18.2 @c575d8c; since v0.19 the same file lives in NVIDIA/TensorRT-LLM
  `triton_backend/scripts/launch_triton_server.py` @0b06796, which repeats the port flags once more per
  rank — same effect, tritonserver keeps the last): per rank `-n 1 tritonserver --model-repository=R`,
  ranks > 0 add `--model-control-mode=explicit --load-model=tensorrt_llm` (they load only the engine
  model), then `--grpc-port --http-port --metrics-port --disable-auto-complete-config
  --backend-config=python,shm-region-prefix-name=prefix{rank}_` and `:` between ranks. Every rank is
  given the same ports; only rank 0 ever opens them, because the tensorrt_llm model of the other ranks
  never finishes loading (their executors serve rank 0's over MPI), so their servers never start.
- `docker-run.sh [serve]`: `docker run --gpus N --shm-size --ulimit memlock=-1 --ulimit stack=67108864`, the
  ports published on `triton.bind_address`, the repository / engine / bundle mounted read-only at the
  container paths in `k8s.MOUNTS` (the repository's tensorrt_llm config must name the engine as the server
  sees it: gpt_model_path = /trtspec/engine; the repository carries its own tokenizer) and a host folder
  (STATE_DIR) writable at /trtspec/state for the hash stamps. `docker-run.sh build`: build.sh in the same
  image with the GPUs, the checkpoint read-only at /trtspec/checkpoint and a new folder beside the host's
  engine folder writable at /trtspec/engine; renamed onto the engine folder once it holds engine.json.
  Every launch.sh (`launch_knobs`) or build.sh (`build_cmd.BUILD_KNOBS`) setting present in the caller's
  environment is passed into the container as `-e NAME`.
- `k8s.yaml` (`builder.trtllm.k8s`), `bench.sh`: perf_analyzer 2.51 and genai-perf 0.0.16 as `trtspec
  bench` runs them, against upstream's ensemble (inputs text_input, max_tokens, stream, min_tokens —
  NVIDIA/TensorRT-LLM `triton_backend/all_models/inflight_batcher_llm/ensemble/config.pbtxt` @2a9abd9;
  tensorrtllm_backend ≤ v0.19 called it min_length). min_tokens = max_tokens makes every request generate
  exactly bench.output_len tokens. genai-perf's `--output-tokens-mean-deterministic` would send the old
  name min_length (its tensorrtllm converter), so bench.sh passes `--extra-inputs min_tokens:N` instead.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from builder.files import staged_dir
from builder.recipe.schema import Recipe
from builder.trtllm import compat
from builder.trtllm.build_cmd import BUILD_KNOBS, LOCK_SCRIPT
from builder.trtllm.k8s import MOUNTS, SHM_SIZE, VERIFY_HASHES, k8s_name, render_k8s, world_size

TRITONSERVER = "/opt/tritonserver/bin/tritonserver"  # NVIDIA's Triton containers
TRTLLM_MODEL = "tensorrt_llm"  # the engine model of inflight_batcher_llm
ENSEMBLE = "ensemble"  # upstream's ensemble (preprocessing -> tensorrt_llm -> postprocessing)
STACK_ULIMIT = 67108864
_VAR = re.compile(r"@([A-Za-z_][A-Za-z0-9_]*)@")


@dataclass(frozen=True)
class HostPaths:
    """Where the served folders are on the host that runs docker (mounted read-only into the container)."""

    repository: Path
    engine: Path
    tokenizer: Path | None = None  # tokenizer.json's folder: copied into the bundle for genai-perf (bench.sh)
    checkpoint: Path | None = None  # the TensorRT-LLM checkpoint (docker-run.sh build); default bundle/../checkpoint


def launch_command(
    world: int,
    model_repo: str,
    grpc_port: str | int,
    http_port: str | int,
    metrics_port: str | int,
    tritonserver: str = TRITONSERVER,
    trtllm_model: str = TRTLLM_MODEL,
) -> list[str]:
    """mpirun argv serving `model_repo` on `world` ranks (upstream launch_triton_server.py get_cmd, see above)."""
    if world < 1:
        raise ValueError(f"world size {world} < 1")
    cmd = ["mpirun", "--allow-run-as-root"]
    for rank in range(world):
        cmd += ["-n", "1", tritonserver, f"--model-repository={model_repo}"]
        if rank != 0:
            cmd += ["--model-control-mode=explicit", f"--load-model={trtllm_model}"]
        cmd += [
            f"--grpc-port={grpc_port}",
            f"--http-port={http_port}",
            f"--metrics-port={metrics_port}",
            "--disable-auto-complete-config",
            f"--backend-config=python,shm-region-prefix-name=prefix{rank}_",
            ":",
        ]
    return cmd


class Raw(str):
    """A shell word emitted as written (e.g. an array expansion), never quoted."""


def _dq(text: str) -> str:
    """`text` for use inside double quotes: \\ $ ` " escaped; `@NAME@` -> ${NAME}."""
    out, pos = [], 0
    for m in _VAR.finditer(text):
        out.append(re.sub(r'([\\$`"])', r"\\\1", text[pos : m.start()]) + "${" + m.group(1) + "}")
        pos = m.end()
    return "".join(out) + re.sub(r'([\\$`"])', r"\\\1", text[pos:])


def sh_word(word: str) -> str:
    """One shell word; `@NAME@` marks a variable: the word is then double-quoted with `${NAME}` inside."""
    if isinstance(word, Raw):
        return str(word)
    return '"' + _dq(word) + '"' if _VAR.search(word) else shlex.quote(word)


def sh_command(words: Iterable[str], indent: str = "  ") -> str:
    """Words joined with ` \\` line continuations: a new line before each option and each `:`."""
    lines: list[list[str]] = []
    for w in words:
        if not lines or w.startswith("-") or w == ":" or isinstance(w, Raw):
            lines.append([])
        lines[-1].append(sh_word(w))
    return (" \\\n" + indent).join(" ".join(line) for line in lines)


def sh_defaults(pairs: dict[str, str]) -> list[str]:
    """`[ -n "${NAME:-}" ] || NAME=default` lines: the environment wins; `@OTHER@` in a default names another variable."""
    return [f'[ -n "${{{k}:-}}" ] || {k}={sh_word(v)}' for k, v in pairs.items()]


def launch_knobs(recipe: Recipe) -> dict[str, str]:
    """launch.sh's settings (environment variable -> default); docker-run.sh passes those set in its caller's."""
    p = recipe.triton.ports
    return {
        "MODEL_REPO": MOUNTS["repository"],
        "ENGINE_DIR": MOUNTS["engine"],
        "TRITONSERVER": TRITONSERVER,
        "HTTP_PORT": str(p.http),
        "GRPC_PORT": str(p.grpc),
        "METRICS_PORT": str(p.metrics),
        "PYTHON": "python3",
        "VERIFY_HASHES": VERIFY_HASHES,
        "VERIFY_STAMP_DIR": "",
    }


def render_launch_script(recipe: Recipe) -> str:
    """launch.sh: engine lock check, then the mpirun line (every path and port overridable by environment)."""
    world = world_size(recipe)
    words = launch_command(world, "@MODEL_REPO@", "@GRPC_PORT@", "@HTTP_PORT@", "@METRICS_PORT@", "@TRITONSERVER@")
    return "\n".join(
        [
            "#!/usr/bin/env bash",
            f"# Serve {recipe.triton.model_name} with Triton + TensorRT-LLM {recipe.trtllm.version}: {world} rank(s) "
            f"(tp={recipe.parallelism.tp}, pp={recipe.parallelism.pp}), inside {recipe.trtllm.image}.",
            "# Written by trtspec. The engine check refuses an engine built for another TensorRT-LLM, TensorRT or GPU, or",
            "# whose files differ from its engine.json: sizes every launch; sha256 per VERIFY_HASHES = once (per host and",
            "# engine, stamped in VERIFY_STAMP_DIR, default /trtspec/state if writable, else ~/.cache) | always | never.",
            "set -euo pipefail",
            'BUNDLE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
            *sh_defaults(launch_knobs(recipe)),
            f'"$PYTHON" "$BUNDLE_DIR/{LOCK_SCRIPT}" check "$ENGINE_DIR" --hashes "$VERIFY_HASHES" --stamp-dir "$VERIFY_STAMP_DIR"',
            "exec " + sh_command(words),
            "",
        ]
    )


def docker_head(recipe: Recipe, name: str) -> list[str]:
    """`docker run` with all tp × pp GPUs, the shared memory and the ulimits NVIDIA's containers ask for."""
    return [
        "docker",
        "run",
        "--rm",
        "--name",
        name,
        "--gpus",
        str(world_size(recipe)),
        f"--shm-size={SHM_SIZE}",
        "--ulimit",
        "memlock=-1",
        "--ulimit",
        f"stack={STACK_ULIMIT}",
    ]


ENV_ARGS = Raw('${env_args[@]+"${env_args[@]}"}')  # -e NAME per setting present here (bash < 4.4: empty-array safe)
PASS_KNOBS = (  # docker-run.sh: env_args gets `-e NAME` for each name in $knobs set in the caller's environment
    "env_args=()",
    'for knob in "${knobs[@]}"; do',
    '  if [ -n "${!knob+x}" ]; then env_args+=(-e "$knob"); fi',
    "done",
)


def docker_command(recipe: Recipe) -> list[str]:
    """`docker run` words serving the engine, with @VARS@ for the host paths, image, ports and bind address."""
    cmd = docker_head(recipe, "@NAME@")
    for port in ("http_port", "grpc_port", "metrics_port"):
        cmd += ["-p", f"@BIND_ADDRESS@:@{port}@:@{port}@"]
    for var, key in (("REPOSITORY", "repository"), ("ENGINE", "engine"), ("BUNDLE_DIR", "bundle")):
        cmd += ["-v", f"@{var}@:{MOUNTS[key]}:ro"]
    cmd += ["-v", f"@STATE_DIR@:{MOUNTS['state']}"]
    return cmd + [ENV_ARGS, "@IMAGE@", "bash", f"{MOUNTS['bundle']}/launch.sh"]


def docker_build_command(recipe: Recipe) -> list[str]:
    """`docker run` words building the engine: checkpoint and bundle read-only, the stage folder writable."""
    cmd = docker_head(recipe, "@NAME@-build")
    cmd += [
        "-v",
        f"@CHECKPOINT@:{MOUNTS['checkpoint']}:ro",
        "-v",
        f"@stage@:{MOUNTS['engine']}",
        "-v",
        f"@BUNDLE_DIR@:{MOUNTS['bundle']}:ro",
    ]
    return cmd + [ENV_ARGS, "@IMAGE@", "bash", f"{MOUNTS['bundle']}/build.sh"]


def render_docker_script(recipe: Recipe, host: HostPaths) -> str:
    p = recipe.triton.ports
    checkpoint = str(host.checkpoint) if host.checkpoint is not None else "@BUNDLE_DIR@/../checkpoint"
    defaults = {
        "IMAGE": recipe.trtllm.image,
        "NAME": k8s_name(recipe),
        "BIND_ADDRESS": recipe.triton.bind_address,
        "REPOSITORY": str(host.repository),
        "ENGINE": str(host.engine),
        "CHECKPOINT": checkpoint,
    }
    launch, build = " ".join(launch_knobs(recipe)), " ".join(BUILD_KNOBS)
    return "\n".join(
        [
            "#!/usr/bin/env bash",
            f"# Run {recipe.triton.model_name} in NVIDIA's Triton TRT-LLM container on this host ({world_size(recipe)} GPU(s)).",
            "#   bash docker-run.sh [serve]  launch.sh: engine check, then tritonserver (repository, engine, bundle read-only;",
            "#                               STATE_DIR writable at /trtspec/state for the engine's hash stamps)",
            "#   bash docker-run.sh build    build.sh: trtllm-build + engine.json (checkpoint read-only; the engine is built",
            "#                               in a new folder beside ENGINE and renamed onto it once complete)",
            "# Written by trtspec. Host settings (environment): IMAGE NAME BIND_ADDRESS REPOSITORY ENGINE CHECKPOINT STATE_DIR.",
            "# These, when set here, are passed into the container (-e NAME):",
            f"#   serve (launch.sh): {launch}",
            f"#   build (build.sh):  {build}",
            "# (HTTP_PORT, GRPC_PORT and METRICS_PORT are also the host ports published on BIND_ADDRESS.)",
            "set -euo pipefail",
            'BUNDLE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
            'MODE="${1:-serve}"',
            *sh_defaults(defaults),
            '[ -n "${STATE_DIR:-}" ] || STATE_DIR="${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/trtspec/verified-engines"',
            f'http_port="${{HTTP_PORT:-{p.http}}}"',
            f'grpc_port="${{GRPC_PORT:-{p.grpc}}}"',
            f'metrics_port="${{METRICS_PORT:-{p.metrics}}}"',
            'case "$MODE" in',
            f"  serve) knobs=({launch}) ;;",
            f"  build) knobs=({build}) ;;",
            '  *) echo "usage: docker-run.sh [serve|build]" >&2; exit 2 ;;',
            "esac",
            *PASS_KNOBS,
            'if [ "$MODE" = serve ]; then',
            '  mkdir -p "$STATE_DIR"',
            "  exec " + sh_command(docker_command(recipe), "    "),
            "fi",
            'parent="$(dirname "$ENGINE")"',
            'name="$(basename "$ENGINE")"',
            'mkdir -p "$parent"',
            'stage="$(mktemp -d "$parent/.$name.build.XXXXXX")"',
            "trap 'rm -rf \"$stage\"' EXIT",
            sh_command(docker_build_command(recipe)),
            'if [ ! -f "$stage/engine.json" ]; then',
            '  echo "docker-run.sh: the build left no engine.json in $stage (ENGINE_DIR passed into the container?)" >&2',
            "  exit 2",
            "fi",
            'chmod 755 "$stage"',
            'old="$parent/.$name.old.$$"',
            'rm -rf "$old"',
            'if [ -e "$ENGINE" ]; then mv "$ENGINE" "$old"; fi',
            'mv "$stage" "$ENGINE"',
            "trap - EXIT",
            'rm -rf "$old"',
            'echo "docker-run.sh: engine and engine.json in $ENGINE"',
            "",
        ]
    )


# -- bench.sh ----------------------------------------------------------------------------------------------


def trtllm_input_data(prompts: list[str], output_len: int, stream: bool = True) -> dict[str, Any]:
    """perf_analyzer --input-data for upstream's ensemble: one entry per prompt, exactly `output_len` tokens each."""
    if not prompts:
        raise ValueError("no prompts")
    return {
        "data": [
            {"text_input": [p], "max_tokens": [output_len], "min_tokens": [output_len], "stream": [stream]}
            for p in prompts
        ]
    }


def perf_analyzer_words(
    model: str, concurrency: str, window_ms: str, out: str, *, max_threads: int | None = 4, export: bool = True
) -> list[str]:
    """One level, as `trtspec bench` runs it (builder/serve/perf.py perf_command: gRPC streaming, async). The
    llmapi bundle's bench.sh passes max_threads=None and export=False: perf_analyzer's own thread count, no
    profile export file."""
    words = [
        "@PERF_ANALYZER@",
        "-m",
        model,
        "-u",
        "@GRPC_URL@",
        "-i",
        "grpc",
        "--streaming",
        "--async",
        "--input-data",
        "@INPUT_DATA@",
        f"--concurrency-range={concurrency}",
        *([f"--max-threads={max_threads}"] if max_threads is not None else []),
        f"--measurement-interval={window_ms}",
        "--stability-percentage=@STABILITY@",
        "--max-trials=@MAX_TRIALS@",
        "-f",
        f"{out}.csv",
        "--verbose-csv",
    ]
    return words + (["--profile-export-file", f"{out}.export.json"] if export else [])


def genai_perf_words(model: str, concurrency: str, output_len: int, window_ms: str, out: str) -> list[str]:
    """genai-perf 0.0.16 over Triton gRPC with TensorRT-LLM's inputs (kserve endpoint, tensorrtllm backend)."""
    return [
        "@GENAI_PERF@",
        "profile",
        "-m",
        model,
        "--endpoint-type",
        "kserve",
        "--backend",
        "tensorrtllm",
        "--streaming",
        "-u",
        "@GRPC_URL@",
        "--concurrency",
        concurrency,
        "--input-file",
        "@PROMPTS@",
        "--output-tokens-mean",
        str(output_len),
        "--extra-inputs",
        f"min_tokens:{output_len}",
        "--tokenizer",
        "@TOKENIZER@",
        "--measurement-interval",
        window_ms,
        "-s",
        "999",
        "--artifact-dir",
        out,
    ]


def render_bench_script(recipe: Recipe, ensemble: str = ENSEMBLE) -> str:
    b, p = recipe.bench, recipe.triton.ports
    levels = " ".join(str(c) for c in b.concurrency)
    return "\n".join(
        [
            "#!/usr/bin/env bash",
            f"# perf_analyzer (and, with GENAI_PERF_RUN=1, genai-perf) against the served {ensemble}: concurrency {levels},",
            f"# {b.output_len} output tokens per request; the same commands `trtspec bench` runs (stability 1000 %, 3 trials).",
            "set -euo pipefail",
            'BUNDLE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
            *sh_defaults(
                {
                    "GRPC_URL": f"127.0.0.1:{p.grpc}",
                    "PERF_ANALYZER": "perf_analyzer",
                    "GENAI_PERF": "genai-perf",
                    "INPUT_DATA": "@BUNDLE_DIR@/inputs.json",
                    "PROMPTS": "@BUNDLE_DIR@/prompts.jsonl",
                    "TOKENIZER": "@BUNDLE_DIR@/tokenizer",
                    "OUT": "bench-out",
                    "WINDOW_MS": str(b.measurement_window_ms),
                    "STABILITY": "1000.0",
                    "MAX_TRIALS": "3",
                    "GENAI_PERF_RUN": "0",
                }
            ),
            '[ -f "$INPUT_DATA" ] || { echo "bench.sh: no $INPUT_DATA (trtspec deploy writes it from bench.prompt_source)" >&2; exit 2; }',
            'mkdir -p "$OUT"',
            f"for c in {levels}; do",
            "  " + sh_command(perf_analyzer_words(ensemble, "@c@", "@WINDOW_MS@", "@OUT@/perf_c@c@"), "    "),
            '  if [ "$GENAI_PERF_RUN" = 1 ]; then',
            "    "
            + sh_command(genai_perf_words(ensemble, "@c@", b.output_len, "@WINDOW_MS@", "@OUT@/genai_c@c@"), "      "),
            "  fi",
            "done",
            "",
        ]
    )


# -- the bundle --------------------------------------------------------------------------------------------


def bundle_files(
    recipe: Recipe, host: HostPaths, prompts: list[str] | None = None, ensemble: str = ENSEMBLE
) -> dict[str, tuple[str, int]]:
    """name -> (text, mode) of every bundle file."""
    files = {
        "launch.sh": (render_launch_script(recipe), 0o755),
        "docker-run.sh": (render_docker_script(recipe, host), 0o755),
        "bench.sh": (render_bench_script(recipe, ensemble), 0o755),
        "k8s.yaml": (render_k8s(recipe), 0o644),
        LOCK_SCRIPT: (Path(compat.__file__).read_text(encoding="utf-8"), 0o755),
        **tokenizer_files(host.tokenizer),
    }
    if prompts:
        files.update(prompt_files(prompts, trtllm_input_data(prompts, recipe.bench.output_len)))
    return files


def tokenizer_files(folder: Path | None) -> dict[str, tuple[str, int]]:
    """tokenizer/ for bench.sh (genai-perf and aiperf load a transformers tokenizer folder): `folder`'s
    tokenizer.json and its tokenizer_config.json (a minimal one when absent); nothing when `folder` has none."""
    tok = folder / "tokenizer.json" if folder is not None else None
    if tok is None or not tok.is_file():
        return {}
    cfg = tok.with_name("tokenizer_config.json")
    config = (
        cfg.read_text(encoding="utf-8") if cfg.is_file() else json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"})
    )
    return {
        "tokenizer/tokenizer.json": (tok.read_text(encoding="utf-8"), 0o644),
        "tokenizer/tokenizer_config.json": (config, 0o644),
    }


def prompt_files(prompts: list[str], input_data: dict[str, Any]) -> dict[str, tuple[str, int]]:
    """bench.sh's inputs: perf_analyzer's --input-data document and the prompts as JSON lines."""
    return {
        "inputs.json": (json.dumps(input_data) + "\n", 0o644),
        "prompts.jsonl": ("".join(json.dumps({"text": t}) + "\n" for t in prompts), 0o644),
    }


def write_bundle(
    recipe: Recipe, out: Path, host: HostPaths, prompts: list[str] | None = None, ensemble: str = ENSEMBLE
) -> dict[str, Path]:
    """Write the bundle into `out` (`write_files`)."""
    return write_files(bundle_files(recipe, host, prompts, ensemble), out)


def write_files(files: dict[str, tuple[str, int]], out: Path) -> dict[str, Path]:
    """Write name -> (text, mode) into `out`, created whole in a temp folder beside it and renamed (an existing
    `out` is replaced only after the new one is complete: `builder.files.staged_dir`); returns name -> path."""
    out = Path(out)
    with staged_dir(out) as tmp:
        for name, (text, mode) in files.items():
            (tmp / name).parent.mkdir(exist_ok=True)
            (tmp / name).write_text(text, encoding="utf-8")
            os.chmod(tmp / name, mode)
        os.chmod(tmp, 0o755)
    return {p.relative_to(out).as_posix(): p for p in sorted(out.rglob("*")) if p.is_file()}


# -- a served engine's greedy tokens (scripts/gpu_check.sh compares them with the ONNX Runtime engine) ---------


def _flat(value: Any) -> list[int]:
    if isinstance(value, list):
        return [x for v in value for x in _flat(v)]
    return [int(value)]


def parse_stream_ids(body: str) -> list[int]:
    """Token ids from Triton `generate_stream` server-sent events of the tensorrt_llm model (`data: {json}` lines,
    each with that response's new `output_ids`); RuntimeError on an event carrying `error`."""
    ids: list[int] = []
    for line in body.splitlines():
        if not line.startswith("data:"):
            continue
        event = json.loads(line[5:])
        if "error" in event:
            raise RuntimeError(f"generate_stream error: {event['error']}")
        ids += _flat(event.get("output_ids", []))
    return ids


def served_tokens(
    http: str, prompt_ids: list[int], max_tokens: int, model: str = TRTLLM_MODEL, timeout: float = 300.0
) -> list[int]:
    """Greedy continuation of `prompt_ids` from a served tensorrt_llm model (Triton HTTP generate_stream, streaming
    on: each response carries only its new tokens). `http` is host:port."""
    import urllib.request

    body = {
        "input_ids": prompt_ids,
        "input_lengths": [len(prompt_ids)],
        "request_output_len": [max_tokens],
        "streaming": [True],
    }
    req = urllib.request.Request(
        f"http://{http}/v2/models/{model}/generate_stream",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return parse_stream_ids(resp.read().decode("utf-8"))


def first_difference(expected: list[int], served: list[int]) -> int | None:
    """Index of the first token where `served` departs from `expected` (None: `served` starts with all of
    `expected`; the served engine may run on past a stop token the reference stopped at)."""
    for i, tok in enumerate(expected):
        if i >= len(served) or served[i] != tok:
            return i
    return None
