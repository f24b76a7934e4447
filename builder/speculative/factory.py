"""Build the torch reference engine, a drafter and the tokenizer from a loaded recipe."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.errors import UserError
from builder.recipe.loader import LoadedRecipe
from builder.recipe.resolve import parse_checkpoint, tree_field
from builder.speculative.choices import load_choices

METHODS = ("none", "medusa", "eagle", "lookahead")
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


@dataclass
class Decoder:
    engine: Any  # TorchEngine
    tokenizer: Any  # tokenizers.Tokenizer
    make_drafter: Any  # () -> Drafter | None (a fresh drafter per generation)
    method: str
    label: str  # e.g. "eagle-2", "medusa", "lookahead(W=4,N=4,G=4)"
    stop_ids: list[int]


def local_dir(loaded: LoadedRecipe, field: tuple[str, ...], text: str) -> Path:
    """A local checkpoint directory for `text`; hub refs are resolved with huggingface_hub."""
    ref = parse_checkpoint(text, loaded.dir_of(field))
    if ref.local is not None:
        if not ref.local.is_dir():
            raise UserError(f"checkpoint missing: {ref.local}", field=".".join(field))
        return ref.local
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(ref.repo, revision=ref.revision))
    except Exception as exc:  # network errors, missing repo, gated model: say so plainly
        raise UserError(f"cannot fetch {text} from the hub ({type(exc).__name__}: {exc}); download it and "
                        "set the checkpoint to the local directory", field=".".join(field)) from None


def load_tokenizer(directory: Path):
    from tokenizers import Tokenizer

    path = directory / "tokenizer.json"
    if not path.is_file():
        raise UserError(f"no tokenizer.json in {directory}", field="model.tokenizer")
    return Tokenizer.from_file(str(path))


def stop_ids(directory: Path) -> list[int]:
    """eos_token_id(s) from generation_config.json, else config.json."""
    import json

    for name in ("generation_config.json", "config.json"):
        p = directory / name
        if p.is_file():
            eos = json.loads(p.read_text()).get("eos_token_id")
            if eos is not None:
                return [eos] if isinstance(eos, int) else list(eos)
    return []


def build_decoder(loaded: LoadedRecipe, method: str | None = None, max_seq_len: int | None = None) -> Decoder:
    """Engine + drafter factory for `method` (default: the recipe's own)."""
    from builder.model.engine import TorchEngine

    recipe = loaded.recipe
    method = method or recipe.speculative.method
    if method not in METHODS:
        raise UserError(f"unknown method {method!r}", field="--method", allowed=", ".join(METHODS))
    base = local_dir(loaded, ("model", "checkpoint"), recipe.model.checkpoint)
    tok_dir = local_dir(loaded, ("model", "tokenizer"), recipe.model.tokenizer) if recipe.model.tokenizer else base
    engine = TorchEngine.from_pretrained(base, DTYPES[recipe.model.dtype], max_seq_len or recipe.build.max_seq_len)
    make, label = _drafter_factory(loaded, method, engine)
    return Decoder(engine, load_tokenizer(tok_dir), make, method, label, stop_ids(base))


def _drafter_factory(loaded: LoadedRecipe, method: str, engine):
    spec = loaded.recipe.speculative
    if method == "none":
        return (lambda: None), "none"
    if method == "lookahead":
        from builder.speculative.lookahead.drafter import LookaheadDrafter

        w, n, g = (spec.window, spec.ngram, spec.verification_set) if spec.method == "lookahead" else (4, 4, 4)
        return (lambda: LookaheadDrafter(w, n, g)), f"lookahead(W={w},N={n},G={g})"
    if spec.method != method:
        raise UserError(f"the recipe configures {spec.method!r}, not {method!r}: use a recipe whose "
                        f"speculative.method is {method} (e.g. recipes/tiny-llama3-{method}.yaml)", field="--method",
                        allowed=", ".join(sorted({"none", "lookahead", spec.method})))
    draft_dir = local_dir(loaded, ("speculative", "checkpoint"), spec.checkpoint)
    if method == "medusa":
        return _medusa(loaded, draft_dir, engine)
    return _eagle(loaded, draft_dir, engine)


def _medusa(loaded: LoadedRecipe, draft_dir: Path, engine):
    from builder.speculative.medusa.drafter import MedusaDrafter
    from builder.speculative.medusa.heads import load_medusa
    from builder.speculative.tree import tree_from_choices

    spec = loaded.recipe.speculative
    heads = load_medusa(draft_dir, hidden_size=engine.hidden_size, vocab_size=engine.vocab_size,
                        dtype=engine.model.dtype)
    if heads.num_heads < spec.num_heads:
        raise UserError(f"the checkpoint has {heads.num_heads} heads, the recipe asks for {spec.num_heads}",
                        field="speculative.num_heads")
    tree = tree_from_choices(load_choices(spec.tree, loaded.dir_of(tree_field(loaded.recipe))))
    return (lambda: MedusaDrafter(heads, tree)), "medusa"


def _eagle(loaded: LoadedRecipe, draft_dir: Path, engine):
    from builder.speculative.eagle.draft_model import load_eagle
    from builder.speculative.eagle.drafter import DynamicSpec, EagleDrafter
    from builder.speculative.eagle_tree import static_tree

    spec = loaded.recipe.speculative
    model = engine.model
    draft = load_eagle(draft_dir, model.embed_tokens.weight, model.lm_head.weight, dtype=model.dtype)
    if spec.tree.type == "dynamic":
        tree: Any = DynamicSpec(spec.tree.depth, spec.tree.top_k, spec.tree.total_nodes)
    else:
        tree = static_tree(load_choices(spec.tree.choices, loaded.dir_of(tree_field(loaded.recipe))))
    return (lambda: EagleDrafter(draft, tree, engine.max_seq_len)), f"eagle-{spec.version}"
