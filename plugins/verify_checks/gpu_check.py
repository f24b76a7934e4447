"""GPU check of `tree_verify` (run by scripts/gpu_check.sh; needs CUDA torch + triton; tensorrt optional).

    python -m plugins.verify_checks.gpu_check [--vocab 128256] [--batches 1,2,4,8,16] [--json out.json]

1. The Triton kernel against the reference at T = 64 (the Medusa tree mc_sim_7b_63, shared by the
   batch as a stride-0 expanded paths tensor), V = 128256, B = 1..16, greedy and rejection (top_p =
   1: one pass over the logits; mixed top_p: the top-p search re-reads rows), bf16 logits (fp16 and
   fp32 at B = 1 and 16, greedy); and with one tree per sequence ("own trees": the first n_b ≤ 64
   nodes of that tree for each sequence, padded to T = 64), both modes.
2. Times each call with triton.testing.do_bench and sets the bytes it must move (the logits,
   B·T·V·bytes, plus the small inputs/outputs) against the device's measured copy bandwidth
   (a 1 GiB device-to-device copy: read + write).
3. If TensorRT with tensorrt.plugin is installed: builds an engine from an ONNX graph holding the
   trtspec::TreeVerify node (parsed to the plugin) and checks it against the reference.
4. If TensorRT ≥ 10.15 is installed: `trtspec build` of the fixture recipes twice — as shipped (the
   ONNX Runtime engine) and with `--set target.device=<--device> --set target.backend=tensorrt` (the
   TensorRT engines) — then decodes a few prompts greedily with the recipe's drafter on both and
   compares the tokens one for one (`--engine-recipes`, default tiny-llama3 and tiny-llama3-medusa:
   EAGLE-2 and Medusa; `all` for every recipes/tiny-llama3*.yaml). Without TensorRT this part prints
   why it is skipped; parts 1-2 run regardless.
Ends with tables. A kernel row whose output differs from the reference other than at a near-tie, or
an engine whose tokens differ from ONNX Runtime's, fails the check (exit code 1).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

from builder.speculative.choices import load_choices
from builder.speculative.tree import tree_from_choices
from plugins.tree_verify.contract import INPUT_NAMES, OUTPUT_NAMES, Mode
from plugins.tree_verify.reference import VerifyResult
from plugins.verify_checks.cases import Case, compare, random_case

TREE = "mc_sim_7b_63"  # 63 Medusa choices + root = 64 nodes


@dataclasses.dataclass
class Row:
    face: str
    mode: str
    dtype: str
    batch: int
    us: float
    gbps: float
    of_copy: float  # achieved / measured copy bandwidth
    rows_ok: int
    near_ties: int
    wrong: int


def bytes_moved(batch: int, nodes: int, vocab: int, logit_bytes: int, width: int, num_paths: int) -> int:
    """Minimum bytes per call: logits once, the small inputs and the outputs."""
    small_in = 4 * (batch * nodes * 2 + batch * num_paths * width + batch * (2 + width))  # tokens, q, paths, …
    return batch * nodes * vocab * logit_bytes + small_in + 4 * batch * (2 + width)


def copy_bandwidth(nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth in GB/s (read + write counted)."""
    import triton.testing

    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = triton.testing.do_bench(lambda: dst.copy_(src), warmup=50, rep=300)
    return 2 * nbytes / ms / 1e6


def make_case(mode: Mode, batch: int, vocab: int, dtype: torch.dtype, top_p_one: bool,
              own_trees: bool = False) -> Case:  # fmt: skip
    """T = 64 nodes: the Medusa tree shared by the batch, or (own_trees) its first n_b nodes per sequence."""
    parents = tree_from_choices(load_choices(TREE)).parents.tolist()
    if own_trees:  # nodes are in (depth, lexicographic) order: any first n nodes form a tree
        gen = torch.Generator().manual_seed(batch)
        sizes = [len(parents)] + torch.randint(1, len(parents) + 1, (batch - 1,), generator=gen).tolist()
        trees = [parents[:n] + [-2] * (len(parents) - n) for n in sizes]
        case = random_case(7, batch, len(parents), vocab, mode, dtype, trees=trees, greedy_rows=0.0)
    else:
        case = random_case(7, batch, len(parents), vocab, mode, dtype, parents=parents, greedy_rows=0.0)
    if top_p_one:
        case.top_p = torch.ones_like(case.top_p)
    return case.to("cuda")


def check_kernel(case: Case, label: str, copy_gbps: float) -> Row:
    import triton.testing

    from plugins.tree_verify.kernel import tree_verify_triton

    def run() -> VerifyResult:
        return tree_verify_triton(case.logits, case.tokens, case.paths, case.mode, case.temperature, case.top_p,
                                  case.uniforms, case.draft_probs)  # fmt: skip

    result = compare(case, run())
    ms = triton.testing.do_bench(run, warmup=25, rep=200)
    b, t, v = case.logits.shape
    moved = bytes_moved(b, t, v, case.logits.element_size(), case.paths.shape[2], case.paths.shape[1])
    gbps = moved / ms / 1e6
    return Row("triton", label, str(case.logits.dtype).removeprefix("torch."), b, ms * 1e3, gbps,
               gbps / copy_gbps, result.rows - len(result.near_ties) - len(result.wrong),
               len(result.near_ties), len(result.wrong))  # fmt: skip


def tensorrt_available() -> bool:
    from builder.engines.tensorrt.probe import missing  # tensorrt-stubs alone make `import tensorrt` succeed

    if missing() is not None:
        return False
    try:
        import tensorrt.plugin  # noqa: F401
    except ImportError:
        return False
    return True


def check_tensorrt(case: Case, label: str) -> Row:
    """Build a TensorRT engine from an ONNX graph with the TreeVerify node and compare it."""
    import tensorrt as trt

    from plugins.tree_verify import trt_plugin

    trt_plugin.register()
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(_verify_model(case).SerializeToString()):
        raise RuntimeError("; ".join(str(parser.get_error(i)) for i in range(parser.num_errors)))
    plan = builder.build_serialized_network(network, builder.create_builder_config())
    engine = trt.Runtime(logger).deserialize_cuda_engine(plan)
    context = engine.create_execution_context()
    b, w = case.tokens.shape[0], case.paths.shape[2]
    outs = [torch.empty(b, dtype=torch.int32, device="cuda"), torch.empty(b, dtype=torch.int32, device="cuda"),
            torch.empty(b, w, dtype=torch.int32, device="cuda")]  # fmt: skip
    inputs = [x.contiguous() for x in case.inputs()]  # kept alive until the engine has run
    for name, tensor in [*zip(INPUT_NAMES, inputs), *zip(OUTPUT_NAMES, outs)]:
        context.set_tensor_address(name, tensor.data_ptr())
    stream = torch.cuda.current_stream()
    context.execute_async_v3(stream.cuda_stream)
    stream.synchronize()
    result = compare(case, VerifyResult(*outs))
    return Row("tensorrt", label, str(case.logits.dtype).removeprefix("torch."), b, float("nan"), float("nan"),
               float("nan"), result.rows - len(result.near_ties) - len(result.wrong), len(result.near_ties),
               len(result.wrong))  # fmt: skip


def _verify_model(case: Case):
    """An ONNX model whose only node is TreeVerify, with this case's static shapes."""
    from onnx import TensorProto, helper

    from plugins.tree_verify import onnx_op
    from plugins.tree_verify.contract import DOMAIN

    types = {torch.float32: TensorProto.FLOAT, torch.float16: TensorProto.FLOAT16,
             torch.bfloat16: TensorProto.BFLOAT16, torch.int32: TensorProto.INT32}  # fmt: skip
    named = zip(INPUT_NAMES, case.inputs())
    inputs = [helper.make_tensor_value_info(n, types[t.dtype], list(t.shape)) for n, t in named]
    b, w = case.tokens.shape[0], case.paths.shape[2]
    outputs = [helper.make_tensor_value_info(n, TensorProto.INT32, s) for n, s in zip(OUTPUT_NAMES, ([b], [b], [b, w]))]
    graph = helper.make_graph([onnx_op.make_node(INPUT_NAMES, OUTPUT_NAMES, case.mode)], "tree_verify", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(DOMAIN, 1)])


def table(rows: list[Row], copy_gbps: float) -> str:
    head = (f"{'face':9} {'mode':22} {'dtype':9} {'B':>3} {'µs':>9} {'GB/s':>8} {'% copy':>7} "
            f"{'ok':>4} {'near':>5} {'wrong':>5}")
    lines = [f"device copy bandwidth: {copy_gbps:.0f} GB/s (goal: ≥ 80 % of it)", head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r.face:9} {r.mode:22} {r.dtype:9} {r.batch:>3} {r.us:>9.1f} {r.gbps:>8.0f} "
                     f"{100 * r.of_copy:>6.0f}% {r.rows_ok:>4} {r.near_ties:>5} {r.wrong:>5}")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--batches", default="1,2,4,8,16")
    ap.add_argument("--json", help="also write the rows as JSON here")
    ap.add_argument("--engine-recipes", default=",".join(ENGINE_RECIPES),
                    help="recipes/ files whose TensorRT engines are checked against ONNX Runtime, or 'all'")
    ap.add_argument("--device", default="h200", help="target.device of the TensorRT builds (this host's GPU)")
    ap.add_argument("--cache-dir", default=".trtspec-cache", help="the builds' cache (reruns reuse it)")
    ap.add_argument("--prompts", type=int, default=3, help="prompts decoded per recipe (at most 4)")
    ap.add_argument("--tokens", type=int, default=48, help="tokens generated per prompt")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    start, batches = time.time(), [int(b) for b in args.batches.split(",")]
    print(f"{torch.cuda.get_device_name()} · torch {torch.__version__} · TensorRT: {tensorrt_available()}")
    copy_gbps = copy_bandwidth()
    rows: list[Row] = []
    configs = [(Mode.GREEDY, "greedy", True, False), (Mode.REJECTION, "rejection top_p=1", True, False),
               (Mode.REJECTION, "rejection mixed top_p", False, False), (Mode.GREEDY, "greedy own trees", True, True),
               (Mode.REJECTION, "rejection own trees", False, True)]  # fmt: skip
    for mode, label, top_p_one, own_trees in configs:
        full = make_case(mode, max(batches), args.vocab, torch.bfloat16, top_p_one, own_trees)
        rows += [check_kernel(full.rows(0, b), label, copy_gbps) for b in batches]
        if tensorrt_available():
            rows.append(check_tensorrt(full.rows(0, min(4, max(batches))), label))
        del full
    for dtype in (torch.float16, torch.float32):
        full = make_case(Mode.GREEDY, max(batches), args.vocab, dtype, True)
        rows += [check_kernel(full.rows(0, b), "greedy", copy_gbps) for b in sorted({min(batches), max(batches)})]
        del full
    print(table(rows, copy_gbps))
    print(f"({time.time() - start:.0f} s)")
    engines = check_engines(args.engine_recipes, args.device, Path(args.cache_dir), args.prompts, args.tokens)
    if engines:
        print(engine_table(engines))
        print(f"({time.time() - start:.0f} s)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"copy_gbps": copy_gbps, "rows": [dataclasses.asdict(r) for r in rows],
                       "engines": [dataclasses.asdict(e) for e in engines]}, fh, indent=1)  # fmt: skip
    return 1 if any(r.wrong for r in rows) or any(e.differ for e in engines) else 0


# -- 4. TensorRT engines of the fixture recipes against ONNX Runtime ----------------------------------------

ENGINE_RECIPES = ("tiny-llama3.yaml", "tiny-llama3-eagle2.yaml", "tiny-llama3-medusa.yaml")
PROMPTS = ("def add(a, b):\n", "import os\n\ndef list_files(path):\n", "class Stack:\n    def __init__(self):\n",
           "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n")  # fmt: skip


@dataclasses.dataclass
class EngineRow:
    recipe: str
    drafter: str
    prompts: int
    tokens: int  # generated per engine, summed over the prompts
    differ: int  # prompts whose TensorRT tokens differ from ONNX Runtime's
    first_difference: str  # "prompt i, token j: trt x vs ort y" or ""
    tau_trt: float  # mean acceptance length (tokens per target step) over the prompts
    tau_ort: float
    build_s: float


def _build(recipe: Path, cache: Path, *sets: str) -> Path:
    """`trtspec build` (a subprocess, as a user runs it); returns the engine folder."""
    cmd = [sys.executable, "-m", "builder.cli", "build", str(recipe), "--cache-dir", str(cache), "--until", "engine",
           "--json", "--quiet"]  # fmt: skip
    for s in sets:
        cmd += ["--set", s]
    run = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {run.returncode}:\n{run.stderr[-4000:]}")
    return Path(next(s["output"] for s in json.loads(run.stdout)["stages"] if s["stage"] == "engine"))


def check_engines(names: str, device: str, cache: Path, n_prompts: int, n_tokens: int) -> list[EngineRow]:
    """Part 4 (module docstring); returns no rows, saying why, where TensorRT is absent."""
    from builder.engines.tensorrt.probe import missing

    reason = missing()
    if reason is not None:
        print(f"TensorRT engines: skipped ({reason}); the Triton kernel rows above ran without it.")
        return []
    from builder.engines.ort.load import open_engine as open_ort
    from builder.engines.tensorrt.folder import open_engine as open_trt
    from builder.speculative.decoding import generate
    from builder.stages.decoders import load_tokenizer

    root = Path(__file__).resolve().parents[2] / "recipes"
    recipes = sorted(root.glob("tiny-llama3*.yaml")) if names == "all" else [root / n for n in names.split(",")]
    rows = []
    for recipe in recipes:
        t0 = time.time()
        ort_dir = _build(recipe, cache)
        trt_dir = _build(recipe, cache, f"target.device={device}", "target.backend=tensorrt")
        build_s = time.time() - t0
        ort, trt = open_ort(ort_dir), open_trt(trt_dir)
        tok = load_tokenizer(ort.tokenizer_path)
        differ, first, tokens, tau = 0, "", 0, {"trt": [], "ort": []}
        for i, text in enumerate(PROMPTS[:n_prompts]):
            ids = tok.encode(text).ids
            got = generate(trt.engine, ids, n_tokens, trt.make_drafter(), stop_ids=trt.stop_ids)
            want = generate(ort.engine, ids, n_tokens, ort.make_drafter(), stop_ids=ort.stop_ids)
            tokens += len(got.token_ids)
            tau["trt"].append(got.tau)
            tau["ort"].append(want.tau)
            if got.token_ids != want.token_ids:
                differ += 1
                j = next((k for k, (a, b) in enumerate(zip(got.token_ids, want.token_ids)) if a != b),
                         min(len(got.token_ids), len(want.token_ids)))  # fmt: skip
                first = first or (f"prompt {i}, token {j}: trt {got.token_ids[j:j + 1]} vs ort "
                                  f"{want.token_ids[j:j + 1]}")  # fmt: skip
        rows.append(EngineRow(recipe.name, trt.label, min(n_prompts, len(PROMPTS)), tokens, differ, first,
                              sum(tau["trt"]) / len(tau["trt"]), sum(tau["ort"]) / len(tau["ort"]), build_s))  # fmt: skip
    return rows


def engine_table(rows: list[EngineRow]) -> str:
    head = f"{'recipe':28} {'drafter':22} {'prompts':>7} {'tokens':>6} {'differ':>6} {'τ trt':>6} {'τ ort':>6} {'build s':>8}"
    lines = ["TensorRT engines vs ONNX Runtime (greedy, token for token)", head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r.recipe:28} {r.drafter:22} {r.prompts:>7} {r.tokens:>6} {r.differ:>6} {r.tau_trt:>6.2f} "
                     f"{r.tau_ort:>6.2f} {r.build_s:>8.0f}" + (f"  first: {r.first_difference}" if r.differ else ""))  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
