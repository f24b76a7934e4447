"""What a recipe's stages and engines are made of: checkpoints on disk, the model, the draft parts.

`Parts(loaded, method)` resolves the recipe's checkpoints (hf:// references must already be in the
local hub cache: no downloads at run time), loads the target and the method's draft (Medusa heads or
the EAGLE draft, strictly checked; upstream's pickled files only under `model.allow_pickle` /
`speculative.allow_pickle`, `builder.model.pickled`), and describes the drafter (`drafter_config`) as plain data, which
the engine folder stores so an engine can be opened without the recipe.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder.errors import UserError
from builder.recipe.loader import LoadedRecipe
from builder.recipe.resolve import parse_checkpoint, tree_field
from builder.speculative.choices import load_choices
from builder.speculative.lookahead.config import DEFAULT_LOOKAHEAD
from builder.speculative.ngram.config import DEFAULT_NGRAM

METHODS = ("none", "medusa", "eagle", "lookahead", "ngram")
ZERO_WEIGHT = ("none", "lookahead", "ngram")  # methods any recipe's engine runs (`--method`): no draft weights
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
        if self.method not in METHODS:
            raise UserError(f"unknown method {self.method!r}", field="--method", allowed=", ".join(METHODS))
        s = self.spec
        if self.method in ("medusa", "eagle") and s.method != self.method:
            raise UserError(
                f"the recipe configures {s.method!r}, not {self.method!r}: use a recipe whose "
                f"speculative.method is {self.method} (e.g. recipes/tiny-llama3-{self.method}.yaml)",
                field="--method",
                allowed=", ".join(sorted({*ZERO_WEIGHT, s.method})),
            )

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
        tree = self.spec.tree if self.method == "medusa" else self.spec.tree.choices
        return load_choices(tree, self.loaded.dir_of(tree_field(self.loaded.recipe)))

    def lookahead(self) -> tuple[int, int, int]:
        s = self.spec
        return (s.window, s.ngram, s.verification_set) if s.method == "lookahead" else DEFAULT_LOOKAHEAD

    def ngram(self) -> tuple[int, int, int, int, bool, bool]:
        s = self.spec
        return s.settings if s.method == "ngram" else DEFAULT_NGRAM

    def medusa(self, model):
        from builder.speculative.medusa.heads import load_medusa

        heads = load_medusa(
            self.draft_dir(),
            hidden_size=model.cfg.hidden_size,
            vocab_size=model.cfg.vocab_size,
            dtype=model.dtype,
            allow_pickle=self.spec.allow_pickle,
            opt_in=PICKLE_FIELD,
        )
        if heads.num_heads < self.spec.num_heads:
            raise UserError(
                f"the checkpoint has {heads.num_heads} heads, the recipe asks for {self.spec.num_heads}",
                field="speculative.num_heads",
            )
        return heads

    def eagle(self, model, draft_vocab: bool = True):
        """The EAGLE draft over the target `model`, drafting over the recipe's draft vocabulary (`draft_vocab`
        False: the checkpoint alone, as the load stage checks it)."""
        from builder.speculative.eagle.draft_model import load_eagle

        draft = load_eagle(
            self.draft_dir(),
            model.embed_tokens.weight,
            model.lm_head.weight,
            dtype=model.dtype,
            allow_pickle=self.spec.allow_pickle,
            opt_in=PICKLE_FIELD,
        )
        if draft_vocab:
            draft.set_draft_vocab(self.draft_vocab(model.cfg.vocab_size))
        return draft

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
        """`speculative.draft_weights` (int8 / int4, or None): Medusa and EAGLE (the recipe's own method) only."""
        return getattr(self.spec, "draft_weights", None) if self.method in ("medusa", "eagle") else None

    def drafter_config(self) -> dict[str, Any]:
        """The drafter as plain data (stored in engine.json; see `drafter_from_config`)."""
        if self.method == "lookahead":
            w, n, g = self.lookahead()
            return {"method": "lookahead", "window": w, "ngram": n, "verification_set": g}
        if self.method == "ngram":
            from builder.speculative.drafters import NGRAM_KEYS  # (NumPy: not at import, `trtspec plan` reads STAGEs)

            return {"method": "ngram", **dict(zip(NGRAM_KEYS, self.ngram()))}
        weights = {} if self.draft_weights is None else {"draft_weights": self.draft_weights}  # (in the graph)
        if self.method == "medusa":
            return {"method": "medusa", "choices": [list(c) for c in self.choices()], **weights}
        if self.method == "eagle":
            t = self.spec.tree
            shape = (
                {"dynamic": {"depth": t.depth, "top_k": t.top_k, "total_nodes": t.total_nodes}}
                if t.type == "dynamic"
                else {"choices": [list(c) for c in self.choices()]}
            )
            vocab = {} if self.spec.draft_vocab is None else {"draft_vocab": self.spec.draft_vocab}  # (in the graph)
            return {"method": "eagle", "version": self.spec.version, **shape, **vocab, **weights}
        return {"method": "none"}
