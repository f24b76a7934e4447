"""What a recipe's stages and engines are made of: checkpoints on disk, the model, the draft parts.

`Parts(loaded, method)` resolves the recipe's checkpoints (hf:// references must already be in the
local hub cache: no downloads at run time), loads the target and the method's draft (its `DraftCheckpoint` loader:
Medusa heads, the EAGLE draft, strictly checked; upstream's pickled files only under `model.allow_pickle` /
`speculative.allow_pickle`, `builder.model.pickled`), and gives the drafter's config (`drafter_config`: the method's
section with its static tree inline), which the engine folder stores so an engine can be opened without the recipe.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder.errors import UserError
from builder.recipe.loader import LoadedRecipe
from builder.recipe.resolve import parse_checkpoint, tree_field
from builder.speculative import registry
from builder.speculative.choices import load_choices
from builder.speculative.method import LoadOptions, Method

DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
PICKLE_FIELD = "speculative.allow_pickle"  # the draft's opt-in to upstream's pickled weights


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
        rev = "" if ref.revision == "main" else f" --revision {ref.revision}"
        raise UserError(
            f"{text} is not on this machine; fetch it first (`hf download {ref.repo}{rev}`) or set the "
            "checkpoint to a local directory",
            field=".".join(field),
        ) from None


def load_tokenizer(path: Path):
    """A tokenizers.Tokenizer from tokenizer.json (a file, or the directory holding it)."""
    from tokenizers import Tokenizer

    path = path / "tokenizer.json" if path.is_dir() else path
    if not path.is_file():
        raise UserError(f"no tokenizer.json at {path}", field="model.tokenizer")
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


@dataclass
class Parts:
    loaded: LoadedRecipe
    method: str  # the method to run: the recipe's own, or one of ZERO_WEIGHT
    _vocabs: dict[tuple[int, int], Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        m = registry.get(self.method, field="--method")
        s = self.spec
        if not m.zero_weight and s.method != self.method:  # its draft (weights, graphs) is the recipe's to build
            raise UserError(
                f"the recipe configures {s.method!r}, not {self.method!r}: use a recipe whose "
                f"speculative.method is {self.method} (e.g. recipes/tiny-llama3-{self.method}.yaml)",
                field="--method",
                allowed=", ".join(sorted({*registry.zero_weight(), s.method})),
            )

    @property
    def method_of(self) -> Method:
        """The method to run (`builder.speculative.registry`)."""
        return registry.get(self.method)

    @property
    def spec(self):
        return self.loaded.recipe.speculative

    @property
    def verification(self) -> str:
        """greedy | rejection: which step graphs the engine has (`speculative.verification`)."""
        return self.spec.verification

    @property
    def max_seq_len(self) -> int:
        return self.loaded.recipe.build.max_seq_len

    def base_dir(self) -> Path:
        return local_dir(self.loaded, ("model", "checkpoint"), self.loaded.recipe.model.checkpoint)

    def tokenizer_dir(self) -> Path:
        tok = self.loaded.recipe.model.tokenizer
        return local_dir(self.loaded, ("model", "tokenizer"), tok) if tok else self.base_dir()

    def draft_dir(self) -> Path:
        return local_dir(self.loaded, ("speculative", "checkpoint"), self.spec.checkpoint)

    def model(self):
        from builder.model.loader import load_model, resolve_dtype

        m = self.loaded.recipe.model
        from builder.quantize import prequantized  # a modelopt FP8 checkpoint: its dequantized weights

        pre = prequantized.detect(self.base_dir())
        if pre is not None:
            prequantized.check_recipe(self.loaded.recipe, pre)
            return prequantized.dequantized_model(pre.folder, resolve_dtype(DTYPES[m.dtype]))
        return load_model(self.base_dir(), resolve_dtype(DTYPES[m.dtype]), m.allow_pickle, "model.allow_pickle")

    def choices(self) -> list[tuple[int, ...]]:
        """The recipe's static tree (its method's `tree_path`: inline, a preset or a file)."""
        return load_choices(self.method_of.tree(self.spec), self.loaded.dir_of(tree_field(self.loaded.recipe)))

    def draft(self, model, draft_vocab: bool = True):
        """The method's draft over the target `model`, strictly checked (its `DraftCheckpoint` loader); an EAGLE
        draft drafts over the recipe's draft vocabulary (`draft_vocab` False: the checkpoint alone, as the load stage
        checks it)."""
        d = self.method_of.draft
        assert d is not None, f"{self.method} has no draft checkpoint"
        opts = LoadOptions(self.spec.allow_pickle, PICKLE_FIELD, self.draft_vocab if draft_vocab else None)
        return d.load(self.spec, self.draft_dir(), model, opts)

    def draft_vocab(self, vocab_size: int):
        """EAGLE's draft vocabulary (`speculative.draft_vocab`): [Vd] ascending target token ids, or None."""
        size = getattr(self.spec, "draft_vocab", None)
        if size is None:
            return None
        if size > vocab_size:
            raise UserError(
                f"draft_vocab={size} exceeds the target's vocab_size={vocab_size}",
                field="speculative.draft_vocab",
                allowed=f"1..{vocab_size}, or null",
            )
        from builder.quantize.calibration import FIELD, documents
        from builder.speculative.eagle.vocab import frequent_tokens

        if (size, vocab_size) not in self._vocabs:  # counted once (the FP8 quality report exports twice)
            src = self.loaded.recipe.quantization.calibration.source
            texts = documents(src, self.loaded.dir_of(tuple(FIELD.split("."))), 256)  # 256: stdlib files spread first
            self._vocabs[size, vocab_size] = frequent_tokens(
                load_tokenizer(self.tokenizer_dir()), texts, size, vocab_size, keep=stop_ids(self.base_dir())
            )
        return self._vocabs[size, vocab_size]

    @property
    def draft_weights(self) -> str | None:
        """`speculative.draft_weights` (int8 / int4, or None): methods with a draft of their own (the recipe's)."""
        return getattr(self.spec, "draft_weights", None) if self.method_of.draft is not None else None

    def drafter_config(self):
        """The drafter's config: the recipe's own section with its static tree inline (`Method.resolved`), or the
        method's defaults for another (zero-weight) method. engine.json stores it dumped as is."""
        m = self.method_of
        if self.method != self.spec.method:
            return m.default()
        return m.resolved(self.spec, self.loaded.dir_of(tree_field(self.loaded.recipe)))
