"""Facts derived from a validated recipe: checkpoint locations, architecture, tree and draft sizes."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builder.errors import UserError
from builder.recipe.schema import Architecture, Recipe
from builder.speculative import registry
from builder.speculative.method import Facts

if TYPE_CHECKING:
    from builder.model.config import LlamaConfig

HF_REF = re.compile(r"^hf://(?P<repo>[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)(@(?P<rev>[A-Za-z0-9_./-]+))?$")


@dataclass(frozen=True)
class CheckpointRef:
    text: str
    local: Path | None  # resolved local directory (may not exist), None for hf://
    repo: str | None = None
    revision: str | None = None


def parse_checkpoint(text: str, recipe_dir: Path) -> CheckpointRef:
    """A local directory (relative to the recipe) or hf://org/name[@revision]."""
    if text.startswith("hf://"):
        m = HF_REF.match(text)
        if not m:
            raise UserError(f"malformed hub reference {text!r}", allowed="hf://org/name or hf://org/name@revision")
        return CheckpointRef(text, None, m["repo"], m["rev"] or "main")
    if "://" in text:
        raise UserError(
            f"unsupported checkpoint scheme in {text!r}", allowed="a local directory, hf://org/name[@revision]"
        )
    path = Path(text).expanduser()
    return CheckpointRef(text, path if path.is_absolute() else (recipe_dir / path).resolve())


def read_config(directory: Path) -> dict:
    cfg = directory / "config.json"
    try:
        return json.loads(cfg.read_text())
    except FileNotFoundError:
        raise UserError(f"checkpoint has no config.json: {directory}") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{cfg}: not valid JSON ({exc})") from None


def architecture_from_hf(cfg: dict, source: Path) -> Architecture:
    """Llama architecture numbers from an HF config.json, parsed by the one parser the model uses
    (`builder.model.config.LlamaConfig`: same defaults, same checks); UserError when it is not a Llama."""
    from builder.model.config import LlamaConfig

    archs = cfg.get("architectures") or []
    if cfg.get("model_type") != "llama" or (archs and "LlamaForCausalLM" not in archs):
        raise UserError(
            f"{source}/config.json: model_type={cfg.get('model_type')!r}, architectures={archs}",
            field="model.family",
            allowed="llama (LlamaForCausalLM)",
        )
    c = LlamaConfig.from_hf_dict(cfg, source=f"{source}/config.json")
    return Architecture(**architecture_numbers(c), tie_word_embeddings=c.tie_word_embeddings)


def architecture_numbers(c: LlamaConfig) -> dict[str, Any]:
    """The Architecture fields of a parsed LlamaConfig but tie_word_embeddings (a target's head; an EAGLE-3 draft
    has its own lm_head and leaves it unset)."""
    return dict(
        num_layers=c.num_hidden_layers,
        hidden_size=c.hidden_size,
        num_attention_heads=c.num_attention_heads,
        num_kv_heads=c.num_key_value_heads,
        intermediate_size=c.intermediate_size,
        vocab_size=c.vocab_size,
        rope_theta=c.rope_theta,
        max_position_embeddings=c.max_position_embeddings,
        head_dim=c.head_dim,
    )


def tree_choices_spec(recipe: Recipe) -> list[list[int]] | str | None:
    """The recipe's static tree as written (inline, a preset name or a file), or None (no static tree)."""
    spec = recipe.speculative
    return registry.of(spec).tree(spec)


def tree_field(recipe: Recipe) -> tuple[str, ...]:
    """The recipe field holding the static tree's choices (the section itself when there is none)."""
    spec = recipe.speculative
    return ("speculative", *(registry.of(spec).tree_path(spec) or ()))


def draft_facts(recipe: Recipe, tree_dir: Path) -> Facts:
    """The facts of the recipe's drafter (its method's, the static tree read relative to `tree_dir`)."""
    spec = recipe.speculative
    m = registry.of(spec)
    return m.facts(m.resolved(spec, tree_dir))


def tree_size(recipe: Recipe, tree_dir: Path) -> int:
    """Draft nodes per step (root excluded) for the recipe's method."""
    return draft_facts(recipe, tree_dir).nodes


def draft_levels(recipe: Recipe, tree_dir: Path) -> int:
    """Tree levels drafted per step: the deepest choice (static trees), `depth` (EAGLE-2), N-1 (Lookahead),
    max_draft (n-gram)."""
    return draft_facts(recipe, tree_dir).levels


def max_draft_len(recipe: Recipe, tree_dir: Path) -> int:
    """The configured value when given (checked elsewhere), else derived from the method."""
    given = recipe.build.max_draft_len
    return given if given is not None else tree_size(recipe, tree_dir)


def resolve_architecture(recipe: Recipe, checkpoint_dir: Path) -> Architecture:
    """The checkpoint's config.json when local, else the recipe's `model.architecture`."""
    ref = parse_checkpoint(recipe.model.checkpoint, checkpoint_dir)
    if ref.local is not None and ref.local.is_dir():
        return architecture_from_hf(read_config(ref.local), ref.local)
    if recipe.model.architecture is not None:
        return recipe.model.architecture
    where = "is not available here" if ref.local is not None else "is on the hub (not read by plan)"
    raise UserError(
        f"the checkpoint {where}; write the architecture numbers into the recipe", field="model.architecture"
    )
