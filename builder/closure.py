"""The import closure of project modules, read from their source (`ast`), never by importing them.

Two users ask the same question, "which of our modules can this code reach?":

* the Triton repository's runtime (`triton_repo.runtime`): what its models may import when serving is copied into
  the repository, so a served repository imports nothing from the build environment;
* the stage cache keys (`builder.stages.keys`): a stage's code digest covers every module its `run` may import,
  so a changed exporter never reuses a stale graph and no hand-kept list of source paths can go stale.

The answer follows every `import` and `from … import` a module may run — at module level or inside a function (a
stage's `run` imports its heavy modules lazily), relative imports resolved — skips `if TYPE_CHECKING:` blocks (never
run), and counts the packages on the way (importing a.b.c runs a/__init__.py and a/b/__init__.py). `from pkg import
name` reaches the submodule pkg.name when there is one. Only modules of `packages` (ours) are followed; an import
that no file under `root` answers (a third-party package, a name inside a module) ends there.

Standard library only: `triton_repo.runtime` is imported where the serve extra is absent, and the repository's
runtime copy carries this module.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Callable, Collection, Iterable

Imports = list[tuple[str, "str | None", int]]  # (imported name, enclosing function or None, line)


def module_file(module: str, root: Path) -> Path:
    """The source file of `module` under `root` (a package's __init__.py)."""
    base = root.joinpath(*module.split("."))
    return base / "__init__.py" if (base / "__init__.py").is_file() else base.with_suffix(".py")


def module_index(root: Path, packages: Iterable[str]) -> set[str]:
    """Every module name of `packages` under `root` (packages by their __init__.py)."""
    out: set[str] = set()
    for pkg in packages:
        for path in (root / pkg).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out.add(".".join(parts))
    return out


def module_of(name: str, known: Collection[str]) -> str | None:
    """The longest prefix of `name` that is a module in `known` (`from pkg import sub` names a submodule)."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def imports(module: str, root: Path) -> Imports:
    """(imported name, enclosing function or None, line) of every import `module` may run; `if TYPE_CHECKING:`
    blocks are skipped. Names of `from X import a` are given as X and X.a (a may be a submodule)."""
    path = module_file(module, root)
    return imports_in(ast.parse(path.read_text(encoding="utf-8")), module, path.name == "__init__.py")


def imports_in(tree: ast.AST, module: str, is_package: bool) -> Imports:
    """`imports` of an already parsed module."""
    package = module if is_package else module.rpartition(".")[0]
    out: Imports = []

    def visit(node: ast.AST, func: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for sub in child.orelse:
                    visit(sub, func)
                continue
            if isinstance(child, ast.Import):
                out.extend((a.name, func, child.lineno) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                out.append((base, func, child.lineno))
                out.extend((f"{base}.{a.name}", func, child.lineno) for a in child.names)
            visit(child, child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else func)

    visit(tree, None)
    return out


def import_closure(
    entries: Iterable[str],
    root: Path,
    packages: Iterable[str],
    skip: Collection[tuple[str, str]] = (),
    imports_of: Callable[[str, Path], Imports] = imports,
    known: Collection[str] | None = None,
) -> dict[str, str | None]:
    """Every module of `packages` under `root` that importing `entries` may run, each with the module that first
    reached it (None: an entry, or a package of one); an edge (importer, imported) in `skip` is not followed.
    `imports_of(module, root)`: the import lister (`imports`, or a caching one); `known`: `module_index(root,
    packages)` when the caller has it."""
    packages = tuple(packages)
    known = module_index(root, packages) if known is None else known
    found: dict[str, str | None] = {}
    todo: list[tuple[str, str | None]] = [(m, None) for m in entries]
    while todo:
        module, via = todo.pop(0)
        if module in found:
            continue
        found[module] = via
        parts = module.split(".")
        todo += [(".".join(parts[:i]), module) for i in range(1, len(parts))]
        for name, _func, _line in imports_of(module, root):
            target = module_of(name, known) if name.partition(".")[0] in packages else None
            if target is not None and target != module and (module, target) not in skip:
                todo.append((target, module))
    return found
