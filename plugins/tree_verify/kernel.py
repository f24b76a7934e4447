"""OpenAI Triton kernel for `tree_verify`: the fast face (GPU; CPU tensors under TRITON_INTERPRET=1).

Contract: `plugins/tree_verify/contract.py`; reference: `plugins/tree_verify/reference.py` (same algorithm,
same mass-unit formulation, fp32 here instead of fp64). Three launches:

1. `_partials_kernel`, grid (B·T, S): each program streams one chunk of V of one node's logits in
   BLOCK_V blocks and keeps the running max, argmax (lowest index) and, in rejection mode, the sum
   of w = exp((x − max) / temperature) (online rescaling). S chunks per node fill the GPU at B = 1.
2. `_node_stats_kernel`, grid (B·T): combines the S partials. In rejection mode with top_p < 1 it
   finds the nucleus threshold τ = the largest w with Σ_{w' ≥ τ} w' ≥ top_p · Σ w by a 16-ary
   search on the float bits of τ (8 passes over the row, 15 thresholds each; on a GPU mostly served
   from L2) and the nucleus mass R.
3. `_verify_kernel`, grid (B): program b reads its own sequence's tree, paths[b] (a batch stride of
   0 serves one tree shared by the batch without a copy); greedy path acceptance vectorised over
   paths; in rejection mode the reference's walk down the tree (t = u · R, accept child c iff
   t < w(tok c) / q(c), else t −= …), then the bonus token by inverse CDF over the last node's
   residual; writes the three outputs.
Only the logits are big: one read of B·T·V elements (plus the top-p search's 8 re-reads when
top_p < 1, and one more read of one row per sequence for the bonus token).

Index inputs are untrusted (TensorRT times the plugin on made-up inputs): every value used as an address
— a path entry, a node's token — is range-checked first and read as `contract.py`'s "Untrusted index
inputs" says (a path entry outside [1, T) ends its row, column 0 is the root, a token outside [0, V) is
never accepted), and the node argmax is clamped to [0, V) so a NaN row cannot leak an out-of-range id.
Each program tracks `holds`, the paths whose prefix is the accepted chain, so best_path is always one of
them. `tests/unit/test_plugin_kernel.py` runs garbage inputs under an interpreter that checks every
address the kernels touch.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from plugins.tree_verify.contract import TEMPERATURE_EPS, Mode, bind_dims, check_dtypes
from plugins.tree_verify.reference import VerifyResult

_EPS = tl.constexpr(TEMPERATURE_EPS)
_LOG2E = tl.constexpr(1.4426950408889634)
_BIG = tl.constexpr(2**30)
_TAU_HI = tl.constexpr(0x3F800001)  # float bits just above 1.0 = the largest w
_ARITY = tl.constexpr(16)  # thresholds per pass of the top-p search
_SEARCH_PASSES = tl.constexpr(8)  # 16**8 > 2**30 > _TAU_HI: the search ends on adjacent floats


@triton.jit
def _partials_kernel(
    logits_ptr, temperature_ptr, pmax_ptr, parg_ptr, psum_ptr, T, V, chunk, SAMPLE: tl.constexpr, BLOCK_V: tl.constexpr
):
    row = tl.program_id(0)  # b * T + node
    part = tl.program_id(1)
    split = tl.num_programs(1)
    start = part * chunk
    stop = tl.minimum(start + chunk, V)
    base = logits_ptr + row.to(tl.int64) * V
    scale = _LOG2E / tl.maximum(tl.load(temperature_ptr + row // T), _EPS)
    offs = tl.arange(0, BLOCK_V)
    m = tl.full([], float("-inf"), tl.float32)
    arg = tl.full([], 0, tl.int32)
    z = tl.zeros([], tl.float32)
    for v0 in range(start, stop, BLOCK_V):
        idx = v0 + offs
        x = tl.load(base + idx, mask=idx < stop, other=float("-inf")).to(tl.float32)  # [BLOCK_V]
        bm = tl.max(x, 0)
        arg = tl.where(bm > m, v0 + tl.argmax(x, 0), arg)  # strict: an earlier block keeps a tie
        if SAMPLE:
            new = tl.maximum(m, bm)
            safe = tl.where(new == float("-inf"), 0.0, new)
            z = z * tl.exp2((m - safe) * scale) + tl.sum(tl.exp2((x - safe) * scale), 0)
        m = tl.maximum(m, bm)
    tl.store(pmax_ptr + row * split + part, m)
    tl.store(parg_ptr + row * split + part, arg)
    tl.store(psum_ptr + row * split + part, z)


@triton.jit
def _masses_at_least(base, V, m, scale, taus, BLOCK_V: tl.constexpr):
    # [K]: for each threshold taus[j], Σ w over the tokens with w = exp2((x − m) · scale) ≥ taus[j]
    offs = tl.arange(0, BLOCK_V)
    total = tl.zeros(taus.shape, tl.float32)
    for v0 in range(0, V, BLOCK_V):
        idx = v0 + offs
        x = tl.load(base + idx, mask=idx < V, other=float("-inf")).to(tl.float32)
        w = tl.exp2((x - m) * scale)[:, None]  # [BLOCK_V, 1]
        total += tl.sum(tl.where(w >= taus[None, :], w, 0.0), 0)
    return total


@triton.jit
def _node_stats_kernel(
    logits_ptr,
    temperature_ptr,
    top_p_ptr,
    pmax_ptr,
    parg_ptr,
    psum_ptr,
    node_max_ptr,
    node_arg_ptr,
    node_tau_ptr,
    node_mass_ptr,
    T,
    V,
    split,
    SAMPLE: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_S: tl.constexpr,
):
    row = tl.program_id(0)
    s = tl.arange(0, BLOCK_S)
    pm = tl.load(pmax_ptr + row * split + s, mask=s < split, other=float("-inf"))  # [BLOCK_S]
    pa = tl.load(parg_ptr + row * split + s, mask=s < split, other=_BIG)
    m = tl.max(pm, 0)
    arg = tl.min(tl.where(pm == m, pa, _BIG), 0)  # chunks are in id order
    tl.store(node_arg_ptr + row, tl.minimum(arg, V - 1))  # a NaN row matches no chunk: keep the id in [0, V)
    if SAMPLE:
        temperature = tl.load(temperature_ptr + row // T)
        top_p = tl.load(top_p_ptr + row // T)
        scale = _LOG2E / tl.maximum(temperature, _EPS)
        ps = tl.load(psum_ptr + row * split + s, mask=s < split, other=0.0)
        z = tl.sum(ps * tl.exp2((pm - m) * scale), 0)
        # k-ary search on the float bits of τ: each pass tests K − 1 thresholds between lo and hi
        # (invariant: mass(w ≥ lo) ≥ top_p · z > mass(w ≥ hi)); 16-ary needs 8 passes for 2**30
        lo = tl.full([], 0, tl.int32)
        hi = tl.full([], _TAU_HI, tl.int32)
        mass = z
        j = tl.arange(0, _ARITY)
        rounds = tl.where((top_p < 1.0) & (temperature > _EPS), _SEARCH_PASSES, 0)
        for _ in range(rounds):
            step = (hi - lo + _ARITY - 1) // _ARITY
            taus = tl.minimum(lo + (j + 1) * step, hi)  # [K]; the last one (= hi) is never ok
            f = _masses_at_least(
                logits_ptr + row.to(tl.int64) * V, V, m, scale, taus.to(tl.float32, bitcast=True), BLOCK_V
            )
            ok = (f >= top_p * z) & (taus < hi)  # a prefix of j: mass falls as τ rises
            n_ok = tl.sum(ok.to(tl.int32), 0)
            hi = tl.sum(tl.where(j == n_ok, taus, 0), 0)
            lo = tl.where(n_ok > 0, tl.sum(tl.where(j == n_ok - 1, taus, 0), 0), lo)
            mass = tl.where(n_ok > 0, tl.sum(tl.where(j == n_ok - 1, f, 0.0), 0), mass)
        tl.store(node_max_ptr + row, m)
        tl.store(node_tau_ptr + row, lo.to(tl.float32, bitcast=True))
        tl.store(node_mass_ptr + row, mass)


@triton.jit
def _children(paths_ptr, holds, depth, T, W, BLOCK_P: tl.constexpr):
    # [BLOCK_P]: the entry after `depth` of each path holding the chain, and whether it is a child (in [1, T))
    p = tl.arange(0, BLOCK_P)
    kid = tl.load(paths_ptr + p * W + depth + 1, mask=holds & (p * 0 + depth + 1 < W), other=-1)
    return kid, holds & (kid > 0) & (kid < T)


@triton.jit
def _bonus_token(
    logits_ptr,
    tokens_ptr,
    paths_ptr,
    node_max_ptr,
    node_tau_ptr,
    node_arg_ptr,
    holds,
    b,
    node,
    depth,
    t,
    scale,
    T,
    V,
    P,
    W,
    BLOCK_P: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    # inverse CDF over the node's residual: nucleus minus its children's (rejected) tokens
    row = b * T + node
    m = tl.load(node_max_ptr + row)
    tau = tl.load(node_tau_ptr + row)
    p = tl.arange(0, BLOCK_P)
    kid, cand = _children(paths_ptr, holds, depth, T, W, BLOCK_P)
    gone = tl.load(tokens_ptr + b * T + kid, mask=cand, other=-1)  # [BLOCK_P]
    gone = tl.where((gone >= 0) & (gone < V), gone, -1)  # a token outside the vocabulary removes nothing
    offs = tl.arange(0, BLOCK_V)
    run = tl.zeros([], tl.float32)
    found = tl.full([], -1, tl.int32)
    last = tl.full([], -1, tl.int32)
    v0 = tl.full([], 0, tl.int32)
    while (v0 < V) & (found < 0):
        idx = v0 + offs
        x = tl.load(logits_ptr + row.to(tl.int64) * V + idx, mask=idx < V, other=float("-inf")).to(tl.float32)
        w = tl.exp2((x - m) * scale)
        w = tl.where(w >= tau, w, 0.0)
        here = (gone >= v0) & (gone < v0 + BLOCK_V)  # [BLOCK_P] removed tokens in this block (rare)
        if tl.sum(here.to(tl.int32), 0) > 0:
            for j in range(P):
                w = tl.where(idx == tl.max(tl.where((p == j) & here, gone, -1), 0), 0.0, w)
        cdf = tl.cumsum(w, 0) + run
        first = tl.min(tl.where(cdf > t, idx, _BIG), 0)
        found = tl.where(first < _BIG, first, found)
        last = tl.maximum(last, tl.max(tl.where(w > 0, idx, -1), 0))
        run += tl.sum(w, 0)
        v0 += BLOCK_V
    fallback = tl.where(last >= 0, last, tl.load(node_arg_ptr + row))  # rounding fallbacks
    return tl.where(found >= 0, found, fallback)


@triton.jit
def _candidate_test(logits_ptr, tokens_ptr, q_ptr, b, row, c, kid, kid_tok, cand, m, tau, scale, T, V):
    # a = w(tok c) / q(c) at the current node (c in [1, T)); 0 if an earlier (rejected) sibling drafted the
    # same token or the token lies outside [0, V)
    c_tok = tl.load(tokens_ptr + b * T + c)
    known = (c_tok >= 0) & (c_tok < V)
    repeat = tl.max(tl.where(cand & (kid < c) & (kid_tok == c_tok), 1, 0), 0)
    x = tl.load(logits_ptr + row.to(tl.int64) * V + c_tok, mask=known, other=float("-inf")).to(tl.float32)
    w = tl.exp2((x - m) * scale)
    w = tl.where(known & (w >= tau) & (repeat == 0), w, 0.0)
    return w / tl.load(q_ptr + b * T + c)


@triton.jit
def _walk(
    logits_ptr,
    tokens_ptr,
    paths_ptr,
    uniforms_ptr,
    q_ptr,
    node_max_ptr,
    node_tau_ptr,
    node_mass_ptr,
    node_arg_ptr,
    b,
    scale,
    T,
    V,
    P,
    W,
    BLOCK_P: tl.constexpr,
    BLOCK_W: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    # rejection mode: the reference's walk in mass units; returns (accepted_len, best_path, bonus)
    p = tl.arange(0, BLOCK_P)
    holds = p < P  # [BLOCK_P] paths whose prefix is the accepted chain (column 0 is the root); never empty
    node = tl.full([], 0, tl.int32)
    stop = tl.full([], -1, tl.int32)  # depth of the node that emits the bonus token
    t_stop = tl.zeros([], tl.float32)
    for k in range(0, W):
        if stop < 0:
            row = b * T + node
            m = tl.load(node_max_ptr + row)
            tau = tl.load(node_tau_ptr + row)
            t = tl.load(uniforms_ptr + b * W + k) * tl.load(node_mass_ptr + row)
            kid, cand = _children(paths_ptr, holds, k, T, W, BLOCK_P)  # children of node (repeated per path)
            kid_tok = tl.load(tokens_ptr + b * T + kid, mask=cand, other=-1)
            accepted = tl.full([], -1, tl.int32)
            last = tl.full([], -1, tl.int32)
            for _ in range(tl.sum(cand.to(tl.int32), 0)):  # children in node order (≤ this many)
                c = tl.min(tl.where(cand & (kid > last), kid, _BIG), 0)
                if (c < _BIG) & (accepted < 0):
                    a = _candidate_test(
                        logits_ptr, tokens_ptr, q_ptr, b, row, c, kid, kid_tok, cand, m, tau, scale, T, V
                    )
                    take = (a > 0) & (t < a)  # (a > 0: with t ≥ 0 the same test; keeps garbage uniforms out)
                    accepted = tl.where(take, c, accepted)
                    t = tl.where(take, t, t - a)
                    last = c
            if accepted >= 0:
                holds = holds & (kid == accepted)
                node = accepted
            else:
                stop = k
                t_stop = t
    bonus = _bonus_token(
        logits_ptr,
        tokens_ptr,
        paths_ptr,
        node_max_ptr,
        node_tau_ptr,
        node_arg_ptr,
        holds,
        b,
        node,
        stop,
        t_stop,
        scale,
        T,
        V,
        P,
        W,
        BLOCK_P,
        BLOCK_V,
    )
    return stop + 1, tl.min(tl.where(holds, p, _BIG), 0), bonus


@triton.jit
def _verify_kernel(
    logits_ptr,
    tokens_ptr,
    paths_ptr,
    temperature_ptr,
    uniforms_ptr,
    q_ptr,
    node_max_ptr,
    node_arg_ptr,
    node_tau_ptr,
    node_mass_ptr,
    len_ptr,
    best_ptr,
    out_ptr,
    T,
    V,
    P,
    W,
    paths_stride,
    SAMPLE: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_W: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    b = tl.program_id(0)
    paths_ptr += b.to(tl.int64) * paths_stride  # this sequence's tree [P, W]; stride 0: shared by the batch
    p = tl.arange(0, BLOCK_P)
    alive = p < P  # greedy: per path, all nodes so far equal the argmax at their parent
    length = tl.zeros([BLOCK_P], tl.int32)
    tip = tl.zeros([BLOCK_P], tl.int32)  # per path, its last accepted node (the root 0 to begin with)
    for k in range(1, W):
        node = tl.load(paths_ptr + p * W + k, mask=alive, other=-1)
        alive = alive & (node > 0) & (node < T)  # an entry outside [1, T) ends the path (and -1 padding)
        tok = tl.load(tokens_ptr + b * T + node, mask=alive, other=-1)
        alive = alive & (tok == tl.load(node_arg_ptr + b * T + tip, mask=alive, other=-2))  # argmax ∈ [0, V)
        tip = tl.where(alive, node, tip)
        length += alive.to(tl.int32)
    most = tl.max(tl.where(p < P, length, -1), 0)
    best = tl.min(tl.where((p < P) & (length == most), p, _BIG), 0)
    n_acc = most + 1
    bonus = tl.load(node_arg_ptr + b * T + tl.sum(tl.where(p == best, tip, 0), 0))
    if SAMPLE:
        temperature = tl.load(temperature_ptr + b)
        if temperature > _EPS:
            n_acc, best, bonus = _walk(
                logits_ptr,
                tokens_ptr,
                paths_ptr,
                uniforms_ptr,
                q_ptr,
                node_max_ptr,
                node_tau_ptr,
                node_mass_ptr,
                node_arg_ptr,
                b,
                _LOG2E / temperature,
                T,
                V,
                P,
                W,
                BLOCK_P,
                BLOCK_W,
                BLOCK_V,
            )
    d = tl.arange(0, BLOCK_W)
    draft = d < n_acc - 1  # output slot d holds the token of chain node d + 1 = paths[best, d + 1]
    nxt = tl.load(paths_ptr + best * W + d + 1, mask=draft, other=0)  # accepted nodes: in [1, T)
    tok = tl.load(tokens_ptr + b * T + nxt, mask=draft & (nxt > 0) & (nxt < T), other=-1)
    tl.store(out_ptr + b * W + d, tl.where(draft, tok, tl.where(d == n_acc - 1, bonus, -1)), mask=d < W)
    tl.store(len_ptr + b, n_acc)
    tl.store(best_ptr + b, best)


def tree_verify_triton(
    logits: torch.Tensor,  # [B, T, V] fp32 | bf16 | fp16
    tokens: torch.Tensor,  # [B, T] int32
    paths: torch.Tensor,  # [B, P, D+1] int32; any batch stride (0: one tree expanded over the batch)
    mode: Mode | int | str = Mode.GREEDY,
    temperature: torch.Tensor | None = None,  # [B] fp32
    top_p: torch.Tensor | None = None,  # [B] fp32
    uniforms: torch.Tensor | None = None,  # [B, D+1] fp32
    draft_probs: torch.Tensor | None = None,  # [B, T] fp32
    *,
    out: VerifyResult | None = None,  # preallocated int32 outputs (the TensorRT plugin's buffers)
    block_v: int | None = None,
    split: int | None = None,
) -> VerifyResult:
    """Launch the three kernels on logits' device (and torch's current stream). Index inputs are not
    trusted: out-of-contract paths and tokens read as `contract.py`'s "Untrusted index inputs" says (the
    reference's `untrusted=True`); validate them with `contract.check_paths` where a violation is a bug."""
    mode = Mode.parse(mode)
    b, t, v = logits.shape
    w = paths.shape[-1]  # D+1
    dev = logits.device
    temperature = torch.zeros(b, device=dev) if temperature is None else temperature
    top_p = torch.ones(b, device=dev) if top_p is None else top_p
    uniforms = torch.zeros(b, w, device=dev) if uniforms is None else uniforms
    draft_probs = torch.ones(b, t, device=dev) if draft_probs is None else draft_probs
    named = dict(
        logits=logits,
        tokens=tokens,
        paths=paths,
        temperature=temperature,
        top_p=top_p,
        uniforms=uniforms,
        draft_probs=draft_probs,
    )
    bind_dims({k: x.shape for k, x in named.items()})
    check_dtypes({k: str(x.dtype).removeprefix("torch.") for k, x in named.items()})
    p = paths.shape[1]
    if not paths[:1].is_contiguous():  # each tree [P, D+1] row-major; the batch stride may be anything
        paths = paths.contiguous()
    del named["paths"]
    logits, tokens, temperature, top_p, uniforms, draft_probs = (x.contiguous() for x in named.values())
    if out is None:
        out = VerifyResult(
            torch.empty(b, dtype=torch.int32, device=dev),
            torch.empty(b, dtype=torch.int32, device=dev),
            torch.empty(b, w, dtype=torch.int32, device=dev),
        )
    block_v = block_v or min(2048 if dev.type == "cuda" else 256, triton.next_power_of_2(v))
    blocks = triton.cdiv(v, block_v)
    if split is None:
        sms = torch.cuda.get_device_properties(dev).multi_processor_count if dev.type == "cuda" else 1
        split = max(1, min(blocks, triton.cdiv(2 * sms, b * t)))
    chunk = triton.cdiv(blocks, split) * block_v
    split = triton.cdiv(v, chunk)
    sample = mode is Mode.REJECTION
    pmax = torch.empty(b * t, split, dtype=torch.float32, device=dev)  # per (node, chunk) partials
    psum = torch.empty(b * t, split, dtype=torch.float32, device=dev)
    parg = torch.empty(b * t, split, dtype=torch.int32, device=dev)
    node_max, node_tau, node_mass = (torch.zeros(b * t, dtype=torch.float32, device=dev) for _ in range(3))
    node_arg = torch.empty(b * t, dtype=torch.int32, device=dev)
    _partials_kernel[(b * t, split)](logits, temperature, pmax, parg, psum, t, v, chunk, SAMPLE=sample, BLOCK_V=block_v)
    _node_stats_kernel[(b * t,)](
        logits,
        temperature,
        top_p,
        pmax,
        parg,
        psum,
        node_max,
        node_arg,
        node_tau,
        node_mass,
        t,
        v,
        split,
        SAMPLE=sample,
        BLOCK_V=min(block_v, 256),
        BLOCK_S=triton.next_power_of_2(split),
    )
    _verify_kernel[(b,)](
        logits,
        tokens,
        paths,
        temperature,
        uniforms,
        draft_probs,
        node_max,
        node_arg,
        node_tau,
        node_mass,
        out.accepted_len,
        out.best_path,
        out.output_tokens,
        t,
        v,
        p,
        w,
        paths.stride(0),
        SAMPLE=sample,
        BLOCK_P=triton.next_power_of_2(p),
        BLOCK_W=triton.next_power_of_2(w),
        BLOCK_V=min(block_v, 1024),
    )
    return out
