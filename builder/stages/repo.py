"""repo: the Triton model repository around the engine stage's folder (`triton_repo.emit`).

The front model named `triton.model_name` (text in, text out; relays to spec_decoder over a local socket and
forwards cancellation) → spec_decoder (Python backend, decoupled: the engine + the decoding loop with
in-flight batching, bounded queue `triton.max_queue_size`, deadline `triton.request_timeout_s`), plus
preprocessing (tokenizer) and postprocessing (detokenizer) for clients that tokenize themselves.
Every config.pbtxt is rendered from a ModelConfig protobuf. The repository is self-contained: the
engine folder (with its build manifest) is hard-linked or copied in.
"""

from __future__ import annotations

from pathlib import Path

from builder.errors import UserError
from builder.stages.context import NeedsGpu, StageContext


def run(ctx: StageContext, out: Path) -> None:
    recipe = ctx.loaded.recipe
    if recipe.target.engine_backend == "trtllm":
        from builder.stages.trtllm_repo import run as run_trtllm

        run_trtllm(ctx, out)
        return
    if recipe.target.device != "cpu":
        raise NeedsGpu("the repository of a GPU target wraps its TensorRT engine (built on a GPU host)")
    try:
        from triton_repo.config import Settings
        from triton_repo.emit import emit, python_paths, python_version
        from triton_repo.tensors import RESERVED_NAMES
    except ImportError as exc:
        raise UserError(f"the repo stage needs the serve extra ({exc}); run bash scripts/setup.sh") from None
    t = recipe.triton
    if t.model_name in RESERVED_NAMES:
        raise UserError(f"{t.model_name!r} is the name of a composing model", field="triton.model_name",
                        allowed=f"any other name than {', '.join(RESERVED_NAMES)}")  # fmt: skip
    settings = Settings(
        model_name=t.model_name,
        instances=(t.instances.preprocessing, t.instances.spec_decoder, t.instances.postprocessing),
        decoupled=t.decoupled, queue_delay_us=t.max_queue_delay_us,
        draft_schedule=tuple((int(b), int(n)) for b, n in t.draft_schedule),
        max_input_len=recipe.build.max_input_len, python_paths=python_paths(), python_version=python_version(),
        max_queue_size=t.max_queue_size, request_timeout_s=t.request_timeout_s,
    )  # fmt: skip
    ctx.say("writing the model repository")
    info = emit(out, ctx.upstream["engine"], settings)
    ctx.info.update(ensemble=info["ensemble"], models=info["models"], decoupled=t.decoupled,
                    python_paths=list(settings.python_paths))  # fmt: skip
