"""`manifest.json`: what a stage output is, how it was made, and what it holds."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from builder.files import sha256_file  # noqa: F401  (re-exported)
from builder.versions import tool_versions  # noqa: F401  (re-exported: stages record tool versions)

MANIFEST = "manifest.json"
FORMAT = 1


@dataclass
class Manifest:
    stage: str
    key: str
    upstream: str | None
    inputs: dict[str, Any]
    versions: dict[str, str]
    wall_s: float = 0.0
    peak_rss_bytes: int = 0
    outputs: list[dict[str, Any]] = field(default_factory=list)  # {path, bytes, sha256}
    info: dict[str, Any] = field(default_factory=dict)  # stage-specific facts (variant, shapes, …)
    created: str = ""
    format: int = FORMAT

    def write(self, folder: Path) -> None:
        """Hash every file in `folder` (the manifest excepted) into `outputs`, then write the manifest."""
        self.outputs = [
            {"path": str(p.relative_to(folder)), "bytes": p.stat().st_size, "sha256": sha256_file(p)}
            for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != MANIFEST
        ]
        self.created = datetime.now(timezone.utc).isoformat(timespec="seconds")
        (folder / MANIFEST).write_text(json.dumps(asdict(self), indent=2, default=str) + "\n", encoding="utf-8")

    @classmethod
    def read(cls, folder: Path) -> "Manifest | None":
        """The manifest of a stage output, or None when missing or unreadable."""
        try:
            data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
            return cls(**data)
        except (OSError, ValueError, TypeError):
            return None

    def problems(self, folder: Path, hashes: bool = False) -> list[str]:
        """Files missing or changed since the manifest was written (sizes; sha256 when `hashes`)."""
        out = []
        for f in self.outputs:
            p = folder / f["path"]
            if not p.is_file() or p.stat().st_size != f["bytes"]:
                out.append(f"{f['path']}: missing or resized")
            elif hashes and sha256_file(p) != f["sha256"]:
                out.append(f"{f['path']}: content changed")
        return out

    @property
    def total_bytes(self) -> int:
        return sum(f["bytes"] for f in self.outputs)
