"""The tree_verify Triton kernel on a GPU: correctness at the full Llama 3 vocabulary, the bandwidth goal, and
arbitrary index inputs (steps `kernel`, `kernel-bandwidth`, `kernel-garbage-indices`; needs CUDA torch + triton).

`kernel`: the kernel against the reference at T = 64 (the Medusa tree mc_sim_7b_63, shared by the batch as a
stride-0 expanded paths tensor), V = 128256, B = 1..16, greedy and rejection (top_p = 1: one pass over the
logits; mixed top_p: the top-p search re-reads rows), bf16 logits (fp16 and fp32 at the smallest and largest B,
greedy); and with one tree per sequence ("own trees": the first n_b <= 64 nodes of that tree per sequence,
padded to T = 64), both modes. Each call is timed with triton.testing.do_bench against the bytes it must move
(the logits, B·T·V·bytes, plus the small inputs/outputs) and the device's measured copy bandwidth (a 1 GiB
device-to-device copy: read + write). FAIL: a row that differs from the reference other than at a near-tie
(`devtools.verify_cases.compare`).

`kernel-bandwidth`: the goal of plugins/tree_verify/README.md ("Bytes moved and the bandwidth floor") — at
least 80 % of the measured copy bandwidth at B = 16 with bf16 logits, greedy and rejection with top_p = 1
(the cases that read the logits once; at B = 1 three launches of a few µs exceed the 3-5 µs floor, and mixed
top_p re-reads rows by design, so neither is held to it).

`kernel-garbage-indices`: TensorRT runs a plugin on made-up inputs while it times tactics (issue 36, item 5b),
so the kernel is fed arbitrary int32 tokens and paths and NaN / ±inf logits; PASS when no CUDA fault follows
(the context still allocates and synchronises) — whatever the outputs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from builder.speculative.choices import load_choices
from builder.speculative.tree import tree_from_choices
from devtools.gpu_check.steps import FAIL, PASS, Context, Verdict
from devtools.verify_cases import Case, compare, random_case
from plugins.tree_verify.contract import Mode
from plugins.tree_verify.reference import VerifyResult

TREE = "mc_sim_7b_63"  # 63 Medusa choices + root = 64 nodes
VOCAB = 128256
BATCHES = (1, 2, 4, 8, 16)
GOAL_OF_COPY = 0.80  # plugins/tree_verify/README.md, "Bytes moved and the bandwidth floor"
GOAL_BATCH = 16


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
    return float(2 * nbytes / ms / 1e6)


def make_case(mode: Mode, batch: int, vocab: int, dtype: torch.dtype, top_p_one: bool, own_trees: bool = False) -> Case:
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
    """Compare one call with the reference, then time it (do_bench: 25 warm-up, 200 ms timed)."""
    import triton.testing

    from plugins.tree_verify.kernel import tree_verify_triton

    def run() -> VerifyResult:
        return tree_verify_triton(
            case.logits,
            case.tokens,
            case.paths,
            case.mode,
            case.temperature,
            case.top_p,
            case.uniforms,
            case.draft_probs,
        )

    result = compare(case, run())
    ms = triton.testing.do_bench(run, warmup=25, rep=200)
    b, t, v = case.logits.shape
    moved = bytes_moved(b, t, v, case.logits.element_size(), case.paths.shape[2], case.paths.shape[1])
    gbps = moved / ms / 1e6
    return Row(
        "triton",
        label,
        str(case.logits.dtype).removeprefix("torch."),
        b,
        ms * 1e3,
        gbps,
        gbps / copy_gbps,
        result.rows - len(result.near_ties) - len(result.wrong),
        len(result.near_ties),
        len(result.wrong),
    )


CONFIGS = (
    (Mode.GREEDY, "greedy", True, False),
    (Mode.REJECTION, "rejection top_p=1", True, False),
    (Mode.REJECTION, "rejection mixed top_p", False, False),
    (Mode.GREEDY, "greedy own trees", True, True),
    (Mode.REJECTION, "rejection own trees", False, True),
)


def table(rows: list[Row], copy_gbps: float) -> str:
    head = (
        f"{'face':9} {'mode':22} {'dtype':9} {'B':>3} {'µs':>9} {'GB/s':>8} {'% copy':>7} "
        f"{'ok':>4} {'near':>5} {'wrong':>5}"
    )
    lines = [
        f"device copy bandwidth: {copy_gbps:.0f} GB/s (goal at B={GOAL_BATCH}: ≥ {GOAL_OF_COPY:.0%} of it)",
        head,
        "-" * len(head),
    ]
    for r in rows:
        lines.append(
            f"{r.face:9} {r.mode:22} {r.dtype:9} {r.batch:>3} {r.us:>9.1f} {r.gbps:>8.0f} "
            f"{100 * r.of_copy:>6.0f}% {r.rows_ok:>4} {r.near_ties:>5} {r.wrong:>5}"
        )
    return "\n".join(lines)


def kernel_rows(vocab: int, batches: tuple[int, ...], copy_gbps: float) -> list[Row]:
    rows: list[Row] = []
    for mode, label, top_p_one, own_trees in CONFIGS:
        full = make_case(mode, max(batches), vocab, torch.bfloat16, top_p_one, own_trees)
        rows += [check_kernel(full.rows(0, b), label, copy_gbps) for b in batches]
        del full
    for dtype in (torch.float16, torch.float32):
        full = make_case(Mode.GREEDY, max(batches), vocab, dtype, True)
        rows += [check_kernel(full.rows(0, b), "greedy", copy_gbps) for b in sorted({min(batches), max(batches)})]
        del full
    return rows


def kernel_step(ctx: Context) -> Verdict:
    vocab = int(ctx.params.get("vocab", VOCAB))
    batches = tuple(int(b) for b in ctx.params.get("batches", BATCHES))
    copy_gbps = copy_bandwidth()
    rows = kernel_rows(vocab, batches, copy_gbps)
    print(table(rows, copy_gbps))
    ok, near, wrong = (sum(getattr(r, k) for r in rows) for k in ("rows_ok", "near_ties", "wrong"))
    details: dict[str, Any] = {"copy_gbps": copy_gbps, "rows": [dataclasses.asdict(r) for r in rows]}
    reason = (
        f"{len(rows)} calls, {ok + near + wrong} sequences: {ok} equal, {near} near-ties, {wrong} wrong "
        f"(T=64, V={vocab}, B={','.join(map(str, batches))})"
    )
    return Verdict(FAIL if wrong else PASS, reason, details)


def bandwidth_step(ctx: Context) -> Verdict:
    vocab = int(ctx.params.get("vocab", VOCAB))
    copy_gbps = copy_bandwidth()
    rows = [
        check_kernel(make_case(mode, GOAL_BATCH, vocab, torch.bfloat16, True), label, copy_gbps)
        for mode, label in ((Mode.GREEDY, "greedy"), (Mode.REJECTION, "rejection top_p=1"))
    ]
    print(table(rows, copy_gbps))
    short = [f"{r.mode} {r.of_copy:.0%}" for r in rows if r.of_copy < GOAL_OF_COPY]
    wrong = [f"{r.mode}: {r.wrong} wrong" for r in rows if r.wrong]
    got = ", ".join(f"{r.mode} {r.gbps:.0f} GB/s = {r.of_copy:.0%}" for r in rows)
    details = {"copy_gbps": copy_gbps, "goal_of_copy": GOAL_OF_COPY, "rows": [dataclasses.asdict(r) for r in rows]}
    if short or wrong:
        return Verdict(
            FAIL,
            f"B={GOAL_BATCH} bf16: {got} of {copy_gbps:.0f} GB/s copy; below the "
            f"{GOAL_OF_COPY:.0%} goal: {', '.join(short + wrong)}",
            details,
        )
    return Verdict(
        PASS, f"B={GOAL_BATCH} bf16: {got} of {copy_gbps:.0f} GB/s copy (goal ≥ {GOAL_OF_COPY:.0%})", details
    )


def garbage_case(mode: Mode, seed: int, device: str = "cuda") -> Case:
    """B = 4, T = 16, V = 1000, D+1 = 5: tokens and paths uniform over all of int32, logits with NaN / ±inf."""
    gen = torch.Generator().manual_seed(seed)
    b, t, v, p, w = 4, 16, 1000, 6, 5
    full = torch.iinfo(torch.int32)
    tokens = torch.randint(full.min, full.max, (b, t), generator=gen, dtype=torch.int32)
    paths = torch.randint(full.min, full.max, (b, p, w), generator=gen, dtype=torch.int32)
    paths[0] = torch.randint(-3, t + 3, (p, w), generator=gen, dtype=torch.int32)  # near the valid range too
    logits = torch.randn(b, t, v, generator=gen)
    logits.view(-1)[torch.randint(0, b * t * v, (64,), generator=gen)] = float("nan")
    logits.view(-1)[torch.randint(0, b * t * v, (64,), generator=gen)] = float("inf")
    logits.view(-1)[torch.randint(0, b * t * v, (64,), generator=gen)] = float("-inf")
    temperature = torch.tensor([0.0, 1.0, -5.0, float("nan")])
    top_p = torch.tensor([1.0, 0.0, 2.0, float("nan")])
    uniforms = torch.rand(b, w, generator=gen) * 3 - 1
    draft_probs = torch.rand(b, t, generator=gen) * 2 - 0.5
    return Case(logits, tokens, paths, mode, temperature, top_p, uniforms, draft_probs).to(device)


def garbage_step(ctx: Context) -> Verdict:
    from plugins.tree_verify.kernel import tree_verify_triton

    outcomes = []
    for mode in Mode:
        for seed in range(3):
            case = garbage_case(mode, seed)
            try:
                out = tree_verify_triton(*case.inputs()[:3], case.mode, *case.inputs()[3:])
                torch.cuda.synchronize()
                outcomes.append(f"{mode.name.lower()}/{seed}: ran, accepted_len {out.accepted_len.tolist()}")
            except (ValueError, IndexError) as refused:  # a host-side refusal before any launch is no fault
                outcomes.append(f"{mode.name.lower()}/{seed}: refused ({type(refused).__name__}: {refused})")
    x = torch.ones(1 << 20, device="cuda")  # the context still works: allocate, compute, synchronise
    alive = float((x * 2).sum())
    torch.cuda.synchronize()
    print("\n".join(outcomes))
    if alive != 2.0 * (1 << 20):
        return Verdict(FAIL, f"the CUDA context computes wrong after the garbage calls ({alive})")
    return Verdict(
        PASS,
        f"{len(outcomes)} calls on arbitrary int32 tokens/paths and NaN/inf logits: no CUDA fault, "
        "context usable afterwards",
        {"outcomes": outcomes},
    )
