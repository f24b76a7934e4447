"""TensorRT-LLM's PyTorch / LLM-API flow end to end (step `llmapi-eagle3`; where `tensorrt_llm` imports, e.g. inside
NVIDIA's TensorRT-LLM release or Triton TRT-LLM container).

recipes/tiny-llama3-llmapi-eagle3.yaml (the tiny fixture + its EAGLE-3 draft made by `trtspec train-draft`):
`trtspec deploy` (checkpoint/model, checkpoint/draft, bundle/llm_api_options.yaml, repository), then the bundle's
launch.sh (trtllm-serve) outside docker — the options file's container paths rewritten to the deployed folders —
and the served greedy text (OpenAI completions over the prompt's token ids, temperature 0) compared with the ONNX
Runtime engine of recipes/tiny-llama3-eagle3.yaml (`trtspec generate --json`, its tokens decoded by the fixture's
tokenizer). Text, not ids: trtllm-serve's completion answers text. The server is stopped whatever happens (it is in
this step's process group, which the runner also kills on a timeout).
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from pathlib import Path
from typing import Any

from devtools.gpu_check.steps import PASS, Context, Fail, Verdict
from devtools.gpu_check.trtllm import PROMPT, TOKENS, cli, serving

RECIPE = "recipes/tiny-llama3-llmapi-eagle3.yaml"
ORT_RECIPE = "recipes/tiny-llama3-eagle3.yaml"
HTTP_PORT = 18100
READY_S = 900  # model load + CUDA graph capture


def _get(url: str, timeout: float = 5.0) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return json.loads(resp.read() or b"{}") if resp.status == 200 else None
    except (OSError, ValueError):
        return None


def _complete(http: str, model: str, prompt_ids: list[int], max_tokens: int) -> str:
    body = {"model": model, "prompt": prompt_ids, "max_tokens": max_tokens, "temperature": 0.0}
    req = urllib.request.Request(
        f"http://{http}/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=300) as resp:
        return str(json.loads(resp.read())["choices"][0]["text"])


def local_options(options: Path, checkpoint: Path, out: Path) -> Path:
    """The bundle's options file with its container checkpoint path replaced by the deployed folder's."""
    from builder.trtllm.llmapi.k8s import MOUNTS

    text = options.read_text(encoding="utf-8").replace(MOUNTS["checkpoint"], str(checkpoint))
    out.write_text(text, encoding="utf-8")
    return out


def llmapi_step(ctx: Context) -> Verdict:
    from tokenizers import Tokenizer

    work = ctx.work / "llmapi" / "eagle3"
    work.mkdir(parents=True, exist_ok=True)
    cache = Path(ctx.cache_dir)
    t0 = time.monotonic()
    dest = work / "deploy"
    cli(ctx.repo, ["deploy", RECIPE, "--cache-dir", str(cache), "--out", str(dest), "-q"], 900, work / "deploy.log")
    deploy_s = time.monotonic() - t0
    options = local_options(dest / "bundle" / "llm_api_options.yaml", dest / "checkpoint", work / "options.yaml")
    http = int(ctx.params.get("http_port", HTTP_PORT))
    env = dict(os.environ, MODEL_DIR=str(dest / "checkpoint" / "model"), OPTIONS=str(options), HTTP_PORT=str(http))
    env["HOST"] = "127.0.0.1"
    launch = dest / "bundle" / "launch.sh"
    health = f"http://127.0.0.1:{http}/health"
    with serving(launch, env, work / "server.log", lambda: _get(health) is not None, READY_S, "trtllm-serve"):
        models = _get(f"http://127.0.0.1:{http}/v1/models") or {}
        model = (models.get("data") or [{"id": str(dest / "checkpoint" / "model")}])[0]["id"]
        ort = json.loads(
            cli(
                ctx.repo,
                ["generate", ORT_RECIPE, "--prompt", PROMPT, "--max-new-tokens", str(TOKENS), "--json"],
                timeout=300,
            )
        )
        served = _complete(f"127.0.0.1:{http}", model, ort["prompt_ids"], TOKENS)
    tok = Tokenizer.from_file(str(dest / "checkpoint" / "model" / "tokenizer.json"))
    expected = tok.decode(ort["token_ids"])
    details = {"deploy_s": round(deploy_s, 1), "ort_text": expected, "served_text": served, "work": str(work)}
    if not served.startswith(expected) and not expected.startswith(served):
        at = next((i for i, (a, b) in enumerate(zip(expected, served)) if a != b), min(len(expected), len(served)))
        raise Fail(
            f"served text departs from ONNX Runtime's at character {at}: {expected[at : at + 20]!r} vs "
            f"{served[at : at + 20]!r}"
        )
    return Verdict(PASS, f"EAGLE-3 served greedy text equals ONNX Runtime's ({len(ort['token_ids'])} tokens)", details)
