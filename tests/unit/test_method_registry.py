"""The method registry (`builder.speculative.registry`): one `Method` per builder/speculative/<method>/, asked by every
other layer instead of comparing method names; installed methods through the entry-point group `trtspec.methods`.

Oracles: the AST of the product tree (no method-name comparisons outside the method folders), the recipes' own
sections (a drafter stored in engine.json is the section, re-validated to the same object), the facts computed
independently from a resolved tree (brute force over its choices), and importlib.metadata's own discovery over
distributions written here (broken ones refused naming the distribution).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from builder.errors import UserError
from builder.recipe.loader import load_recipe
from builder.speculative import registry
from builder.speculative.method import EngineFlow, Method, dotted_modules, resolve
from builder.stages.parts import Parts

REPO = Path(__file__).resolve().parents[2]
NAMES = {"medusa", "eagle", "eagle3", "lookahead", "ngram"}
PRODUCT = ("builder", "plugins", "triton_repo")
ALLOWED_SITES = 5  # issue 37: at most five method-name comparisons outside the method folders, each explained


def _literal(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in NAMES
    if isinstance(node, (ast.Tuple, ast.Set, ast.List)):
        return any(isinstance(e, ast.Constant) and e.value in NAMES for e in node.elts)
    return False


def method_name_comparisons(root: Path = REPO) -> list[tuple[str, int, str]]:
    """(file, line, source line) of every comparison against a method-name literal outside the method folders."""
    method_dirs = {f"builder/speculative/{m.name}/" for m in registry.BUILTIN}
    found = []
    for pkg in PRODUCT:
        for path in sorted((root / pkg).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel.startswith(tuple(method_dirs)) or rel == "builder/speculative/registry.py":
                continue
            lines = path.read_text(encoding="utf-8").splitlines()
            for node in ast.walk(ast.parse("\n".join(lines))):
                if isinstance(node, ast.Compare) and any(_literal(n) for n in (node.left, *node.comparators)):
                    found.append((rel, node.lineno, lines[node.lineno - 1]))
    return found


def test_method_name_comparisons_are_few_and_each_explained():
    sites = method_name_comparisons()
    assert len(sites) <= ALLOWED_SITES, "\n".join(f"{f}:{n}: {s.strip()}" for f, n, s in sites)
    for f, n, line in sites:
        above = (REPO / f).read_text(encoding="utf-8").splitlines()[n - 2].strip()
        assert "#" in line or above.startswith("#"), f"{f}:{n}: say in a comment why this compares a method name"


def test_the_counter_sees_a_comparison(tmp_path):
    """The counter itself can fail: a planted comparison in a copy of one module is found."""
    for pkg in PRODUCT:
        (tmp_path / pkg).mkdir()
    (tmp_path / "builder" / "x.py").write_text('def f(spec):\n    return spec.method in ("none", "eagle")\n')
    (tmp_path / "builder" / "speculative" / "eagle").mkdir(parents=True)
    (tmp_path / "builder" / "speculative" / "eagle" / "y.py").write_text('ok = "eagle" == "eagle"\n')
    assert [(f, n) for f, n, _ in method_name_comparisons(tmp_path)] == [("builder/x.py", 2)]


@pytest.mark.parametrize("method", registry.BUILTIN, ids=lambda m: m.name)
def test_every_builtin_method_is_one_consistent_unit(method: Method):
    assert registry.get(method.name).config is method.config
    literal = typing.get_args(method.config.model_fields["method"].annotation)
    assert literal == (method.name,)
    for module in dotted_modules(method):  # every dotted path names code that exists
        assert resolve(module) is not None
    for dotted in (method.export_draft, method.torch_net, method.tune, method.memory):
        if dotted:
            resolve(dotted)
    if isinstance(method.trtllm.engine, EngineFlow) and method.trtllm.engine.checkpoint:
        resolve(method.trtllm.engine.checkpoint)
    if method.draft is not None:
        assert callable(resolve(method.draft.loader)) and callable(resolve(method.draft.checker))
    if method.zero_weight:  # `--method NAME` on another recipe's engine runs its defaults
        default = method.default()
        assert registry.drafter_config(default.model_dump()) == default
    assert method.zero_weight == (method.draft is None and method.exports == "nothing")


def test_zero_weight_methods_and_the_room_every_engine_has():
    assert registry.zero_weight()[:3] == ("none", "lookahead", "ngram")
    # Lookahead W = N = G = 4: (N-2) + (W-1+G)(N-1) = 2 + 7*3 = 23 draft nodes; n-gram's default 23 × 1 candidate
    assert registry.default_room() == 24


RECIPES = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "recipes").glob("*.yaml"))


@pytest.mark.parametrize("recipe", RECIPES)
def test_engine_json_drafter_round_trips_to_the_recipes_section(recipe: str):
    """What a build stores (`Parts.drafter_config`, dumped as JSON) re-validates to the same config, whose facts
    agree with a brute-force count over the resolved tree."""
    loaded = load_recipe(str(REPO / recipe))
    parts = Parts(loaded, loaded.recipe.speculative.method)
    config = parts.drafter_config()
    stored = json.loads(json.dumps(config.model_dump(mode="json")))
    again = registry.drafter_config(stored)
    assert again == config and registry.facts(again) == registry.facts(config)
    m = registry.of(config)
    tree = m.tree(config)
    if tree is not None:  # a static tree, inline now: nodes = choices, levels = the deepest, top-k = 1 + max rank
        f = m.facts(config)
        assert isinstance(tree, list) and f.nodes == len(tree) and f.levels == max(len(c) for c in tree)
        assert f.top_k == 1 + max(c[-1] for c in tree)
    with pytest.raises(ValueError):
        registry.drafter_config({**stored, "surprise": 1})  # a section: unknown keys are errors


def test_an_unknown_stored_method_is_refused_naming_the_known_ones():
    with pytest.raises(UserError) as exc:
        registry.drafter_config({"method": "medusa2"})
    assert "medusa2" in str(exc.value) and exc.value.allowed == ", ".join(registry.names())


# -- installed methods -------------------------------------------------------------------------------------------


def _distribution(site: Path, dist: str, entry: str, module: str, source: str) -> None:
    pkg = site / module.partition(".")[0]
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (site / f"{module.replace('.', '/')}.py").write_text(source)
    info = site / f"{dist}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{registry.GROUP}]\n{entry} = {module}:METHOD\n")


def _discover(site: Path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(site))
    registry.reset()


@pytest.fixture(autouse=True)
def _fresh_registry():
    yield
    registry.reset()


def test_the_toy_method_is_discovered_after_the_builtin_ones(monkeypatch):
    _discover(REPO / "tests" / "fixtures" / "methods" / "site", monkeypatch)
    assert registry.names() == ("none", "medusa", "eagle", "eagle3", "lookahead", "ngram", "repeat")
    (third,) = registry.third_party()
    assert (third.distribution, third.version, third.package) == ("trtspec-repeat", "0.1.0", "trtspec_repeat")
    assert "repeat" in registry.zero_weight()
    assert registry.default_room() == 24  # an installed method never changes what every engine holds


BROKEN = {
    "fails to import": ("boom", "raise RuntimeError('no GPU here')\n", "fails to import: RuntimeError: no GPU here"),
    "not a Method": ("thing", "METHOD = 42\n", "is a int, not a builder.speculative.method.Method"),
    "name mismatch": (
        "other",
        "from builder.speculative.registry import BUILTIN\nMETHOD = BUILTIN[0]\n",
        "must be one name",
    ),
    "name taken": ("medusa", "from builder.speculative.registry import BUILTIN\nMETHOD = BUILTIN[1]\n", "two "),
}


@pytest.mark.parametrize("case", BROKEN)
def test_a_broken_installed_method_is_refused_naming_its_distribution(case, tmp_path, monkeypatch):
    entry, source, message = BROKEN[case]
    package = f"broken_{list(BROKEN).index(case)}"  # a module of its own per case (sys.modules keeps imports)
    _distribution(tmp_path, "broken-dist", entry, f"{package}.method", source)
    _discover(tmp_path, monkeypatch)
    with pytest.raises(registry.MethodError) as exc:
        registry.methods()
    assert message in str(exc.value) and "broken-dist" in str(exc.value)


def test_the_cli_refuses_a_broken_method_with_exit_2_and_no_traceback(tmp_path):
    entry, source, _ = BROKEN["fails to import"]
    _distribution(tmp_path, "broken-dist", entry, "broken_pkg.method", source)
    res = subprocess.run(
        [sys.executable, "-m", "builder.cli", "validate", str(REPO / "recipes" / "tiny-llama3.yaml")],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2, res.stdout + res.stderr
    assert "broken-dist" in res.stderr and "Traceback" not in res.stderr
