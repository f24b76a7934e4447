"""A speculative method as one unit: what a `builder/speculative/<method>/` folder exports (`METHOD`), and what every
other layer asks of it instead of comparing method names.

    config        the recipe section (pydantic; `method: Literal[name]`): `speculative:` in a recipe, and, dumped as
                  is with its static tree inlined (`Method.resolved`), the drafter engine.json stores and re-validates
                  when an engine folder opens (`builder.speculative.registry.drafter_config`)
    facts         what follows from a resolved config (`Facts`: draft nodes, levels, top-k, label, …)
    tree_path     where a static tree's choices sit in the section (a preset name or file until resolved)
    check         cross-field rules, reported through a small callback (`Checks`), never the recipe's classes
    make_drafter  a drafter factory for a resolved config (and the draft network the engine opened, if it has one)
    draft         the draft checkpoint, if the method has one (`DraftCheckpoint`: files, pickled names, loader)
    exports       what the export and engine stages build for it: NOTHING, FUSED_HEADS (extra heads fused into the
                  target step graph; the graph contract's Hm heads) or DRAFT_GRAPH (a separate draft graph, the
                  EAGLE contract), the exporter of a draft graph named by `export_draft`
    trtllm        how each TensorRT-LLM line serves it (`EngineFlow` / `PytorchFlow`, or `NotServed` with
                  upstream's reason): data, and dotted paths the trtllm layer resolves
    tune, memory  dotted paths of the modules (under builder/tune, builder/plan) holding its tuner and its share of
                  the memory plans

Dotted paths ("package.module:NAME") name code in higher layers (builder.export, builder.trtllm, builder.tune,
builder.plan): this package never imports them, not even lazily (STYLE.md §13); the layer that needs the code
resolves the path (`resolve`). Standard library and pydantic only at import: `trtspec validate` and the served
repository read methods without NumPy or torch; hooks import what they need inside the function.
"""

# trtllm: a Method states how each TensorRT-LLM line serves it (Trtllm: the engine flow, the PyTorch flow)

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal

from builder.model.pickled import Layout

if TYPE_CHECKING:
    from builder.section import Section
    from builder.speculative.protocols import Drafter, EagleNet

NOTHING, FUSED_HEADS, DRAFT_GRAPH = "nothing", "fused_heads", "draft_graph"
Exports = Literal["nothing", "fused_heads", "draft_graph"]
TRTLLM_ENGINE_LINE = "TensorRT-LLM 1.2"  # the last line with the TensorRT engine flow (trtllm-build, Triton C++)

DrafterFactory = Callable[[], "Drafter | None"]
Config = Any  # an instance of a Method's config class


@dataclass(frozen=True)
class Facts:
    """What follows from a resolved config (static tree inline): the engine, the plan and the tuner size by it."""

    nodes: int  # draft nodes per step at most, root excluded (the tree size; build.max_draft_len's default)
    levels: int  # tree levels drafted per step (0: no draft)
    label: str  # how reports name this drafter, e.g. "eagle-2", "lookahead(W=4,N=4,G=4)"
    top_k: int = 0  # candidates per node the fused heads / the draft graph return
    tentative: int = 0  # tentative tree slots the draft graph's KV cache holds beyond the sequence
    chains_only: bool = False  # every draft is a chain (root-only included): the plain-steps graph serves it
    max_depth: int | None = None  # the deepest a static tree may be (Medusa: one head per level)
    per_request: tuple[int, int, int] | None = None  # (W, N, G) a request may lower (Lookahead's request settings)

    @property
    def max_nodes(self) -> int:
        """Tree nodes of the largest step, root included."""
        return self.nodes + 1


@dataclass(frozen=True)
class Checks:
    """What a method's cross-field rules get: the recipe (read only) and the reporting callback
    `add(field: tuple[str, ...], message, allowed=None, warn=False)` (the checker's own)."""

    recipe: Any
    add: Callable[..., None]
    folder: Path | None = None  # the local checkpoint folder `check_config` reads (its weights' header, no torch)
    arch: Any = None  # the target's Architecture when known (the recipe's, else its local config.json's)


@dataclass(frozen=True)
class LoadOptions:
    """How the stages ask a draft loader to read a checkpoint."""

    allow_pickle: bool = False  # the recipe's opt-in to upstream's pickled weights
    opt_in: str = "speculative.allow_pickle"  # the field (or flag) named when a pickle is refused
    draft_vocab: Callable[[int], Any] | None = None  # vocab_size -> the draft vocabulary ([Vd] ids) or None


@dataclass(frozen=True)
class DraftCheckpoint:
    """A method's own weights (`speculative.checkpoint`, `speculative.allow_pickle` in its config).

    Its reader and checker are dotted paths, resolved only when a checkpoint is read: serving opens engines, never
    checkpoints, so the repository's runtime copy (`triton_repo.runtime`) must not reach their torch code through
    an import (`layout` is plain data: file names, `builder.model.pickled`).
    """

    what: str  # for messages: "Medusa heads", "EAGLE draft"
    layout: Layout  # its weight files, safetensors first, then upstream's pickled names (`builder.model.pickled`)
    module: str  # its pattern in quantization.exclude_modules (kept out of FP8)
    loader: (
        str  # dotted path: (config, checkpoint folder, the target model, LoadOptions) -> the draft, strictly checked
    )
    checker: str  # dotted path: (checkpoint folder) -> None, the strict loader over a converted folder (convert-draft)
    # (config, the checkpoint's config.json, Checks): the recipe against what the checkpoint says (no torch)
    check_config: Callable[[Config, dict[str, Any], Checks], None] | None = None

    def load(self, config: Config, folder: Path, model: Any, opts: LoadOptions) -> Any:
        return resolve(self.loader)(config, folder, model, opts)

    def check_folder(self, folder: Path) -> None:
        resolve(self.checker)(folder)


@dataclass(frozen=True)
class NotServed:
    """This TensorRT-LLM line does not serve the method: upstream's reason, said to the user as is."""

    reason: str


@dataclass(frozen=True)
class EngineFlow:
    """TensorRT-LLM 1.2's engine flow (trtllm-build + the Triton C++ inflight_batcher_llm backend) for a method."""

    build_mode: str | None  # trtllm-build --speculative_decoding_mode (None: plain decoding)
    decoding_mode: str  # the tensorrt_llm model's decoding_mode parameter
    architecture: str = "LlamaForCausalLM"  # the checkpoint's config.json architecture
    # the repository parameter carrying the method's settings (a `triton_repo.trtllm.settings.TrtllmRepoSettings`
    # field: "medusa_choices", "eagle_choices", "lookahead") and its value from a resolved config
    repo_parameter: str | None = None
    repo_value: Callable[[Config], Any] | None = None
    checkpoint: str | None = None  # dotted path: its checkpoint's draft (`builder.trtllm.checkpoint.drafts.Draft`)
    exact_draft_len: bool = False  # max_draft_len must equal the draft (else: at least the draft)
    check: Callable[[Config, Checks], None] | None = None  # its own rules on the recipe (after the shared ones)
    check_tree: Callable[[Config, Facts, Checks], None] | None = None  # rules on the resolved tree
    # (config, recipe, max_draft_len, draft nodes) -> None: raise UserError for what trtllm-build refuses
    refuse_build: Callable[[Config, Any, int, int], None] | None = None
    draft_len_source: Callable[[Config], str] | None = None  # build.json: where --max_draft_len comes from
    notes: Callable[[Config], list[dict[str, str]]] | None = None  # build.json: its settings that are no flags


@dataclass(frozen=True)
class PytorchFlow:
    """TensorRT-LLM's PyTorch backend (LLM API, trtllm-serve, Triton `llmapi`): the speculative_config it takes."""

    decoding_type: str | None  # `speculative_config.decoding_type` (tensorrt_llm/llmapi/llm_args.py); None: plain


@dataclass(frozen=True)
class Trtllm:
    engine: EngineFlow | NotServed
    pytorch: PytorchFlow | NotServed


def no_tree(_config: Config) -> tuple[str, ...] | None:
    return None


def no_checks(_config: Config, _checks: Checks) -> None:
    return None


def no_draft_checks(_config: Config, _facts: Facts, _checks: Checks) -> None:
    return None


@dataclass(frozen=True)
class Method:
    """One speculative method (module docstring)."""

    name: str  # the recipe's speculative.method; equals the config's `method` literal
    config: type[Section]
    summary: str  # one line: what it drafts with
    facts: Callable[[Config], Facts]  # of a resolved config
    make_drafter: Callable[[Config, "EagleNet | None"], DrafterFactory]  # (resolved config, draft net) -> factory
    trtllm: Trtllm
    drafts: bool = True  # False: plain decoding (method none)
    tree_path: Callable[[Config], tuple[str, ...] | None] = no_tree  # the static tree's choices in the section
    check: Callable[[Config, Checks], None] = no_checks  # first: before the shared speculative rules
    check_draft: Callable[[Config, Facts, Checks], None] = no_draft_checks  # after the tree is read and checked
    exact_draft_len: bool = False  # build.max_draft_len must equal facts.nodes (check_draft says so), not exceed it
    draft: DraftCheckpoint | None = None
    exports: Exports = NOTHING
    export_draft: str | None = None  # DRAFT_GRAPH: dotted path of the draft graph's exporter (builder.export)
    # DRAFT_GRAPH: the draft reads target features other than the last hidden state (EAGLE-3: the outputs of the
    # draft's `aux_layers`, through its `fc`): the target step returns those (`Llama.forward(features=…)`; the
    # exported target graph returns fc of them, `builder.export.target`)
    target_features: bool = False
    torch_net: str | None = None  # DRAFT_GRAPH: dotted path of the torch reference's draft net (builder.engines)
    tune: str | None = None  # dotted path of its tuner (`builder.tune.tuners.Tuner`); None: nothing to tune
    memory: str | None = None  # dotted path of its memory-plan share (`builder.plan.drafts.DraftMemory`)
    module: str = field(default="", compare=False)  # where METHOD is defined (the registry fills it in)

    @property
    def zero_weight(self) -> bool:
        """Runs over any recipe's engine (`--method`): no weights of its own, nothing exported for it."""
        return self.draft is None and self.exports == NOTHING

    def default(self) -> Config:
        """Its config with every default (the drafter `--method NAME` runs on another method's recipe)."""
        return self.config.model_validate({"method": self.name})

    def validate(self, data: Any) -> Config:
        """`data` (a dict, or a config of this method) as this method's config, validated."""
        if isinstance(data, self.config):
            return data
        return self.config.model_validate(data)

    def tree(self, config: Config) -> Any:
        """The static tree's choices as the section holds them (inline, preset name or file), or None."""
        path = self.tree_path(config)
        if path is None:
            return None
        node = config
        for part in path:
            node = getattr(node, part)
        return node

    def resolved(self, config: Config, tree_dir: Path | None = None) -> Config:
        """`config` with its static tree's choices inline (a preset or a file read relative to `tree_dir`): the form
        facts, drafters and engine.json take."""
        from builder.speculative.choices import load_choices

        path = self.tree_path(config)
        if path is None:
            return config
        choices = [list(c) for c in load_choices(self.tree(config), tree_dir)]
        return set_path(config, path, choices)


def set_path(config: Any, path: tuple[str, ...], value: Any) -> Any:
    """A validated copy of pydantic `config` with the field at `path` (attribute names) set to `value`."""
    data = config.model_dump()
    node = data
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return type(config).model_validate(data)


def resolve(dotted: str) -> Any:
    """The object a dotted path names: "package.module:NAME" (or "package.module": the module)."""
    module, _, name = dotted.partition(":")
    obj = importlib.import_module(module)
    for part in name.split(".") if name else ():
        obj = getattr(obj, part)
    return obj


def dotted_modules(method: Method) -> list[str]:
    """The modules of the hooks the build stages run by dotted path (draft graph exporter and torch net, draft
    checkpoint reader, TensorRT-LLM checkpoint draft): the stage keys cover their code (`builder.stages.keys`).
    The tuner and the memory-plan share run in `trtspec tune` / `plan`, never in a stage: not here."""
    paths = [method.export_draft, method.torch_net]
    if method.draft is not None:
        paths += [method.draft.loader, method.draft.checker]
    if isinstance(method.trtllm.engine, EngineFlow):
        paths.append(method.trtllm.engine.checkpoint)
    return [p.partition(":")[0] for p in paths if p]
