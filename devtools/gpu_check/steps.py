"""The GPU check's steps in run order: what each runs, what it needs from the host, and what it costs.

Standard library only: the runner (`devtools.gpu_check.runner`) reads this table before anything heavy is
imported, and a test compares it with the estimates stated in scripts/gpu_check.sh's header.

A step is a function `run(ctx: Context) -> Verdict` named "module:function", run in a child process of its
own (`devtools.gpu_check.child`): a step that faults the GPU (an illegal address poisons the process's CUDA
context) or hangs cannot take the others with it. It may raise `Skip` / `Fail` instead of returning; any other
exception is a FAIL with its message.

Order: cheap and most telling first — the host facts, the tree_verify kernel, the TensorRT runtime's host
layers over real CUDA, the seconds-long TensorRT probes — and only then anything that builds a model (the FP8
calibration, engine builds, TensorRT-LLM), so a budget that runs out cuts the expensive tail, never the
evidence in front of it.

`est_s` is the expected wall time on one H100 (80 GB HBM3, CUDA 13, torch 2.11, Triton 3.6) with warm disk
caches and nothing built yet; a step runs only when the budget has that much left. How each was sized is
written beside it. `timeout_s` is its own limit (less when the budget has less left).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
REPO = Path(__file__).resolve().parents[2]
ENGINE_RECIPES = (
    "tiny-llama3",
    "tiny-llama3-eagle2",
    "tiny-llama3-eagle3",
    "tiny-llama3-medusa",
)  # recipes/<name>.yaml
ENGINE_DTYPES = ("fp32", "bf16")  # model.dtype of the TensorRT engines (the ONNX Runtime side is fp32)
INJECT = ("fail", "crash", "hang")  # test-only steps (--inject): a FAIL, a process killed by a signal, a hang


@dataclass(frozen=True)
class Step:
    name: str
    target: str  # "module:function" run in a child process
    needs: tuple[str, ...]  # preflight facts (`devtools.gpu_check.preflight.FACTS`) that must hold
    est_s: int  # expected seconds on one H100 (module docstring)
    timeout_s: int  # the child's own limit
    what: str  # one line for --list
    params: tuple[tuple[str, Any], ...] = ()  # passed to the step as ctx.params


@dataclass
class Verdict:
    status: str  # PASS | FAIL | SKIP
    reason: str
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Skip(Exception):
    """Raised by a step that finds it cannot run here (the message says why)."""


class Fail(Exception):
    """Raised by a step whose check failed (the message says how)."""


@dataclass
class Context:
    """What a step gets: the runner's settings (JSON through the environment), the preflight facts, its params."""

    repo: str
    out_dir: str
    work_dir: str
    cache_dir: str  # the trtspec build cache of the engine and TensorRT-LLM steps
    device: str  # target.device of TensorRT builds (h100 | h200 | ...)
    prompts: int
    tokens: int
    facts: dict[str, Any]
    params: dict[str, Any] = field(default_factory=dict)
    step: str = ""

    @property
    def work(self) -> Path:
        return Path(self.work_dir)


_KERNEL = ("cuda", "triton")
_TRT = ("cuda", "tensorrt", "onnx")
_CLI = ("trtspec",)  # pydantic, PyYAML, click, rich, NumPy: `python -m builder.cli` imports


def plan(
    engine_recipes: tuple[str, ...] = ENGINE_RECIPES,
    engine_dtypes: tuple[str, ...] = ENGINE_DTYPES,
    trtllm_methods: tuple[str, ...] | None = None,
    inject: tuple[str, ...] = (),
) -> list[Step]:
    """Every step in run order (the runner filters with --steps / --skip)."""
    steps = [
        # pip install --no-index of ~21 MB of wheels, no compilation (--no-compile): measured 3 s here.
        Step(
            "wheelhouse",
            "devtools.gpu_check.wheelhouse:install_step",
            (),
            5,
            120,
            "install the wheelhouse's missing packages offline into the work dir",
        ),
        # import torch + CUDA init + triton + onnxruntime: ~5 s warm on a GPU host (2.6 s on this CPU host).
        Step(
            "preflight",
            "devtools.gpu_check.preflight:preflight_step",
            (),
            10,
            90,
            "versions, GPU, known hazards (the facts every later step's needs are read from)",
        ),
    ]
    steps += [
        Step(
            f"inject-{kind}",
            "devtools.gpu_check.child:inject_step",
            (),
            1,
            30,
            f"test only: a step that {kind}s",
            (("kind", kind),),
        )
        for kind in inject
    ]
    steps += [
        # 5 configurations x 5 batch sizes + 4 fp16/fp32 rows; per row a reference compare (B*64*128256 logits in
        # fp64 on the GPU: <1 s), a do_bench (25 + 200 ms); ~10 Triton compilations of 2-4 s each.
        Step(
            "kernel",
            "devtools.gpu_check.kernel:kernel_step",
            _KERNEL,
            90,
            300,
            "tree_verify Triton kernel vs the reference, T=64 V=128256 B=1..16, both modes, bf16/fp16/fp32",
        ),
        # a 1 GiB copy timed (0.3 s), two B=16 bf16 calls timed, two compilations.
        Step(
            "kernel-bandwidth",
            "devtools.gpu_check.kernel:bandwidth_step",
            _KERNEL,
            20,
            120,
            "bandwidth goal: >= 80 % of the measured copy bandwidth at B=16 (greedy, rejection top_p=1)",
        ),
        Step(
            "kernel-garbage-indices",
            "devtools.gpu_check.kernel:garbage_step",
            _KERNEL,
            15,
            90,
            "kernel on arbitrary int32 tokens/paths and NaN/inf logits: no fault, CUDA context still usable",
        ),
        # pytest start-up + torch import (~6 s) + 6 tests on tiny tensors.
        Step(
            "host-cuda",
            "devtools.gpu_check.suites:host_cuda_step",
            ("cuda", "pytest", "ml_dtypes"),
            20,
            120,
            "TensorRT runtime host layers (lanes, device KV incl. FP8, I/O slots, bindings) on real CUDA, "
            "TensorRT stand-in",
        ),
        Step(
            "plugin-impl-stream",
            "devtools.gpu_check.suites:plugin_impl_step",
            (*_KERNEL, "pytest"),
            20,
            120,
            "the TensorRT plugin's impl body on an external CUDA stream (tensorrt.plugin stand-in)",
        ),
        # each probe: TensorRT import (~3 s) + 2-12 tiny networks parsed and built (~1-2 s each) and run.
        Step(
            "trt-probe-rope",
            "devtools.gpu_check.probes:rope_step",
            _TRT,
            20,
            150,
            "TensorRT RotaryEmbedding (ONNX and trt:: forms) with int32 / int64 position ids",
        ),
        Step(
            "trt-probe-kv-update",
            "devtools.gpu_check.probes:kv_update_step",
            _TRT,
            30,
            150,
            "TensorRT TensorScatter KV update with fp32 / bf16 / FP8 caches, in place and not",
        ),
        Step(
            "trt-probe-attention",
            "devtools.gpu_check.probes:attention_step",
            _TRT,
            20,
            150,
            "TensorRT Attention (ONNX and trt:: forms) with an additive mask, fp32 / bf16, GQA",
        ),
        Step(
            "trt-probe-treeverify-attrs",
            "devtools.gpu_check.probes:treeverify_attrs_step",
            (*_TRT, "triton"),
            30,
            180,
            "QDP attribute forms (int vs 1-element array) and the real TreeVerify node",
        ),
        # 4 engines at B=2, V=128256 (the plugin's format autotuning runs the kernel): ~10 s each.
        Step(
            "trt-plugin-engine",
            "devtools.gpu_check.engines:plugin_engine_step",
            (*_TRT, "triton"),
            45,
            240,
            "TreeVerify plugin engine vs the reference at V=128256, both modes, shared / own trees",
        ),
        # modelopt import ~20 s, tiny fixture (14.6 MiB) calibrated with 32 x 128 tokens, unified-HF export.
        Step(
            "quantize-fp8-cuda",
            "devtools.gpu_check.quantize:quantize_step",
            ("cuda", "modelopt", *_CLI),
            90,
            300,
            "trtspec build recipes/tiny-llama3-fp8.yaml --until quantize with CUDA visible; manifest checked",
        ),
    ]
    for recipe in engine_recipes:
        for dtype in engine_dtypes:
            # ONNX Runtime build (~25 s, CPU), export + 2-3 TensorRT builds of the tiny graphs (~40 s each),
            # 3 prompts x 48 tokens decoded on both.
            steps.append(
                Step(
                    f"engine-{recipe}-{dtype}",
                    "devtools.gpu_check.engines:recipe_engine_step",
                    (*_TRT, "triton", "onnxruntime", *_CLI),
                    180,
                    600,
                    f"recipes/{recipe}.yaml: TensorRT ({dtype}) vs ONNX Runtime, greedy, token for token",
                    (("recipe", recipe), ("dtype", dtype)),
                )
            )
    methods = trtllm_methods if trtllm_methods is not None else discover_trtllm_methods()
    for method in methods:
        # convert + trtllm-build of the tiny fixture (~90 s), server start (~40 s), 32 tokens served.
        steps.append(
            Step(
                f"trtllm-{method}",
                "devtools.gpu_check.trtllm:trtllm_step",
                ("cuda", "tensorrt_llm", *_CLI),
                240,
                900,
                f"recipes/tiny-llama3-trtllm-{method}.yaml: build, deploy, serve (launch.sh), "
                "greedy tokens vs ONNX Runtime",
                (("method", method),),
            )
        )
    # deploy of the tiny fixture (~60 s: FP16 checkpoint copy, options, repository), trtllm-serve start with CUDA
    # graph capture (~90 s), one ONNX Runtime generate (~20 s), 32 tokens served.
    steps.append(
        Step(
            "llmapi-eagle3",
            "devtools.gpu_check.llmapi:llmapi_step",
            ("cuda", "tensorrt_llm", *_CLI),
            240,
            1200,
            "recipes/tiny-llama3-llmapi-eagle3.yaml: deploy, trtllm-serve (launch.sh), greedy text vs ONNX Runtime",
        )
    )
    return steps


def discover_trtllm_methods() -> tuple[str, ...]:
    """The methods of recipes/tiny-llama3-trtllm-*.yaml (sorted)."""
    prefix = "tiny-llama3-trtllm-"
    return tuple(sorted(p.stem.removeprefix(prefix) for p in (REPO / "recipes").glob(f"{prefix}*.yaml")))
