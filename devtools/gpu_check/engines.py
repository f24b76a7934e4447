"""TensorRT engines on a GPU host (TensorRT >= 10.15): the tree_verify plugin in an engine, and the fixture
recipes' TensorRT engines decoding like ONNX Runtime (steps `trt-plugin-engine`, `engine-<recipe>-<dtype>`).

`trt-plugin-engine`: an engine built from an ONNX graph whose only node is trtspec::TreeVerify (parsed to the
plugin `plugins.tree_verify.trt_plugin` registers), run on the case's tensors and compared with the reference
(`devtools.verify_cases.compare`): both modes, the Medusa tree shared by the batch and one tree per
sequence, B = 2, V = 128256, bf16 logits.

`engine-<recipe>-<dtype>`: `trtspec build` of recipes/<recipe>.yaml twice — as shipped (the ONNX Runtime engine,
float32 on the CPU) and with `--set target.device=<device> --set target.backend=tensorrt --set
model.dtype=<dtype>` (the TensorRT engines) — then a few prompts decoded greedily with the recipe's drafter on
both, compared token for token. fp32: the tokens must be equal; a difference is accepted only where the float64
reference model puts the two candidate tokens' logits within 1e-5 · max|logit| of each other (a near-tie:
STYLE.md rule 5). bf16: the first difference of each prompt must be a near-tie within the bf16 bound
(L + 2) · 2^-8 · max|logit| — one bf16 rounding (unit roundoff 2^-8) of the residual stream per layer, of the
final norm and of the head, each up to the logits' magnitude (a first-order bound, not a proof); after the
first difference the continuations are different texts and are not compared.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from devtools.gpu_check.kernel import VOCAB, make_case
from devtools.gpu_check.steps import FAIL, PASS, Context, Fail, Verdict
from devtools.verify_cases import Case, compare
from plugins.tree_verify.contract import INPUT_NAMES, OUTPUT_NAMES, Mode
from plugins.tree_verify.reference import VerifyResult

PROMPTS = (
    "def add(a, b):\n",
    "import os\n\ndef list_files(path):\n",
    "class Stack:\n    def __init__(self):\n",
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
)
TIE_FP32 = 1e-5  # STYLE.md rule 5: a near-tie in fp32 is a top-2 gap below ~1e-5 (relative to max|logit| here)
BF16_U = 2.0**-8  # bf16 unit roundoff (8 significant bits)


# -- the TreeVerify plugin in an engine -----------------------------------------------------------------------


def tensorrt_available() -> bool:
    from builder.engines.tensorrt.probe import missing  # tensorrt-stubs alone make `import tensorrt` succeed

    if missing() is not None:
        return False
    try:
        import tensorrt.plugin  # noqa: F401
    except ImportError:
        return False
    return True


def verify_model(case: Case) -> Any:
    """An ONNX model whose only node is TreeVerify, with this case's static shapes."""
    from onnx import TensorProto, helper

    from plugins.tree_verify import onnx_op
    from plugins.tree_verify.contract import DOMAIN

    types = {
        torch.float32: TensorProto.FLOAT,
        torch.float16: TensorProto.FLOAT16,
        torch.bfloat16: TensorProto.BFLOAT16,
        torch.int32: TensorProto.INT32,
    }
    named = zip(INPUT_NAMES, case.inputs())
    inputs = [helper.make_tensor_value_info(n, types[t.dtype], list(t.shape)) for n, t in named]
    b, w = case.tokens.shape[0], case.paths.shape[2]
    outputs = [helper.make_tensor_value_info(n, TensorProto.INT32, s) for n, s in zip(OUTPUT_NAMES, ([b], [b], [b, w]))]
    graph = helper.make_graph([onnx_op.make_node(INPUT_NAMES, OUTPUT_NAMES, case.mode)], "tree_verify", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(DOMAIN, 1)])


def check_tensorrt(case: Case, label: str) -> Any:
    """Build a TensorRT engine from an ONNX graph with the TreeVerify node, run it, compare it; a kernel.Row."""
    import tensorrt as trt

    from devtools.gpu_check.kernel import Row
    from plugins.tree_verify import trt_plugin

    trt_plugin.register()
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(verify_model(case).SerializeToString()):
        raise RuntimeError("; ".join(str(parser.get_error(i)) for i in range(parser.num_errors)))
    plan = builder.build_serialized_network(network, builder.create_builder_config())
    if plan is None:
        raise RuntimeError("TensorRT built no engine for the TreeVerify graph (see its log above)")
    engine = trt.Runtime(logger).deserialize_cuda_engine(plan)
    context = engine.create_execution_context()
    b, w = case.tokens.shape[0], case.paths.shape[2]
    outs = [
        torch.empty(b, dtype=torch.int32, device="cuda"),
        torch.empty(b, dtype=torch.int32, device="cuda"),
        torch.empty(b, w, dtype=torch.int32, device="cuda"),
    ]
    inputs = [x.contiguous() for x in case.inputs()]  # kept alive until the engine has run
    for name, tensor in [*zip(INPUT_NAMES, inputs), *zip(OUTPUT_NAMES, outs)]:
        context.set_tensor_address(name, tensor.data_ptr())
    stream = torch.cuda.Stream()
    if not context.execute_async_v3(stream.cuda_stream):
        raise RuntimeError("execute_async_v3 returned False")
    stream.synchronize()
    result = compare(case, VerifyResult(*outs))
    return Row(
        "tensorrt",
        label,
        str(case.logits.dtype).removeprefix("torch."),
        b,
        float("nan"),
        float("nan"),
        float("nan"),
        result.rows - len(result.near_ties) - len(result.wrong),
        len(result.near_ties),
        len(result.wrong),
    )


def plugin_engine_step(ctx: Context) -> Verdict:
    rows = []
    for mode in Mode:
        for own_trees in (False, True):
            label = f"{mode.name.lower()}{' own trees' if own_trees else ''}"
            rows.append(check_tensorrt(make_case(mode, 2, VOCAB, torch.bfloat16, False, own_trees), label))
            print(f"{label}: {rows[-1].rows_ok} equal, {rows[-1].near_ties} near-ties, {rows[-1].wrong} wrong")
    wrong = sum(r.wrong for r in rows)
    details = {"rows": [dataclasses.asdict(r) for r in rows]}
    return Verdict(
        FAIL if wrong else PASS,
        f"{len(rows)} engines (both modes, shared / own trees, V={VOCAB}): {wrong} wrong sequences",
        details,
    )


# -- the fixture recipes' TensorRT engines against ONNX Runtime --------------------------------------------------


def build(repo: Path, recipe: Path, cache: Path, sets: list[str], timeout: float) -> Path:
    """`trtspec build --until engine` (a subprocess, as a user runs it); the engine folder."""
    cmd = [
        sys.executable,
        "-m",
        "builder.cli",
        "build",
        str(recipe),
        "--cache-dir",
        str(cache),
        "--until",
        "engine",
        "--json",
        "--quiet",
    ]
    for s in sets:
        cmd += ["--set", s]
    print("$ " + " ".join(cmd), flush=True)
    run = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, check=False, timeout=timeout)
    if run.returncode != 0:
        raise Fail(f"trtspec build exited {run.returncode}: {run.stderr.strip()[-600:]}")
    return Path(next(s["output"] for s in json.loads(run.stdout)["stages"] if s["stage"] == "engine"))


def reference_logits(checkpoint: Path, ids: list[int]) -> torch.Tensor:
    """float64 logits [V] of the plain-torch reference model after `ids` (the near-tie oracle)."""
    from builder.model.llama import causal_mask
    from builder.model.loader import load_model

    model = load_model(checkpoint, torch.float32).to(torch.float64)  # the loader reads fp32; the math in fp64
    tokens = torch.tensor([ids], dtype=torch.int64)
    positions = torch.arange(len(ids), dtype=torch.int64)[None]
    with torch.no_grad():
        logits, _ = model(tokens, positions, causal_mask(len(ids)))
    return logits[0, -1]


def near_tie(checkpoint: Path, layers: int, dtype: str, ids: list[int], a: int, b: int) -> tuple[bool, str]:
    """Whether tokens a and b are a near-tie after `ids` for an engine of `dtype` (module docstring)."""
    logits = reference_logits(checkpoint, ids)
    top = float(logits.abs().max())
    gap = abs(float(logits[a] - logits[b]))
    bound = (TIE_FP32 if dtype == "fp32" else (layers + 2) * BF16_U) * top
    return gap <= bound, f"reference gap {gap:.3g} vs bound {bound:.3g} (max|logit| {top:.3g})"


def recipe_engine_step(ctx: Context) -> Verdict:
    from builder.engines.folder import open_engine
    from builder.speculative.decoding import generate
    from builder.stages.parts import load_tokenizer

    recipe = Path(ctx.repo) / "recipes" / f"{ctx.params['recipe']}.yaml"
    dtype = ctx.params["dtype"]
    device = ctx.device if ctx.device != "auto" else ctx.facts.get("device_kind", "h100")
    cache = Path(ctx.cache_dir)
    t0 = time.monotonic()
    ort_dir = build(Path(ctx.repo), recipe, cache, [], timeout=300)
    trt_dir = build(
        Path(ctx.repo),
        recipe,
        cache,
        [f"target.device={device}", "target.backend=tensorrt", f"model.dtype={dtype}"],
        timeout=540,
    )
    build_s = time.monotonic() - t0
    ort, trt = open_engine(ort_dir), open_engine(trt_dir, device=0)
    tok = load_tokenizer(ort.tokenizer_path)
    checkpoint = checkpoint_dir(recipe)
    layers = int(ort.meta["model"]["layers"])
    prompts = PROMPTS[: max(1, min(ctx.prompts, len(PROMPTS)))]
    verdicts: list[str] = []
    tau: dict[str, list[float]] = {"trt": [], "ort": []}
    bad: list[int] = []
    for i, text in enumerate(prompts):
        ids = tok.encode(text).ids
        got = generate(trt.engine, ids, ctx.tokens, trt.make_drafter(), stop_ids=trt.stop_ids)
        want = generate(ort.engine, ids, ctx.tokens, ort.make_drafter(), stop_ids=ort.stop_ids)
        tau["trt"].append(got.tau)
        tau["ort"].append(want.tau)
        j = next((k for k, (x, y) in enumerate(zip(got.token_ids, want.token_ids)) if x != y), None)
        if j is None and len(got.token_ids) == len(want.token_ids):
            verdicts.append(f"prompt {i}: {len(got.token_ids)} tokens equal")
            continue
        if j is None:  # one stopped earlier (a stop token): the shorter is a prefix of the longer
            verdicts.append(
                f"prompt {i}: equal up to {min(len(got.token_ids), len(want.token_ids))} tokens, "
                f"lengths {len(got.token_ids)} / {len(want.token_ids)}"
            )
            bad.append(i)
            continue
        tie, how = near_tie(checkpoint, layers, dtype, ids + want.token_ids[:j], got.token_ids[j], want.token_ids[j])
        verdicts.append(
            f"prompt {i}: first difference at token {j}: trt {got.token_ids[j]} vs ort "
            f"{want.token_ids[j]} — {'near-tie' if tie else 'NOT a near-tie'}, {how}"
        )
        if not tie:
            bad.append(i)
    print("\n".join(verdicts))
    details: dict[str, Any] = {
        "recipe": recipe.name,
        "dtype": dtype,
        "device": device,
        "drafter": trt.label,
        "build_s": round(build_s, 1),
        "prompts": verdicts,
        "tau_trt": sum(tau["trt"]) / len(prompts),
        "tau_ort": sum(tau["ort"]) / len(prompts),
        "engine_dirs": [str(ort_dir), str(trt_dir)],
    }
    summary = (
        f"{trt.label}, {len(prompts)} prompts x {ctx.tokens} tokens, τ trt {details['tau_trt']:.2f} / ort "
        f"{details['tau_ort']:.2f}, builds {build_s:.0f} s"
    )
    if bad:
        return Verdict(FAIL, f"{summary}: prompts {bad} differ beyond a near-tie", details)
    return Verdict(PASS, f"{summary}: tokens equal (or first differences at near-ties)", details)


def checkpoint_dir(recipe: Path) -> Path:
    """The local target checkpoint folder of `recipe` (as the stages resolve it)."""
    from builder.recipe.loader import load_recipe
    from builder.stages.parts import Parts

    loaded = load_recipe(recipe)
    return Parts(loaded, loaded.recipe.speculative.method).base_dir()
