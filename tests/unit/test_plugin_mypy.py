"""The TensorRT face is checked by mypy against tensorrt-stubs + our `tensorrt.plugin` stub (no
TensorRT on CPU machines): the plugin module type-checks, and the same check rejects API misuse."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

pytest.importorskip("mypy")
typecheck = pytest.importorskip("plugins.tree_verify.typecheck")

PLUGIN = Path(typecheck.__file__).with_name("trt_plugin.py")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    try:
        typecheck._installed_stubs()
    except FileNotFoundError as err:
        pytest.skip(str(err))
    return tmp_path_factory.mktemp("mypy")  # shared cache: the second run reuses the stubs' analysis


def test_trt_plugin_type_checks(work):
    result = typecheck.run_mypy([PLUGIN], work)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_rejects_tensorrt_api_misuse(work):
    bad = work / "misuse.py"
    bad.write_text(
        textwrap.dedent("""\
        def f() -> None:
            import tensorrt as trt
            import tensorrt.plugin as trtp
            trtp.from_shape_expr((1,))
            trt.DataType.INT33
    """)
    )
    result = typecheck.run_mypy([bad], work)
    assert result.returncode == 1
    assert 'Missing positional argument "dtype" in call to "from_shape_expr"' in result.stdout
    assert 'has no attribute "INT33"' in result.stdout


# -- the tensorrt.plugin stub against TensorRT's own Python source (10.x) ---------------------------------------

STUB = typecheck.PLUGIN_STUB.read_text()
CHECKED = {"10.15.1.29", "10.16.1.11"}  # the probe's minimum 10.x release and the newest 10.x (tensorrt-cu13-bindings)


def test_the_plugin_stub_matches_the_recorded_tensorrt_plugin_api():
    data = typecheck.recorded_api()
    assert set(data["versions"]) == CHECKED
    ours = typecheck.stub_api(STUB)
    assert {"register", "impl", "autotune", "from_shape_expr"} <= set(ours["functions"])
    assert {"TensorDesc", "Tensor", "ShapeExpr", "ShapeExprs", "Shape", "AutoTuneCombination"} <= set(ours["classes"])
    for version, rec in data["versions"].items():
        assert rec["wheel"].startswith(f"tensorrt_cu13_bindings-{version}-") and len(rec["sha256"]) == 64
        assert {"tensorrt_bindings/plugin/_lib.py", "tensorrt_bindings/plugin/_tensor.py"} <= set(rec["files"])
        assert typecheck.stub_mismatches(ours, rec["api"]) == [], version
        # as read by hand in _lib.py / _top_level.py / _tensor.py of these wheels:
        api = rec["api"]
        assert api["functions"]["register"] == "plugin_id, lazy_register=" and api["functions"]["impl"] == "plugin_id"
        assert api["functions"]["from_shape_expr"] == "shape_expr, dtype"
        assert api["classes"]["Tensor"]["data_ptr"] == "property" and api["classes"]["Tensor"]["numel"] == "(self)"
        shape_expr = api["classes"]["ShapeExpr"]
        assert shape_expr["constant_value"] == "(self)" and shape_expr["is_fake"] == "property"


def test_the_stub_check_rejects_names_and_signatures_tensorrt_lacks():
    real = typecheck.recorded_api()["versions"]["10.16.1.11"]["api"]
    bad = (
        STUB.replace("dtype: trt.DataType) -> TensorDesc", "dt: trt.DataType) -> TensorDesc")
        .replace("    @property\n    def data_ptr(self) -> int: ...", "    def data_ptr(self) -> int: ...")
        .replace("def impl(plugin_id: str)", "def implement(plugin_id: str)")
        .replace("class Shape:", "class Shapes:")
    )
    assert bad.count("\n") == STUB.count("\n") - 1 and bad != STUB
    assert sorted(typecheck.stub_mismatches(typecheck.stub_api(bad), real)) == [
        "Tensor.data_ptr (self): tensorrt.plugin has property",
        "class Shapes: not in tensorrt.plugin",
        "function from_shape_expr(shape_expr, dt): tensorrt.plugin has (shape_expr, dtype)",
        "function implement: not in tensorrt.plugin",
    ]


def test_plugin_api_reads_public_api_definitions_and_their_bases():
    source = textwrap.dedent("""\
        def public_api(): ...
        class Base:
            def numel(self): ...
            @property
            def shape(self): ...
            @shape.setter
            def shape(self, value): ...
            def _private(self): ...
        @public_api()
        class Desc(Base):
            def like(self, *args, deep=False, **kw): ...
            @classmethod
            def from_tuple(cls, t): ...
        if FEATURE:
            @public_api()
            def aot(plugin_id, tactic=None): ...
        def not_exported(): ...
    """)
    assert typecheck.plugin_api({"m.py": source}) == {
        "functions": {"aot": "plugin_id, tactic="},
        "classes": {
            "Desc": {
                "numel": "(self)",
                "shape": "property",
                "like": "(self, *args, deep=, **kw)",
                "from_tuple": "classmethod (cls, t)",
            }
        },
    }


def test_the_recorded_api_is_what_the_wheels_hold():
    """Re-reads the wheels when they are at hand ($TRTSPEC_TENSORRT_WHEELS: a folder holding them; CI has no
    network for `pip download --no-deps tensorrt-cu13-bindings==VERSION`)."""
    import os

    folder = Path(os.environ.get("TRTSPEC_TENSORRT_WHEELS", "/nonexistent"))
    data = typecheck.recorded_api()["versions"]
    wheels = [folder / rec["wheel"] for rec in data.values()]
    if not all(w.is_file() for w in wheels):
        pytest.skip(
            f"the tensorrt-cu13-bindings wheels {sorted(w.name for w in wheels)} are not in "
            "$TRTSPEC_TENSORRT_WHEELS (offline): the recorded API stands in for them"
        )
    for wheel in wheels:
        rec = typecheck.wheel_record(wheel)
        assert rec == data[rec["version"]], wheel.name
