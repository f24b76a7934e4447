"""The recipe overlay `trtspec tune --write FILE` writes: `extends:` the tuned recipe plus the picked fields.

    medusa      speculative.tree: [[0], [0, 0], …]                   (inline choices)
    EAGLE-1     speculative.tree: {type: static, choices: [[0], …]}
    EAGLE-2     speculative.tree: {type: dynamic, depth, top_k, total_nodes}
    lookahead   speculative: {window, ngram, verification_set}
    ngram       speculative: {max_draft, max_match, min_match, candidates, adaptive, shared_pool}
                (each method's `speculative` fields: its tuner's `overlay`, `builder.tune.tuners`)
    pinned      triton.draft_schedule: [[max_batch, max_nodes], …]   (`trtspec tune --pin-schedule` only: by default
                the engine's measured draft budget rule picks each step's budget, `builder.speculative.budget`;
                never on target.backend trtllm, whose C++ runtime decides the draft per step)
                build.max_draft_len when the tuned recipe sets it (it must match the new draft)

The file is validated as any recipe (`checked`: the schema and `trtspec validate`'s cross-field checks)
before it replaces `path` (written to a temporary file beside it, renamed on success: nothing half-written).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from builder.recipe.checks import check_recipe
from builder.recipe.loader import LoadedRecipe, RecipeErrors, load_recipe
from builder.stages.registry import backend_of
from builder.tune.tuners import tuner_of


def overlay_fields(
    loaded: LoadedRecipe, setting: dict[str, Any], schedule: list[list[int]] | None, draft_len: int
) -> dict[str, Any]:
    """The fields the overlay sets (see the module docstring); `schedule`: the draft schedule to pin (None: none);
    `draft_len` = draft nodes (root excluded)."""
    spec = loaded.recipe.speculative
    tuner = tuner_of(spec)
    if tuner is None:
        raise ValueError(f"nothing to tune for method {spec.method!r}")
    fields: dict[str, Any] = {"speculative": tuner.overlay(setting)}
    if schedule is not None and backend_of(loaded.recipe).served_elsewhere is None:  # (TensorRT-LLM's runtime
        # decides its drafts per step)
        fields["triton"] = {"draft_schedule": schedule}
    if loaded.recipe.build.max_draft_len is not None:
        fields["build"] = {"max_draft_len": draft_len}
    return fields


def render(loaded: LoadedRecipe, fields: dict[str, Any], path: Path, header: str) -> str:
    """YAML text of the overlay at `path`: a comment header, `extends:` (relative to path's folder), fields."""
    base = os.path.relpath(Path(loaded.path).resolve(), Path(path).resolve().parent)
    comment = "".join(f"# {line}\n" for line in header.splitlines())
    data = {"extends": Path(base).as_posix(), **fields}
    body = yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=110)
    return comment + body


def write_overlay(loaded: LoadedRecipe, fields: dict[str, Any], path: str | Path, header: str) -> LoadedRecipe:
    """Write the overlay atomically after it validates; returns it loaded."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".yaml", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(render(loaded, fields, path, header))
        checked(tmp)  # raises RecipeErrors naming every problem
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as an ordinary new file (mkstemp makes it private)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return checked(path)


def checked(path: str | Path) -> LoadedRecipe:
    """Load a recipe and run the cross-field checks (`trtspec validate`'s): errors raise, warnings pass."""
    loaded = load_recipe(path)
    errors = [f for f in check_recipe(loaded) if f.severity == "error"]
    if errors:
        raise RecipeErrors([f.as_error(loaded) for f in errors])
    return loaded
