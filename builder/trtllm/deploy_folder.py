"""What `trtspec deploy` writes around the bundle for both TensorRT-LLM flows (the engine flow in
`builder.commands.deploy_cmds`, the PyTorch flow in `builder.trtllm.llmapi.deploy`): served folders linked from the
cache, `deploy.json` (what the bundle is) and `README.md` (the same steps for a person), in one layout:

    # <title>

    Written by `trtspec deploy <recipe>`. Container: <container>.

    - <one line per folder>

    Steps:
    1. `<step>`

The folder itself is written in a temporary folder beside <out> and renamed into place when complete
(`builder.files.staged_dir`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from builder.files import link_or_copy

DEPLOY_INFO = "deploy.json"


def link_tree(src: Path, dst: Path) -> None:
    """Every file under `src` at the same place under `dst` (hard links where the filesystem allows)."""
    for f in sorted(p for p in src.rglob("*") if p.is_file()):
        link_or_copy(f, dst / f.relative_to(src))


def readme(title: str, recipe: Path | str, container: str, items: list[str], steps: list[str]) -> str:
    """README.md (module docstring); `container` as written after "Container: "."""
    lines = [
        f"# {title}",
        "",
        f"Written by `trtspec deploy {recipe}`. Container: {container}.",
        "",
        *items,
        "",
        "Steps:",
        *[f"1. `{s}`" for s in steps],
        "",
    ]
    return "\n".join(lines)


def write_description(folder: Path, info: dict[str, Any], text: str) -> None:
    """deploy.json (`info`) and README.md (`text`) into `folder`, then 0755 (staged_dir's mkdtemp made it 0700)."""
    (folder / DEPLOY_INFO).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    (folder / "README.md").write_text(text, encoding="utf-8")
    os.chmod(folder, 0o755)
