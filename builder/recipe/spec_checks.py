"""Cross-field rules for the speculative section: trees, draft lengths, batch limits — the shared ones here, each
method's own through its `Method.check` / `check_draft` hooks (`builder.speculative.method`), reported into the same
findings."""

from __future__ import annotations

from builder.errors import UserError
from builder.recipe.findings import Findings
from builder.recipe.resolve import tree_choices_spec, tree_field
from builder.recipe.yaml_safe import clip
from builder.speculative import registry
from builder.speculative.choices import Choice, check_choices, load_choices
from builder.speculative.method import Checks, set_path

BATCH_WARN = 64
MAX_TREE_NODES = 1024  # draft nodes in a static tree (inline, preset or file)
MAX_TREE_DEPTH = 64
MAX_RANK = 1023  # top-k rank of a node's token among its parent's candidates


def check_speculative(c: Findings) -> None:
    spec, build = c.recipe.speculative, c.recipe.build
    method = registry.of(spec)
    checks = Checks(c.recipe, c.add)
    method.check(spec, checks)  # the method's own rules first
    if not method.drafts:
        return
    if getattr(spec, "draft_weights", None) is not None and c.recipe.target.device != "cpu":
        c.add(
            ("speculative", "draft_weights"),
            f"draft_weights={spec.draft_weights} is for cpu targets' ONNX Runtime "
            f"engines; on {c.recipe.target.device} the draft's precision follows quantization",
            allowed="null",
        )
    field = tree_field(c.recipe)
    choices_spec = tree_choices_spec(c.recipe)
    resolved = spec
    if choices_spec is not None:
        try:
            choices = load_choices(choices_spec, c.loaded.dir_of(field))
        except UserError as exc:
            c.add(field, exc.message, exc.allowed)
            return
        except UnicodeDecodeError:
            c.add(field, f"tree file {clip(str(choices_spec))!r} is not UTF-8 text")
            return
        except RecursionError:
            c.add(field, f"tree file {clip(str(choices_spec))!r} is nested too deeply")
            return
        if not _tree_bounds(c, field, choices):
            return
        resolved = set_path(spec, method.tree_path(spec) or (), [list(ch) for ch in choices])
        facts = method.facts(resolved)
        for problem in check_choices(choices, facts.max_depth):
            c.add(field, problem)
        if not choices:
            c.add(field, "the tree has no draft nodes")
        else:
            method.check_draft(resolved, facts, checks)
    else:
        facts = method.facts(resolved)
        method.check_draft(resolved, facts, checks)
    size = facts.nodes
    given = build.max_draft_len
    if given is not None and not method.exact_draft_len and given < size:  # exact: the method's check_draft
        c.add(
            ("build", "max_draft_len"),
            f"max_draft_len={given} is smaller than the tree ({size} draft nodes)",
            allowed=f">= {size}",
        )
    if build.max_batch_size > BATCH_WARN:
        c.add(
            ("build", "max_batch_size"),
            f"speculation with max_batch_size={build.max_batch_size} > {BATCH_WARN}: "
            "large batches are compute-bound and speculation usually slows them down",
            warn=True,
        )
    need = build.max_batch_size * ((build.max_draft_len or size) + 1)
    if build.max_num_tokens < need:
        c.add(
            ("build", "max_num_tokens"),
            f"max_num_tokens={build.max_num_tokens} < max_batch_size × "
            f"(max_draft_len + 1) = {need}: a full generation step would not fit",
            allowed=f">= {need}",
        )


def _tree_bounds(c: Findings, field: tuple[str, ...], choices: list[Choice]) -> bool:
    """False (with a finding) when a static tree is larger than any engine is built for."""
    if len(choices) > MAX_TREE_NODES:
        c.add(field, f"the tree has {len(choices)} draft nodes", allowed=f"at most {MAX_TREE_NODES}")
        return False
    deep = next((ch for ch in choices if len(ch) > MAX_TREE_DEPTH), None)
    if deep is not None:
        c.add(field, f"a choice has depth {len(deep)}", allowed=f"at most {MAX_TREE_DEPTH}")
        return False
    big = next((ch for ch in choices if any(r > MAX_RANK for r in ch)), None)
    if big is not None:
        c.add(
            field,
            f"choice {clip(repr(list(big)), 60)} has a top-k rank above {MAX_RANK}",
            allowed=f"ranks 0..{MAX_RANK}",
        )
        return False
    return True
