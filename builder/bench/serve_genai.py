"""`trtspec bench --genai-perf`: genai-perf 0.0.16 over the same server, levels, modes and prompts.

genai-perf drives the same perf_analyzer 2.51 binary (found on PATH: the project environment's bin/
goes first). Its Triton gRPC path (`--endpoint-type kserve --backend tensorrtllm`) sends TensorRT-LLM's
`exclude_input_in_output` input, which the trtspec ensemble does not have, so it is run against
Triton's HTTP generate extension (`--endpoint-type generate`, endpoint `v2/models/<model>/generate_stream`):
JSON fields that are inputs (`speculate`) become tensors, the rest (`ignore_eos`) request parameters.
genai-perf counts output tokens by re-tokenizing the streamed text with the recipe's tokenizer.

Install: `.venv/bin/python -m pip install genai-perf==0.0.16` (the serve extra carries it).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

INSTALL_HINT = (
    "--genai-perf needs genai-perf 0.0.16 in the project environment: bash scripts/setup.sh (serve extra), "
    "or .venv/bin/python -m pip install genai-perf==0.0.16"
)


def find_genai_perf() -> Path | None:
    here = Path(sys.prefix) / "bin" / "genai-perf"
    if here.is_file():
        return here
    found = shutil.which("genai-perf")
    return Path(found) if found else None


def genai_command(
    exe: Path,
    model: str,
    http: str,
    prompts_file: Path,
    tokenizer_dir: Path,
    concurrency: int,
    output_len: int,
    speculate: bool,
    window_ms: int,
    artifacts: Path,
) -> list[str]:
    return [
        str(exe),
        "profile",
        "-m",
        model,
        "--endpoint-type",
        "generate",
        "--endpoint",
        f"v2/models/{model}/generate_stream",
        "--streaming",
        "-u",
        http,
        "--concurrency",
        str(concurrency),
        "--input-file",
        str(prompts_file),
        "--output-tokens-mean",
        str(output_len),
        "--extra-inputs",
        "ignore_eos:true",
        "--extra-inputs",
        f"speculate:{str(speculate).lower()}",
        "--tokenizer",
        str(tokenizer_dir),
        "--measurement-interval",
        str(window_ms),
        "-s",
        "999",
        "--artifact-dir",
        str(artifacts),
    ]


def _pick(data: dict[str, Any], key: str, stat: str) -> float | None:
    v = data.get(key)
    return None if not isinstance(v, dict) or v.get(stat) is None else float(v[stat])


def parse_genai_json(path: Path) -> dict[str, Any]:
    d = json.loads(path.read_text(encoding="utf-8"))
    return {
        "output_token_throughput": _pick(d, "output_token_throughput", "avg"),
        "request_throughput": _pick(d, "request_throughput", "avg"),
        "request_latency_p50_ms": _pick(d, "request_latency", "p50"),
        "request_latency_p99_ms": _pick(d, "request_latency", "p99"),
        "ttft_p50_ms": _pick(d, "time_to_first_token", "p50"),
        "ttft_mean_ms": _pick(d, "time_to_first_token", "avg"),
        "itl_mean_ms": _pick(d, "inter_token_latency", "avg"),
        "output_sequence_length": _pick(d, "output_sequence_length", "avg"),
        "request_count": _pick(d, "request_count", "avg"),
    }


def run_genai(
    endpoints: dict[str, str], model: str, prompts: Any, s: Any, out: Path, log: Callable[[str], None], repo: Path
) -> list[dict[str, Any]]:
    """genai-perf at every level in both modes (alternating like the perf_analyzer sweep)."""
    from builder.bench.perf_analyzer import log_tail, run_tool
    from builder.bench.serve_settings import MODES, BenchError, order
    from builder.serve.perf import find_perf_analyzer, perf_env

    exe = find_genai_perf()
    if exe is None:
        raise BenchError(INSTALL_HINT)
    out.mkdir(parents=True, exist_ok=True)
    prompts_file = out / "prompts.jsonl"
    prompts_file.write_text("".join(json.dumps({"text": t}) + "\n" for t in prompts.texts), encoding="utf-8")
    tokenizer_dir = out / "tokenizer"  # genai-perf loads a transformers tokenizer from a folder
    tokenizer_dir.mkdir(exist_ok=True)
    repo_tok = Path(repo) / "preprocessing" / "1" / "tokenizer.json"
    shutil.copy2(repo_tok, tokenizer_dir / "tokenizer.json")
    (tokenizer_dir / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    env = perf_env()
    pa = find_perf_analyzer()
    env["PATH"] = os.pathsep.join(
        p for p in (str(pa.parent) if pa else "", str(Path(sys.prefix) / "bin"), env.get("PATH", "")) if p
    )
    env["HF_HUB_OFFLINE"] = "1"
    rows = []
    for i, c in enumerate(s.concurrency):
        for mode in order(i):
            art = out / f"{mode}_c{c}"
            cmd = genai_command(
                exe,
                model,
                endpoints["http"],
                prompts_file,
                tokenizer_dir,
                c,
                s.output_len,
                MODES[mode],
                s.window_ms,
                art,
            )
            logf = out / f"{mode}_c{c}.log"
            code = run_tool(cmd, env, logf, 300 + 6 * s.window_ms / 1000)
            found = sorted(art.rglob("profile_export_genai_perf.json"))
            if code != 0 or not found:
                raise BenchError(f"genai-perf failed ({mode}, concurrency {c}, exit {code}):\n{log_tail(logf)}")
            row = {
                "concurrency": c,
                "mode": mode,
                **parse_genai_json(found[0]),
                "json": str(found[0].relative_to(out.parent)),
            }
            log(
                f"genai-perf concurrency {c:3d} {mode:11s} {row['output_token_throughput'] or 0:9.1f} tok/s  "
                f"TTFT p50 {row['ttft_p50_ms'] or 0:.1f} ms  ITL {row['itl_mean_ms'] or 0:.3f} ms"
            )
            rows.append(row)
    return rows
