"""An engine, a drafter factory and the tokenizer from a loaded recipe.

`engine="torch"` is the reference (builder.engines.torch_engine); `engine="onnxruntime"` runs the
exported graphs (builder.engines.ort), the default for CPU recipes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from builder.errors import UserError
from builder.recipe.loader import LoadedRecipe
from builder.recipe.resolve import parse_checkpoint, tree_field
from builder.speculative.choices import load_choices

METHODS = ("none", "medusa", "eagle", "lookahead")
ENGINES = ("torch", "onnxruntime")
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


@dataclass
class Decoder:
    engine: Any  # an Engine (builder.speculative.engine)
    tokenizer: Any  # tokenizers.Tokenizer
    make_drafter: Callable[[], Any]  # () -> Drafter | None (a fresh drafter per Decoder run)
    method: str
    label: str  # e.g. "eagle-2", "medusa", "lookahead(W=4,N=4,G=4)"
    stop_ids: list[int]


def local_dir(loaded: LoadedRecipe, field: tuple[str, ...], text: str) -> Path:
    """A local checkpoint directory for `text`. Hub references must already be on disk: no downloads."""
    ref = parse_checkpoint(text, loaded.dir_of(field))
    if ref.local is not None:
        if not ref.local.is_dir():
            raise UserError(f"checkpoint missing: {ref.local}", field=".".join(field))
        return ref.local
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(ref.repo, revision=ref.revision, local_files_only=True))
    except (OSError, ValueError):  # not in the local hub cache (LocalEntryNotFoundError is both)
        raise UserError(f"{text} is not on this machine; fetch it first (`hf download {ref.repo}"
                        f"{'' if ref.revision == 'main' else ' --revision ' + str(ref.revision)}`) or set the "
                        "checkpoint to a local directory", field=".".join(field)) from None


def load_tokenizer(directory: Path):
    from tokenizers import Tokenizer

    path = directory / "tokenizer.json"
    if not path.is_file():
        raise UserError(f"no tokenizer.json in {directory}", field="model.tokenizer")
    return Tokenizer.from_file(str(path))


def stop_ids(directory: Path) -> list[int]:
    """eos_token_id(s) from generation_config.json, else config.json."""
    for name in ("generation_config.json", "config.json"):
        p = directory / name
        if p.is_file():
            eos = json.loads(p.read_text()).get("eos_token_id")
            if eos is not None:
                return [eos] if isinstance(eos, int) else list(eos)
    return []


def build_decoder(loaded: LoadedRecipe, method: str | None = None, max_seq_len: int | None = None,
                  engine: str = "torch", max_batch_size: int = 1) -> Decoder:  # fmt: skip
    """Engine + drafter factory for `method` (default: the recipe's own)."""
    recipe = loaded.recipe
    method = method or recipe.speculative.method
    if method not in METHODS:
        raise UserError(f"unknown method {method!r}", field="--method", allowed=", ".join(METHODS))
    if engine not in ENGINES:
        raise UserError(f"unknown engine {engine!r}", field="--engine", allowed=", ".join(ENGINES))
    base = local_dir(loaded, ("model", "checkpoint"), recipe.model.checkpoint)
    tok_dir = local_dir(loaded, ("model", "tokenizer"), recipe.model.tokenizer) if recipe.model.tokenizer else base
    parts = _Parts(loaded, method, base, max_seq_len or recipe.build.max_seq_len, max_batch_size)
    if engine == "torch":
        eng, make, label = parts.torch()
    else:
        from builder.engines.ort.build import ort_parts

        eng, make, label = ort_parts(parts)
    return Decoder(eng, load_tokenizer(tok_dir), make, method, label, stop_ids(base))


@dataclass
class _Parts:
    """What every engine needs from the recipe: the target, the method's draft parts and limits."""

    loaded: LoadedRecipe
    method: str
    base: Path
    max_seq_len: int
    max_batch_size: int

    @property
    def spec(self):
        return self.loaded.recipe.speculative

    def model(self):
        from builder.model.loader import load_model, resolve_dtype

        return load_model(self.base, resolve_dtype(DTYPES[self.loaded.recipe.model.dtype]))

    def lookahead(self) -> tuple[int, int, int]:
        s = self.spec
        return (s.window, s.ngram, s.verification_set) if s.method == "lookahead" else (4, 4, 4)

    def draft_dir(self) -> Path:
        s = self.spec
        if s.method != self.method:
            raise UserError(f"the recipe configures {s.method!r}, not {self.method!r}: use a recipe whose "
                            f"speculative.method is {self.method} (e.g. recipes/tiny-llama3-{self.method}.yaml)",
                            field="--method", allowed=", ".join(sorted({"none", "lookahead", s.method})))
        return local_dir(self.loaded, ("speculative", "checkpoint"), s.checkpoint)

    def choices(self):
        tree = self.spec.tree if self.method == "medusa" else self.spec.tree.choices
        return load_choices(tree, self.loaded.dir_of(tree_field(self.loaded.recipe)))

    def medusa(self, model):
        from builder.speculative.medusa.heads import load_medusa

        heads = load_medusa(self.draft_dir(), hidden_size=model.cfg.hidden_size, vocab_size=model.cfg.vocab_size,
                            dtype=model.dtype)  # fmt: skip
        if heads.num_heads < self.spec.num_heads:
            raise UserError(f"the checkpoint has {heads.num_heads} heads, the recipe asks for {self.spec.num_heads}",
                            field="speculative.num_heads")  # fmt: skip
        return heads

    def eagle(self, model):
        """(EagleDraft, tree or DynamicSpec, top_k the draft net must return, tentative slots per step)."""
        from builder.speculative.eagle.draft_model import load_eagle
        from builder.speculative.eagle.drafter import DynamicSpec
        from builder.speculative.eagle_tree import static_tree

        draft = load_eagle(self.draft_dir(), model.embed_tokens.weight, model.lm_head.weight, dtype=model.dtype)
        t = self.spec.tree
        if t.type == "dynamic":
            return draft, DynamicSpec(t.depth, t.top_k, t.total_nodes), t.top_k, t.depth * t.top_k
        tree = static_tree(self.choices())
        return draft, tree, int(tree.rank.max()) + 1, tree.num_nodes

    def label(self) -> str:
        if self.method == "lookahead":
            w, n, g = self.lookahead()
            return f"lookahead(W={w},N={n},G={g})"
        return f"eagle-{self.spec.version}" if self.method == "eagle" else self.method

    def torch(self):
        from builder.engines.torch_engine import TorchEngine

        model = self.model()
        kw = dict(max_seq_len=self.max_seq_len, max_batch_size=self.max_batch_size)
        if self.method == "none":
            return TorchEngine(model, **kw), (lambda: None), "none"
        if self.method == "lookahead":
            from builder.speculative.lookahead.drafter import LookaheadDrafter

            w, n, g = self.lookahead()
            return TorchEngine(model, **kw), (lambda: LookaheadDrafter(w, n, g)), self.label()
        if self.method == "medusa":
            from builder.speculative.medusa.drafter import MedusaDrafter
            from builder.speculative.tree import tree_from_choices

            heads = self.medusa(model)  # first: checks that the recipe configures Medusa
            tree = tree_from_choices(self.choices())
            k = int(tree.rank.max()) + 1  # type: ignore[union-attr]
            engine = TorchEngine(model, medusa=heads, medusa_topk=k, **kw)
            return engine, (lambda: MedusaDrafter(tree)), self.label()
        from builder.engines.torch_eagle import TorchEagleNet
        from builder.speculative.eagle.drafter import EagleDrafter

        draft, tree, top_k, tentative = self.eagle(model)
        net = TorchEagleNet(draft, top_k, self.max_seq_len + tentative, self.max_batch_size)
        return TorchEngine(model, **kw), (lambda: EagleDrafter(net, tree)), self.label()
