"""An engine, a drafter factory and the tokenizer for a recipe (`DecoderSetup`, what `build_decoder` returns) — what
`generate`, `profile-acceptance` and the benchmarks run a decoding loop (`builder.speculative.decoding.Decoder`) over.

`engine="onnxruntime"` (cpu recipes) or `"tensorrt"` (GPU recipes, on a GPU host with TensorRT) builds the
recipe through the cached stages (`builder.stages.runner`, up to `engine`) and opens the engine folder through
the backend-neutral `builder.engines.folder.open_engine`; `engine="torch"` runs the plain-torch reference over
the checkpoint directly (no build).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from builder.errors import UserError
from builder.recipe.loader import LoadedRecipe
from builder.speculative import registry
from builder.speculative.method import DRAFT_GRAPH, FUSED_HEADS, resolve
from builder.stages.parts import Parts, load_tokenizer, stop_ids  # load_tokenizer: re-exported
from builder.stages.registry import backend_of

ENGINES = ("torch", "onnxruntime", "tensorrt")


def cache_dir() -> Path:
    return Path(os.environ.get("TRTSPEC_CACHE_DIR", ".trtspec-cache"))


@dataclass
class DecoderSetup:
    """What a recipe's decoding loop runs over: its engine, a drafter factory, its tokenizer, the method's label."""

    engine: Any  # an Engine (builder.speculative.protocols)
    tokenizer: Any  # tokenizers.Tokenizer
    make_drafter: Callable[[], Any]  # () -> Drafter | None (a fresh drafter per decoding run)
    method: str
    label: str  # e.g. "eagle-2", "medusa", "lookahead(W=4,N=4,G=4)"
    stop_ids: list[int]
    # () -> the draft budget per step: the recipe's pinned `triton.draft_schedule`, else the engine folder's measured
    # rule for its own drafter (`builder.speculative.budget`; a fresh one per loop), else None (the whole draft)
    make_schedule: Callable[[], Any] = lambda: None


def build_decoder(
    loaded: LoadedRecipe,
    method: str | None = None,
    engine: str = "onnxruntime",
    max_batch_size: int = 1,
    threads: int = 1,
    cache: Path | None = None,
) -> DecoderSetup:
    """Engine + drafter factory for `method` (default: the recipe's own)."""
    if engine not in ENGINES:
        raise UserError(f"unknown engine {engine!r}", field="--engine", allowed=", ".join(ENGINES))
    parts = Parts(loaded, method or loaded.recipe.speculative.method)
    if engine == "torch":
        eng, make, label = _torch(parts, max_batch_size)
        base = parts.base_dir()
        return DecoderSetup(eng, load_tokenizer(parts.tokenizer_dir()), make, parts.method, label, stop_ids(base))
    return _engine_folder(parts, engine, max_batch_size, threads, cache or cache_dir())


def _engine_folder(parts: Parts, engine: str, max_batch_size: int, threads: int, cache: Path) -> DecoderSetup:
    """Build the recipe up to its engine folder (cached) and open it, whichever backend built it."""
    from builder.engines.folder import open_engine
    from builder.stages.runner import build

    target = parts.loaded.recipe.target
    if target.engine_backend != engine:
        raise UserError(
            f"target {target.device} builds {target.engine_backend} engines, not {engine}; here use "
            f"--engine torch{'' if backend_of(parts.loaded.recipe).served_elsewhere else f' or --engine {target.engine_backend}'}",
            field="--engine",
            allowed=", ".join(e for e in ENGINES if e in ("torch", target.engine_backend)),
        )
    if engine == "tensorrt":
        from builder.engines.tensorrt.probe import missing

        reason = missing()
        if reason is not None:
            raise UserError(
                f"target {target.device} runs TensorRT engines, which need TensorRT >= 10.15 on a GPU host "
                f"({reason}); here use --engine torch",
                field="--engine",
                allowed="torch",
            )
    result = build(parts.loaded, cache, until="engine")
    if result.stopped is not None:
        raise UserError(f"the engine could not be built here: {result.stopped}", field="--engine", allowed="torch")
    same = parts.method == parts.loaded.recipe.speculative.method
    opened = open_engine(
        result.folder("engine"), None if same else parts.drafter_config(), max_batch_size, threads=threads
    )
    return DecoderSetup(
        opened.engine,
        load_tokenizer(opened.tokenizer_path),
        opened.make_drafter,
        parts.method,
        opened.label,
        opened.stop_ids,
        schedule_of(parts.loaded, opened.meta) if same else lambda: None,
    )


def schedule_of(loaded: LoadedRecipe, meta: dict[str, Any]) -> Callable[[], Any]:
    """The draft budget per step of an engine folder's own drafter (`DecoderSetup.make_schedule`)."""
    from builder.engines.opened import budget_rule
    from builder.speculative.requests import DraftSchedule

    pinned = loaded.recipe.triton.draft_schedule
    if pinned:
        return lambda: DraftSchedule(pinned)
    return lambda: budget_rule(meta)


def _torch(parts: Parts, max_batch_size: int):
    from builder.engines.torch_engine import TorchEngine

    model = parts.model()
    config = parts.drafter_config()
    method = registry.of(config)
    facts = method.facts(config)
    kw = dict(max_seq_len=parts.max_seq_len, max_batch_size=max_batch_size)
    net = None
    draft = parts.draft(model) if method.exports in (FUSED_HEADS, DRAFT_GRAPH) else None
    if method.exports == FUSED_HEADS:
        engine = TorchEngine(model, medusa=draft, medusa_topk=facts.top_k, **kw)
    elif method.target_features and draft is not None:  # EAGLE-3: `hidden` is its aux layers' outputs (3·C wide)
        engine = TorchEngine(model, features=tuple(draft.aux_layers), **kw)
    else:
        engine = TorchEngine(model, **kw)
    if method.exports == DRAFT_GRAPH:  # the torch reference of its draft graph (`Method.torch_net`)
        net = resolve(method.torch_net or "")(
            draft, facts.top_k, parts.max_seq_len + facts.tentative + 1, max_batch_size
        )
    return engine, method.make_drafter(config, net), facts.label
