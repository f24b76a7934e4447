"""What the per-method tuners share: calibration prompts, the torch reference model and drafters for any setting.

`Calibration(loaded, prompts, prompt_len, max_new)` tokenizes the first documents of the recipe's
calibration source (`builder.quantize.calibration.documents`: builtin:stdlib is the fixture corpus's
training files, builtin:humaneval the second half of HumanEval; the measured speedup decodes the first
HumanEval prompts, so the two never overlap) and loads the target once. `engine(...)` gives the torch
reference engine (with the method's fused heads of the needed top-k: Medusa) and `drafters(config)` a drafter
factory for any config of the recipe's method (its `make_drafter`), a draft graph's torch net (EAGLE's,
`Method.torch_net`) sized for the widest setting asked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from builder.errors import UserError
from builder.recipe.loader import LoadedRecipe
from builder.speculative import registry
from builder.speculative.method import DRAFT_GRAPH, Config, resolve
from builder.stages.parts import Parts, stop_ids

MIN_PROMPT = 16  # tokens: shorter documents are skipped
MAX_TREE = 256  # tree nodes the calibration engine has KV room for


@dataclass
class Calibration:
    loaded: LoadedRecipe
    num_prompts: int
    prompt_len: int
    max_new: int
    parts: Parts = field(init=False)
    prompts: list[list[int]] = field(init=False)
    stop_ids: list[int] = field(init=False)

    def __post_init__(self) -> None:
        from builder.quantize.calibration import FIELD, documents
        from builder.stages.decoders import load_tokenizer

        self.parts = Parts(self.loaded, self.loaded.recipe.speculative.method)
        tok = load_tokenizer(self.parts.tokenizer_dir())
        src = self.loaded.recipe.quantization.calibration.source
        base = self.loaded.dir_of(tuple(FIELD.split(".")))
        self.prompts = []
        for text in documents(src, base, self.num_prompts):
            ids = tok.encode(text[: self.prompt_len * 8]).ids[: self.prompt_len]
            if len(ids) >= MIN_PROMPT:
                self.prompts.append(ids)
            if len(self.prompts) == self.num_prompts:
                break
        if len(self.prompts) < self.num_prompts:
            raise UserError(
                f"{src} gives {len(self.prompts)} documents of >= {MIN_PROMPT} tokens, --prompts asks for "
                f"{self.num_prompts}",
                field=FIELD,
            )
        self.stop_ids = stop_ids(self.parts.base_dir())
        self._model = self.parts.model()
        self._engines: dict[int, Any] = {}
        self._net: Any = None
        self._draft: Any = None

    @property
    def capacity(self) -> int:
        """KV tokens per sequence: a prompt, its continuation and a tree of up to MAX_TREE nodes."""
        return min(self._model.cfg.max_position_embeddings, self.prompt_len + self.max_new + MAX_TREE)

    def engine(self, medusa_topk: int = 0) -> Any:
        """The torch reference engine (`TorchEngine`), with the recipe's fused heads (its draft: Medusa's) when
        medusa_topk > 0."""
        from builder.engines.torch_engine import TorchEngine

        if medusa_topk not in self._engines:
            kw: dict[str, Any] = {}
            if medusa_topk:
                kw = {"medusa": self.draft(), "medusa_topk": medusa_topk}
            elif registry.of(self.loaded.recipe.speculative).target_features:
                # EAGLE-3: `hidden` is the draft's aux layers' outputs (its fc applied in the draft), as the decoders'
                # torch engine (`builder.stages.decoders`) and the exported target graph give it
                kw = {"features": tuple(self.draft().aux_layers)}
            self._engines[medusa_topk] = TorchEngine(self._model, self.capacity, 1, **kw)
        return self._engines[medusa_topk]

    def draft(self) -> Any:
        """The recipe's draft over the calibration target, loaded once."""
        if self._draft is None:
            self._draft = self.parts.draft(self._model)
        return self._draft

    def drafters(self, config: Config, top_k: int = 0, tentative: int = 0) -> Callable[[], Any]:
        """A drafter factory for `config` (a config of the recipe's method, or of a zero-weight one); a draft graph's
        net (EAGLE's) returns exactly top_k ranks (EAGLE-2 expands every rank the net returns, as the exported graph
        of that top-k does) and holds `tentative` tree slots."""
        m = registry.of(config)
        net = None
        if m.exports == DRAFT_GRAPH:
            assert m.torch_net is not None, f"{m.name} exports a draft graph: Method.torch_net names its torch net"
            cap = self.capacity + tentative + 1
            if self._net is None or self._net.top_k != top_k or self._net.capacity < cap:
                self._net = resolve(m.torch_net)(self.draft(), top_k, cap)
            net = self._net
        return m.make_drafter(config, net)
