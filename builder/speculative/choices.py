"""Medusa-style tree choices: loading (inline | preset | file) and validation. Pure Python, no torch.

A choice is a tuple of top-k ranks, one per depth: (0, 1) is "the 2nd candidate of head 1 under the
1st candidate of head 0". The root (the last emitted token) is implicit.
"""

from __future__ import annotations

import json
from pathlib import Path

from builder.errors import UserError

TREES_DIR = Path(__file__).resolve().parent / "trees"  # presets ship inside the package

Choice = tuple[int, ...]


def preset_names() -> list[str]:
    return sorted(p.stem for p in TREES_DIR.glob("*.json"))


def load_choices(spec: list[list[int]] | str, base_dir: Path | None = None) -> list[Choice]:
    """Inline list, preset name (builder/speculative/trees/<name>.json) or a .json path relative to base_dir."""
    if not isinstance(spec, str):
        return [tuple(c) for c in spec]
    if spec.endswith(".json"):
        path = Path(spec) if Path(spec).is_absolute() else (base_dir or Path.cwd()) / spec
    else:
        path = TREES_DIR / f"{spec}.json"
        if not path.is_file():
            raise UserError(f"unknown tree preset {spec!r}", allowed=", ".join(preset_names()) or "none shipped")
    if not path.is_file():
        raise UserError(f"tree file not found: {path}")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON: {exc}") from None
    choices = data.get("choices") if isinstance(data, dict) else data
    ok = isinstance(choices, list) and all(
        isinstance(c, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in c) for c in choices
    )
    if not ok:
        raise UserError(f'{path}: expected {{"choices": [[int, ...], ...]}}')
    return [tuple(c) for c in choices]


def check_choices(choices: list[Choice], num_heads: int | None) -> list[str]:
    """Problems with a choices list (empty list = valid). num_heads=None skips the head bounds."""
    problems: list[str] = []
    seen: set[Choice] = set()
    for c in choices:
        if len(c) == 0:
            problems.append("empty choice [] (the root is implicit)")
            continue
        if any(i < 0 for i in c):
            problems.append(f"choice {list(c)} has a negative top-k rank")
        if num_heads is not None and len(c) > num_heads:
            problems.append(f"choice {list(c)} has depth {len(c)} > num_heads {num_heads}")
        if c in seen:
            problems.append(f"duplicate choice {list(c)}")
        seen.add(c)
    for c in choices:
        if len(c) > 1 and c[:-1] not in seen:
            problems.append(f"choice {list(c)} lacks its prefix {list(c[:-1])}")
    return problems
