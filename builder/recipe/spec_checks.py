"""Cross-field rules for the speculative section: trees, draft lengths, batch limits."""

from __future__ import annotations

from builder.errors import UserError
from builder.recipe.findings import Findings
from builder.recipe.resolve import tree_choices_spec, tree_field, tree_size
from builder.recipe.yaml_safe import clip
from builder.speculative.choices import Choice, check_choices, load_choices
from builder.speculative.lookahead.config import lookahead_draft_len

BATCH_WARN = 64
MAX_TREE_NODES = 1024  # draft nodes in a static tree (inline, preset or file)
MAX_TREE_DEPTH = 64
MAX_RANK = 1023  # top-k rank of a node's token among its parent's candidates


def check_speculative(c: Findings) -> None:
    spec, build = c.recipe.speculative, c.recipe.build
    if spec.method == "none":
        if build.max_draft_len:
            c.add(("build", "max_draft_len"), f"max_draft_len={build.max_draft_len} without speculation", allowed="0")
        return
    if spec.method == "eagle":
        _eagle_version(c)
    if getattr(spec, "draft_weights", None) is not None and c.recipe.target.device != "cpu":
        c.add(
            ("speculative", "draft_weights"),
            f"draft_weights={spec.draft_weights} is for cpu targets' ONNX Runtime "
            f"engines; on {c.recipe.target.device} the draft's precision follows quantization",
            allowed="null",
        )
    if spec.method == "ngram" and spec.min_match > spec.max_match:
        c.add(
            ("speculative", "min_match"),
            f"min_match={spec.min_match} exceeds max_match={spec.max_match}",
            allowed=f"1..{spec.max_match}",
        )
    field = tree_field(c.recipe)
    choices_spec = tree_choices_spec(c.recipe)
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
        heads = spec.num_heads if spec.method == "medusa" else None
        if not _tree_bounds(c, field, choices):
            return
        for problem in check_choices(choices, heads):
            c.add(field, problem)
        if not choices:
            c.add(field, "the tree has no draft nodes")
        elif spec.method == "eagle":
            _draft_vocab(c, 1 + max(ch[-1] for ch in choices))
    elif spec.method == "eagle" and spec.tree.type == "dynamic":
        _draft_vocab(c, spec.tree.top_k)
    size = tree_size(c.recipe, c.loaded.dir_of(field))
    _draft_len(c, size)
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


def _eagle_version(c: Findings) -> None:
    spec = c.recipe.speculative
    want = "static" if spec.version == 1 else "dynamic"
    if spec.tree.type != want:
        c.add(("speculative", "tree", "type"), f"EAGLE-{spec.version} uses a {want} tree", allowed=want)
    if spec.tree.type == "dynamic":
        t = spec.tree
        most = t.top_k + (t.depth - 1) * t.top_k * t.top_k
        if t.total_nodes > most:
            c.add(
                ("speculative", "tree", "total_nodes"),
                f"total_nodes={t.total_nodes} exceeds the "
                f"{most} candidates depth={t.depth}, top_k={t.top_k} can produce",
                allowed=f"1..{most}",
            )


def _draft_vocab(c: Findings, top_k: int) -> None:
    """EAGLE's draft vocabulary: no larger than the target's, no smaller than the top-k a tree level takes."""
    spec, arch = c.recipe.speculative, c.recipe.model.architecture
    if spec.draft_vocab is None:
        return
    vocab = None if arch is None else arch.vocab_size
    if vocab is not None and spec.draft_vocab > vocab:
        c.add(
            ("speculative", "draft_vocab"),
            f"draft_vocab={spec.draft_vocab} exceeds the target's vocab_size={vocab}",
            allowed=f"{top_k}..{vocab}, or null (the whole vocabulary)",
        )
    elif spec.draft_vocab < top_k:
        c.add(
            ("speculative", "draft_vocab"),
            f"draft_vocab={spec.draft_vocab} is smaller than the {top_k} candidates "
            "a tree level takes (the tree's top-k)",
            allowed=f">= {top_k}, or null (the whole vocabulary)",
        )


def _draft_len(c: Findings, size: int) -> None:
    spec, given = c.recipe.speculative, c.recipe.build.max_draft_len
    if given is None:
        return
    if spec.method == "lookahead":
        want = lookahead_draft_len(spec.window, spec.ngram, spec.verification_set)
        if given != want:
            c.add(
                ("build", "max_draft_len"),
                f"max_draft_len={given} but lookahead W={spec.window}, "
                f"N={spec.ngram}, G={spec.verification_set} drafts (N-2) + (W-1+G)(N-1) = {want}",
                allowed=str(want),
            )
    elif given < size:
        c.add(
            ("build", "max_draft_len"),
            f"max_draft_len={given} is smaller than the tree ({size} draft nodes)",
            allowed=f">= {size}",
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
