"""repo: the Triton model repository around the engine stage's folder (`triton_repo.emit`).

The front model named `triton.model_name` (text in, text out; relays to spec_decoder over a local socket and
forwards cancellation) → spec_decoder (Python backend, decoupled: the engine + the decoding loop with
in-flight batching, bounded queue `triton.max_queue_size`, deadline `triton.request_timeout_s`), plus
preprocessing (tokenizer) and postprocessing (detokenizer) for clients that tokenize themselves.
Every config.pbtxt is rendered from a ModelConfig protobuf. The repository is self-contained and
relocatable: the engine folder (with its build manifest) is hard-linked or copied in, the code the models
import travels with them (`triton_repo.runtime`), and no config names a path outside the repository.

Both engine backends: a cpu target wraps its ONNX Runtime folder (spec_decoder KIND_CPU); a GPU target wraps
its TensorRT folder (built on a GPU host by the engine stage), spec_decoder KIND_GPU on the recipe's GPUs
(`target.gpus`: devices 0..gpus-1, `triton.instances.spec_decoder` instances on each). The repository is
written wherever the engine folder exists — rendering needs no GPU; serving it needs the GPU the engines'
version lock names (`triton_repo.compat`).
"""

from __future__ import annotations

from pathlib import Path

from builder.errors import UserError
from builder.handoffs import RepoInfo
from builder.speculative.registry import GROUP, third_party
from builder.stages.stage import Stage, StageContext
from triton_repo.runtime import ENTRY, Carried


def carried(engine_dir: Path) -> tuple[Carried, ...]:
    """The engine's drafter when another distribution registers its method (`registry.third_party`): the runtime
    carries its package, so the repository serves where it is not installed."""
    from builder.handoffs import read_engine_json

    method = read_engine_json(engine_dir)["drafter"]["method"]
    return tuple(
        Carried(t.package, t.root, t.distribution, t.version, GROUP, t.method.name, t.entry_point)
        for t in third_party()
        if t.method.name == method
    )


def run(ctx: StageContext, out: Path) -> None:
    recipe = ctx.loaded.recipe
    try:
        from triton_repo.config import RepositorySettings
        from triton_repo.emit import emit
        from triton_repo.tensors import RESERVED_NAMES
    except ImportError as exc:
        raise UserError(f"the repo stage needs the serve extra ({exc}); run bash scripts/setup.sh") from None
    t = recipe.triton
    if t.model_name in RESERVED_NAMES:
        raise UserError(
            f"{t.model_name!r} is the name of a composing model",
            field="triton.model_name",
            allowed=f"any other name than {', '.join(RESERVED_NAMES)}",
        )
    settings = RepositorySettings(
        model_name=t.model_name,
        instances=(t.instances.preprocessing, t.instances.spec_decoder, t.instances.postprocessing),
        decoupled=t.decoupled,
        queue_delay_us=t.max_queue_delay_us,
        draft_schedule=tuple((int(b), int(n)) for b, n in t.draft_schedule),
        max_input_len=recipe.build.max_input_len,
        max_queue_size=t.max_queue_size,
        request_timeout_s=t.request_timeout_s,
        gpus=tuple(range(recipe.target.gpus)) if ctx.backend.gpu else (),
    )
    ctx.say(
        "writing the model repository" + (f" (spec_decoder on GPUs {list(settings.gpus)})" if settings.gpus else "")
    )
    info = emit(out, ctx.upstream["engine"], settings, carried(ctx.upstream["engine"]))
    ctx.info = RepoInfo(
        ensemble=info["ensemble"],
        models=info["models"],
        decoupled=t.decoupled,
        engine_backend=info["engine"]["backend"],
        gpus=list(settings.gpus),
        runtime=info["runtime"],
    )


STAGE = Stage(
    name="repo",
    description="Triton repository (pre → spec_decoder → post)",
    reads=("triton",),
    tools=("onnxruntime", "tritonclient", "nvidia-pytriton"),
    needs=("engine",),
    run=run,
    info=RepoInfo,
    # the repository carries the serving runtime (the models' import closure, copied by `triton_repo.runtime`, never
    # imported here) and the bootstrap model.py each model folder gets (`triton_repo.emit.BOOTSTRAP`)
    code=(*ENTRY, "triton_repo.models.model"),
)
