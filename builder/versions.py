"""Installed tool versions: what a stage's cache key and manifest record (no imports of the tools themselves)."""

from __future__ import annotations

import platform


def tool_versions(*names: str) -> dict[str, str]:
    """Installed versions of the given distributions (absent ones are left out), plus Python and trtspec."""
    from importlib import metadata

    out = {"python": platform.python_version()}
    for name in ("trtspec", *names):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out
