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
    bad.write_text(textwrap.dedent("""\
        def f() -> None:
            import tensorrt as trt
            import tensorrt.plugin as trtp
            trtp.from_shape_expr((1,))
            trt.DataType.INT33
    """))
    result = typecheck.run_mypy([bad], work)
    assert result.returncode == 1
    assert 'Missing positional argument "dtype" in call to "from_shape_expr"' in result.stdout
    assert 'has no attribute "INT33"' in result.stdout
