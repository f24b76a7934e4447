"""TensorRT-LLM 1.2's engine flow asks each method, never its name (`builder.trtllm.flow`,
`builder.trtllm.checkpoint.drafts`).

Oracles: upstream's own lists — the decoding modes the Triton C++ backend accepts (`triton_repo.trtllm.upstream`,
model_instance_state.cc) and the methods the engine path serves (none, Medusa, EAGLE, Lookahead; n-gram only in the
PyTorch flow); the fnmatch rule TensorRT-LLM's `quantize_layers` applies to exclude_modules, run over the tensor
names a conversion actually wrote; hand-worked tree tables. A method installed by another package (a toy "repeat the
last token" method registered under the `trtspec.methods` entry-point group in a scratch folder) is refused by the
converter with its own `NotServed` reason, though no file of the backend knows its name.
"""

from __future__ import annotations

import sys
from fnmatch import fnmatch
from pathlib import Path

import pytest

import builder.recipe.schema  # noqa: F401  (the recipe union is built before the toy method is installed)
from builder.errors import UserError
from builder.speculative import registry
from builder.speculative.method import NotServed
from builder.trtllm.checkpoint import CheckpointRequest, convert_checkpoint
from builder.trtllm.checkpoint.drafts import draft_of
from builder.trtllm.checkpoint.eagle import eagle_tree_numbers
from builder.trtllm.checkpoint.eagle import request as eagle_request
from builder.trtllm.flow import engine_flow, served
from tests.unit.trtllm_ckpt_helpers import FIX, converted, raw_rank
from triton_repo.trtllm.upstream import DECODING_MODES

# examples/{medusa,eagle,lookahead}/README.md + plain decoding: what trtllm-build and inflight_batcher_llm serve
UPSTREAM_SERVED = ("none", "medusa", "eagle", "lookahead")


def test_the_engine_flow_serves_upstreams_methods_with_modes_the_backend_accepts():
    assert served() == UPSTREAM_SERVED
    for name in served():
        flow = engine_flow(name)
        assert flow.decoding_mode in DECODING_MODES, name  # else the C++ backend falls back to its default
        m = registry.get(name)
        assert (draft_of(flow) is not None) == (m.draft is not None), name  # a method's weights are converted
        assert (flow.build_mode is None) == (not m.drafts), name
    sources = [draft_of(engine_flow(n)).source for n in served() if draft_of(engine_flow(n)) is not None]
    assert len(set(sources)) == len(sources) and "base" not in sources  # one namespace each, not the target's


def test_an_unserved_method_is_refused_with_upstreams_reason_and_nothing_is_written(tmp_path):
    ngram = registry.get("ngram").trtllm.engine
    assert isinstance(ngram, NotServed)
    with pytest.raises(UserError) as e:
        convert_checkpoint(CheckpointRequest(FIX / "base", 1, 1, "float32", "ngram"), tmp_path / "out")
    assert e.value.field == "speculative.method" and ngram.reason in str(e.value)
    assert e.value.allowed == ", ".join(UPSTREAM_SERVED)
    with pytest.raises(UserError, match="unknown method 'foo'") as e:
        convert_checkpoint(CheckpointRequest(FIX / "base", 1, 1, "float32", "foo"), tmp_path / "out")
    assert e.value.field == "method" and e.value.allowed == ", ".join(UPSTREAM_SERVED)
    assert list(tmp_path.iterdir()) == []


TOY = """
from typing import Literal

from pydantic import Field

from builder.section import Section
from builder.speculative.method import Facts, Method, NotServed, Trtllm


class RepeatConfig(Section):
    method: Literal["repeat"] = Field(description="Draft the last token again.")


METHOD = Method(
    name="repeat",
    config=RepeatConfig,
    summary="repeat the last token",
    facts=lambda c: Facts(nodes=1, levels=1, label="repeat", chains_only=True),
    make_drafter=lambda c, net: (lambda: None),
    trtllm=Trtllm(engine=NotServed("repeat: no such drafter upstream"), pytorch=NotServed("no")),
)
"""


@pytest.fixture
def toy_method(tmp_path, monkeypatch):
    """A third-party method installed in a scratch folder: a package and a .dist-info naming its entry point."""
    root = tmp_path / "site"
    (root / "toy_repeat").mkdir(parents=True)
    (root / "toy_repeat" / "__init__.py").write_text("")
    (root / "toy_repeat" / "method.py").write_text(TOY)
    info = root / "toy_repeat-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-repeat\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{registry.GROUP}]\nrepeat = toy_repeat.method:METHOD\n")
    monkeypatch.syspath_prepend(str(root))
    registry.reset()
    yield "repeat"
    registry.reset()  # discovered again (without it) once the path is gone
    for mod in [m for m in sys.modules if m == "toy_repeat" or m.startswith("toy_repeat.")]:
        del sys.modules[mod]


def test_an_installed_method_the_engine_flow_does_not_serve_is_refused_with_its_reason(toy_method, tmp_path):
    assert toy_method in registry.methods() and toy_method not in served()
    with pytest.raises(UserError, match="repeat: no such drafter upstream") as e:
        engine_flow(toy_method)
    assert e.value.field == "speculative.method"
    with pytest.raises(UserError, match="repeat: no such drafter upstream") as e:
        convert_checkpoint(CheckpointRequest(FIX / "base", 1, 1, "float32", toy_method), tmp_path / "out")
    assert e.value.field == "speculative.method" and e.value.allowed == ", ".join(UPSTREAM_SERVED)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("method", ["medusa", "eagle1"])
def test_a_drafts_exclude_pattern_covers_its_tensors_and_no_target_tensor(method):
    """TensorRT-LLM matches exclude_modules with fnmatch on module names (quantization/quantize.py
    `quantize_layers`): the draft's pattern must hold every module the conversion wrote for it, and none of the
    target's (transformer.*, lm_head), or FP8 would quantize the draft or skip the target."""
    draft = draft_of(engine_flow("eagle" if method == "eagle1" else method))
    folder, _ = converted("fixture", 2, 1, method)
    names = [n for rank in (0, 1) for n in raw_rank(folder, rank)]
    modules = {n.rsplit(".", 1)[0]: n.startswith(("transformer.", "lm_head.")) for n in names}
    assert any(target for target in modules.values()) and not all(modules.values())
    for module, target in modules.items():
        assert fnmatch(module, draft.exclude) != target, module


def test_eagle_tree_numbers_hand_worked():
    """Depth, and the most nodes of one level that have children (the root is level 0)."""
    #        root            level 0: root has children                     -> 1
    #      (0)   (1)          level 1: (0) and (1) have children             -> 2
    #   (0,0) (0,1) (1,0)     level 2: (0,0) has a child                     -> 1
    #  (0,0,0)
    tree = [[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]]
    assert eagle_tree_numbers(tree) == (3, 2)
    assert eagle_tree_numbers([(0,), (1,), (2,)]) == (1, 1)
    assert eagle_tree_numbers([[0], [0, 0], [0, 0, 0], [0, 0, 0, 0]]) == (4, 1)
    m = registry.get("eagle")
    static = m.validate(
        {"method": "eagle", "checkpoint": "x", "version": 1, "tree": {"type": "static", "choices": tree}}
    )
    assert eagle_request(static) == {"eagle_version": 1, "num_eagle_layers": 3, "max_non_leaves_per_layer": 2}
    dynamic = m.validate(
        {"method": "eagle", "checkpoint": "x", "version": 2, "tree": {"type": "dynamic", "depth": 5, "top_k": 3}}
    )
    assert eagle_request(dynamic) == {
        "eagle_version": 2,
        "eagle_dynamic_top_k": 3,
        "num_eagle_layers": 5,
        "max_non_leaves_per_layer": 3,
    }


def test_the_stage_and_the_engine_flow_know_no_method_name():
    """The backend's own modules dispatch through the registry: no method name appears as a string literal in
    their code (docstrings and comments aside), the draft modules named by `EngineFlow.checkpoint` excepted."""
    import ast

    root = Path(__file__).resolve().parents[2]
    files = [
        root / "builder" / "trtllm" / "flow.py",
        root / "builder" / "trtllm" / "checkpoint" / "prepare.py",
        root / "builder" / "trtllm" / "checkpoint" / "writer.py",
        root / "builder" / "trtllm" / "checkpoint" / "drafts.py",
        root / "builder" / "stages" / "backends" / "trtllm" / "checkpoint.py",
    ]
    for f in files:
        tree = ast.parse(f.read_text(encoding="utf-8"))
        docs = {
            id(n.body[0].value)
            for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef))
            and n.body
            and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)
        }
        for n in ast.walk(tree):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
                assert n.value not in ("medusa", "eagle", "eagle3", "lookahead", "ngram"), (f.name, n.lineno, n.value)
