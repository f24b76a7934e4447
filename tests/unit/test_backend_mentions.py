"""Where the trtllm backend may be named (issue 37): in its backend module and folders and the recipe schema; any
other product file whose code names it (an identifier, or the value "trtllm") says why in a `# trtllm: …` comment.

Oracle: Python's own tokenizer over the product tree (comments and prose in strings do not count; code does).
"""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HOME = (  # the backend module and its folders, and the recipe schema's trtllm section
    "builder/trtllm/",
    "builder/stages/backends/trtllm/",
    "triton_repo/trtllm/",
    "builder/recipe/schema.py",
    "builder/recipe/trtllm.py",
)
MARKER = "# trtllm: "


def naming_files(root: Path = REPO) -> dict[str, list[int]]:
    """{file: lines whose code names trtllm} outside HOME."""
    found: dict[str, list[int]] = {}
    for pkg in ("builder", "plugins", "triton_repo"):
        for path in sorted((root / pkg).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel.startswith(HOME):
                continue
            for tok in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline):
                named = tok.type == tokenize.NAME and "trtllm" in tok.string.lower()
                value = tok.type == tokenize.STRING and tok.string.strip("'\"rbf").lower() == "trtllm"
                if named or value:
                    found.setdefault(rel, []).append(tok.start[0])
    return found


def reason(path: Path) -> str | None:
    lines = [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines()]
    return next((ln[len(MARKER) :] for ln in lines if ln.startswith(MARKER)), None)


def test_every_file_outside_the_backend_that_names_it_says_why():
    missing = [f"{f}:{lines[0]}" for f, lines in naming_files().items() if not (reason(REPO / f) or "").strip()]
    assert not missing, f"name trtllm only in its backend, or add a '{MARKER}<why>' comment: {missing}"


def test_the_rule_sees_code_and_not_prose(tmp_path):
    (tmp_path / "builder").mkdir()
    (tmp_path / "plugins").mkdir()
    (tmp_path / "triton_repo").mkdir()
    (tmp_path / "builder" / "a.py").write_text(
        '"""prose about trtllm"""\n# trtllm is a word here\nx = "a trtllm recipe"\n'
    )
    (tmp_path / "builder" / "b.py").write_text('def f(r):\n    return r.backend == "trtllm"\n')
    (tmp_path / "builder" / "c.py").write_text("from builder.trtllm import compat\n")
    assert naming_files(tmp_path) == {"builder/b.py": [2], "builder/c.py": [1]}
