"""Cross-field rules for the speculative section: trees, draft lengths, batch limits."""

from __future__ import annotations

from typing import TYPE_CHECKING

from builder.errors import UserError
from builder.recipe.resolve import tree_choices_spec, tree_field, tree_size
from builder.speculative.choices import check_choices, load_choices
from builder.speculative.lookahead.config import lookahead_draft_len

if TYPE_CHECKING:
    from builder.recipe.checks import Checker

BATCH_WARN = 64


def check_speculative(c: "Checker") -> None:
    spec, build = c.recipe.speculative, c.recipe.build
    if spec.method == "none":
        if build.max_draft_len:
            c.add(("build", "max_draft_len"), f"max_draft_len={build.max_draft_len} without speculation", allowed="0")
        return
    if spec.method == "eagle":
        _eagle_version(c)
    field = tree_field(c.recipe)
    choices_spec = tree_choices_spec(c.recipe)
    if choices_spec is not None:
        try:
            choices = load_choices(choices_spec, c.loaded.dir_of(field))
        except UserError as exc:
            c.add(field, exc.message, exc.allowed)
            return
        heads = spec.num_heads if spec.method == "medusa" else None
        for problem in check_choices(choices, heads):
            c.add(field, problem)
        if not choices:
            c.add(field, "the tree has no draft nodes")
    size = tree_size(c.recipe, c.loaded.dir_of(field))
    _draft_len(c, size)
    if build.max_batch_size > BATCH_WARN:
        c.add(("build", "max_batch_size"), f"speculation with max_batch_size={build.max_batch_size} > {BATCH_WARN}: "
              "large batches are compute-bound and speculation usually slows them down", warn=True)
    need = build.max_batch_size * ((build.max_draft_len or size) + 1)
    if build.max_num_tokens < need:
        c.add(("build", "max_num_tokens"), f"max_num_tokens={build.max_num_tokens} < max_batch_size × "
              f"(max_draft_len + 1) = {need}: a full generation step would not fit", allowed=f">= {need}")


def _eagle_version(c: "Checker") -> None:
    spec = c.recipe.speculative
    want = "static" if spec.version == 1 else "dynamic"
    if spec.tree.type != want:
        c.add(("speculative", "tree", "type"), f"EAGLE-{spec.version} uses a {want} tree", allowed=want)
    if spec.tree.type == "dynamic":
        t = spec.tree
        most = t.top_k + (t.depth - 1) * t.top_k * t.top_k
        if t.total_nodes > most:
            c.add(("speculative", "tree", "total_nodes"), f"total_nodes={t.total_nodes} exceeds the "
                  f"{most} candidates depth={t.depth}, top_k={t.top_k} can produce", allowed=f"1..{most}")


def _draft_len(c: "Checker", size: int) -> None:
    spec, given = c.recipe.speculative, c.recipe.build.max_draft_len
    if given is None:
        return
    if spec.method == "lookahead":
        want = lookahead_draft_len(spec.window, spec.ngram, spec.verification_set)
        if given != want:
            c.add(("build", "max_draft_len"), f"max_draft_len={given} but lookahead W={spec.window}, "
                  f"N={spec.ngram}, G={spec.verification_set} drafts (N-2) + (W-1+G)(N-1) = {want}", allowed=str(want))
    elif given < size:
        c.add(("build", "max_draft_len"), f"max_draft_len={given} is smaller than the tree ({size} draft nodes)",
              allowed=f">= {size}")
