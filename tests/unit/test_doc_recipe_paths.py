"""Every recipe path the docs show (README.md, docs/*.md and every `--help`) exists and validates; every local
link between those files resolves, anchors included.

Paths are `recipes/…yaml`; globs (`recipes/tiny-llama3*.yaml`) and braces (`{none,eagle}`) are
expanded and must match at least one file. Directories the docs mention (`recipes/checkpoints/…`,
`builder/speculative/trees/`) and other files (`recipes/schema.json`) are not recipes and are not collected;
CI matrix files (`recipes/ci/*.yaml`) are validated as matrices (`builder.ci.matrix.load_matrix`).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.cli import COMMANDS, cli

REPO = Path(__file__).resolve().parents[2]
RECIPE_PATH = re.compile(r"recipes/[A-Za-z0-9_.*?{},/-]*?\.yaml\b")


def _markdown() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _help_texts() -> dict[str, str]:
    runner = CliRunner()
    texts = {"trtspec --help": runner.invoke(cli, ["--help"]).output}
    for name in COMMANDS:
        texts[f"trtspec {name} --help"] = runner.invoke(cli, [name, "--help"]).output
    return texts


def _braces(pattern: str) -> list[str]:
    """`a{x,y}b` → [`axb`, `ayb`] (nested braces are not used in the docs)."""
    m = re.search(r"\{([^{}]*)\}", pattern)
    if m is None:
        return [pattern]
    return [p for alt in m.group(1).split(",") for p in _braces(pattern[: m.start()] + alt + pattern[m.end() :])]


def _mentions() -> dict[str, str]:
    """Each recipe path or pattern mentioned → every place it is seen (comma-separated)."""
    sources = {**{str(p.relative_to(REPO)): p.read_text() for p in _markdown()}, **_help_texts()}
    found: dict[str, list[str]] = {}
    for where, text in sources.items():
        for path in RECIPE_PATH.findall(text.replace("\n", " ")):
            found.setdefault(path, [])
            if where not in found[path]:
                found[path].append(where)
    return {path: ", ".join(places) for path, places in found.items()}


MENTIONS = _mentions()


def _expand(pattern: str) -> list[str]:
    out: list[str] = []
    for p in _braces(pattern):
        out += sorted(str(m.relative_to(REPO)) for m in REPO.glob(p)) if any(c in p for c in "*?") else [p]
    return out


def test_the_docs_mention_recipes():
    assert len(MENTIONS) >= 5, MENTIONS  # the scan is not vacuous
    assert any("trtspec" in where for where in MENTIONS.values()), "no recipe path in any --help"


@pytest.mark.parametrize("pattern", sorted(MENTIONS), ids=str)
def test_documented_recipe_paths_validate(pattern, monkeypatch):
    monkeypatch.chdir(REPO)
    paths = _expand(pattern)
    assert paths, f"{pattern} (in {MENTIONS[pattern]}) matches no recipe"
    for path in paths:
        assert (REPO / path).is_file(), f"{path} (in {MENTIONS[pattern]}) does not exist"
        if path.startswith("recipes/ci/"):
            from builder.ci.matrix import load_matrix

            load_matrix(REPO / path)  # a UserError names what is wrong
            continue
        result = CliRunner().invoke(cli, ["validate", path])
        assert result.exit_code == 0, f"{path} (in {MENTIONS[pattern]}): {result.output}"


LINK = re.compile(r"\]\(([^)\s]+)\)")  # a Markdown link's target


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, anything but letters, digits, spaces, '-' and '_' dropped, spaces
    to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@functools.cache
def _anchors(path: Path) -> set[str]:
    return {_anchor(line.lstrip("#")) for line in path.read_text().split("\n") if re.match(r"#{1,6} ", line)}


def test_anchor_rule_on_headings_of_these_docs():
    assert _anchor(" TensorRT-LLM backend (`target.backend: trtllm`)") == "tensorrt-llm-backend-targetbackend-trtllm"
    assert _anchor(" A Zen 4 machine (AMD EPYC, 2026-12-03)") == "a-zen-4-machine-amd-epyc-2026-12-03"


@pytest.mark.parametrize("doc", _markdown(), ids=lambda p: str(p.relative_to(REPO)))
def test_local_links_resolve(doc):
    links = [t for t in LINK.findall(doc.read_text()) if not re.match(r"[a-z]+:", t)]
    assert doc.name != "README.md" or len(links) >= 5, links  # the scan is not vacuous
    for target in links:
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        assert path.exists(), f"{doc.name}: link {target!r}: {path} does not exist"
        if anchor and path.suffix == ".md":
            assert anchor in _anchors(path), f"{doc.name}: link {target!r}: no heading with that anchor in {path.name}"
