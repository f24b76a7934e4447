"""The TensorRT adapter (builder/engines/tensorrt and the host side it runs, builder/engines/batched.py) is
checked by mypy --strict against tensorrt-stubs (no TensorRT here): it type-checks, and the same check
fails on misuse of the TensorRT API — in a hand-written file and in a copy of the adapter with one call
broken — so a wrong call is caught before a GPU host sees it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

pytest.importorskip("mypy")
typecheck = pytest.importorskip("builder.engines.tensorrt.typecheck")
stubs = pytest.importorskip("plugins.tree_verify.typecheck")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    try:
        stubs._installed_stubs()
    except FileNotFoundError as err:
        pytest.skip(str(err))
    return tmp_path_factory.mktemp("mypy_trt")  # shared cache: later runs reuse the stubs' analysis


def test_the_tensorrt_adapter_type_checks_strictly(work):
    names = {Path(f).name for f in typecheck.FILES}
    assert {
        "build.py",
        "runtime.py",
        "target.py",
        "eagle.py",
        "folder.py",
        "profiles.py",
        "probe.py",
        "device.py",
        "kv.py",
        "timing.py",
        "lock.py",
        "batched.py",
        "bindings.py",
        "eagle_host.py",
        "opened.py",
    } <= names
    result = typecheck.run(typecheck.FILES, work)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"no issues found in {len(typecheck.FILES)} source files" in result.stdout


def test_mypy_rejects_tensorrt_api_misuse(work):
    bad = work / "misuse.py"
    bad.write_text(
        textwrap.dedent("""\
        def f() -> None:
            import tensorrt as trt
            builder = trt.Builder(trt.Logger(trt.Logger.WARNING))
            network = builder.create_network(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
            config = builder.create_builder_config()
            config.set_timing_cache(config.create_timing_cache(b""))
            profile = builder.create_optimization_profile()
            profile.set_shape("tokens", (1, 1), (2, 4), (2, 8))
            plan = builder.build_serialized_network(network)
            engine = trt.Runtime(trt.Logger()).deserialize_cuda_engine(plan)
            context = engine.create_execution_context()
            context.execute_async_v3()
            shared = engine.create_execution_context(trt.ExecutionContextAllocationStrategy.USER_MANAGE)
            shared.set_device_memory(engine.device_memory_size_v2)
            engine.get_device_memory_size_for_profile(0).bit_length()
            engine.device_memory_size_v3
    """)
    )
    out = typecheck.run([bad], work).stdout
    for message in (
        'Argument 1 to "create_network" of "Builder" has incompatible type "NetworkDefinitionCreationFlag"; '
        'expected "int"',
        'Missing positional argument "ignore_mismatch" in call to "set_timing_cache"',
        'Argument 2 to "set_shape" of "IOptimizationProfile" has incompatible type "tuple[int, int]"; expected "Dims"',
        'Missing positional argument "config" in call to "build_serialized_network"',
        'Missing positional argument "stream_handle" in call to "execute_async_v3"',
        '"type[ExecutionContextAllocationStrategy]" has no attribute "USER_MANAGE"',
        'Missing positional argument "size" in call to "set_device_memory" of "IExecutionContext"',
        '"ICudaEngine" has no attribute "device_memory_size_v3"',
    ):
        assert message in out, out


BROKEN_COPIES = {  # module of the adapter -> (a call in it, the same call broken, what mypy must say)
    "runtime.py": (
        "ctx.set_device_memory(self.lane.arena_ptr, self.lane.arena_bytes)",
        "ctx.set_device_memory(self.lane.arena_ptr)",
        'Missing positional argument "size" in call to "set_device_memory"',
    ),
    "build.py": (
        "config.set_timing_cache(cache, ignore_mismatch=False)",
        "config.set_timing_cache(cache, mismatch=False)",
        'Unexpected keyword argument "mismatch" for "set_timing_cache" of "IBuilderConfig"',
    ),
}


@pytest.mark.parametrize("name", list(BROKEN_COPIES))
def test_mypy_rejects_a_broken_call_in_a_copy_of(name, work):
    right, wrong, message = BROKEN_COPIES[name]
    source = Path(typecheck.HERE / name).read_text()
    assert right in source
    broken = work / name.replace(".py", "_broken.py")
    broken.write_text(source.replace(right, wrong))
    result = typecheck.run([broken], work)
    assert result.returncode == 1
    assert message in result.stdout
