"""Tree verification — the readable torch reference of the `tree_verify` contract.

The contract (inputs, outputs, dtypes, edge cases) is `plugins/tree_verify/contract.py`; every
other face (Triton kernel, ONNX op, TensorRT plugin) is tested against `tree_verify` below.
Words as in the glossary (`builder.speculative`). Each sequence b of the batch has its own tree,
paths[b]; everything below is per sequence.

Greedy: a path is accepted as far as its nodes' tokens equal the target argmax at their parent;
the longest accepted prefix over all paths wins (ties: lowest path index); the bonus token is the
argmax at the last accepted node. Greedy speculative output therefore equals plain greedy decoding.

Rejection: at the current node n (depth k, uniform t = uniforms[k]) the children of n are tested in
node order against the target distribution p_n (temperature, then top-p, renormalised):
    accept child c  if t < a = p_n(tok c) / q(c);   else  t -= a  and p_n(tok c) = 0.
An accepted child becomes the current node; when no child is accepted (or n is a leaf) the bonus
token is drawn from the residual p_n by inverse CDF with what is left of t. t stays in probability
mass units: "t -= a, zero the token" is the textbook "u ← (u − a')/(1 − a'), p ← normalize(max(p −
q·δ_c, 0))" multiplied through by the residual's mass (a rejected c has p(c) < q(c), so the max
simply zeroes it). It needs no division by a mass that rounding can drive to 0.

Why the output follows the target distribution (deterministic drafters, q = 1):
1. Each uniform is used once: uniforms[k] only at the depth-k node of the accepted chain, so it is
   independent of everything that led to that node.
2. At node n lay [0, 1) out as consecutive segments of length p_n(tok c_1), p_n(tok c_2), … for the
   children in node order (a token repeated by a later sibling was zeroed: length 0), then every
   remaining token in id order. "Accept c_j iff t < a_j, else t -= a_j" walks these segments and
   stops in the one holding the uniform, and the bonus inverse CDF continues the same walk. So the
   token emitted after n — an accepted child's token or the bonus token — is one exact draw from
   p_n, using one uniform.
3. An accepted child's logits are the target's conditional given the chain through it (tree
   attention), so 2. repeats there with a fresh uniform. By induction the emitted tokens y_1..y_L
   have probability Π p(y_k | y_<k): L autoregressive target samples. Where the chain stops depends
   only on tokens already drawn, which (as in all speculative decoding) leaves each prefix's law
   unchanged.
A stochastic drafter that drew c from Q passes q(c) = Q(c): the test accepts with min(1, p/q) as in
speculative sampling, but exactness would need the residual max(p − Q, 0) over the whole of Q,
which the contract does not carry. With q < 1 the output is therefore only approximately the
target's (one child, p = (.2, .3, .5), Q = (.5, .4, .1) emits (.229, .413, .359)). Deterministic
drafters — Medusa and EAGLE top-k trees, Lookahead n-grams — must pass q = 1: the probability that
the drafter proposes that token, not the draft head's softmax probability.

temperature ≤ TEMPERATURE_EPS verifies that row greedily (the limit T → 0 of the above when the
siblings' tokens are distinct).

The children of the current node are the next entries of the rows whose prefix is the accepted chain
(with one parent per node — the contract — exactly the node's children). That reading also gives
`untrusted=True` its meaning: out-of-contract index inputs read as `contract.py`'s "Untrusted index
inputs" says (what the Triton kernel, hence the TensorRT plugin, does) instead of raising.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from plugins.tree_verify.contract import TEMPERATURE_EPS, Mode, bind_dims, check_paths, sanitize_paths


class VerifyResult(NamedTuple):
    accepted_len: torch.Tensor  # [B] int32, tokens emitted incl. the bonus token (≥ 1)
    best_path: torch.Tensor  # [B] int32, lowest path index holding the accepted chain
    output_tokens: torch.Tensor  # [B, D+1] int32, accepted tokens, bonus token, -1 padding


def tree_verify(
    logits: torch.Tensor,  # [B, T, V] fp32 | bf16 | fp16
    tokens: torch.Tensor,  # [B, T] int; node 0 = root
    paths: torch.Tensor,  # [B, P, D+1] int; one tree per sequence, root-first, -1 padded
    mode: Mode | int | str = Mode.GREEDY,
    temperature: torch.Tensor | None = None,  # [B] fp32 (rejection mode)
    top_p: torch.Tensor | None = None,  # [B] fp32 (rejection mode; None = 1)
    uniforms: torch.Tensor | None = None,  # [B, D+1] fp32 in [0, 1) (rejection mode)
    draft_probs: torch.Tensor | None = None,  # [B, T] fp32 in (0, 1]; None = 1 (deterministic)
    *,
    untrusted: bool = False,
) -> VerifyResult:
    """Verify each sequence's tree (paths[b]) against its logits; see the module docstring. Paths and path
    nodes' tokens outside the contract raise ValueError, or with `untrusted` read as the contract's
    "Untrusted index inputs" says (the floats must still be in range)."""
    mode = Mode.parse(mode)
    b, t, v = logits.shape
    width = int(paths.shape[-1])  # D+1
    if mode is Mode.REJECTION and (temperature is None or uniforms is None):
        raise ValueError("rejection mode needs temperature [B] and uniforms [B, D+1]")
    temperature = torch.zeros(b) if temperature is None else temperature
    top_p = torch.ones(b) if top_p is None else top_p
    uniforms = torch.zeros(b, width) if uniforms is None else uniforms
    draft_probs = torch.ones(b, t) if draft_probs is None else draft_probs
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
    trees = paths.tolist()  # [B][P][D+1]
    if untrusted:
        trees = sanitize_paths(trees, t)
    else:
        check_paths(trees, t)
    if not bool(((uniforms >= 0) & (uniforms < 1)).all()) or not bool((draft_probs > 0).all()):
        raise ValueError("uniforms must lie in [0, 1) and draft_probs in (0, 1]")
    out = VerifyResult(
        torch.ones(b, dtype=torch.int32),
        torch.zeros(b, dtype=torch.int32),
        torch.full((b, width), -1, dtype=torch.int32),
    )
    for i, rows in enumerate(trees):
        tok = tokens[i].tolist()
        drafted = sorted({n for row in rows for n in row[1:] if n >= 0})
        if not untrusted and any(not 0 <= tok[n] < v for n in drafted):
            raise ValueError(f"tokens[{i}]: a node on a path has a token outside [0, {v})")
        if mode is Mode.GREEDY or float(temperature[i]) <= TEMPERATURE_EPS:
            chain, bonus = _greedy(logits[i], tok, rows)
        else:
            sampling = (float(temperature[i]), float(top_p[i]), uniforms[i].tolist())
            chain, bonus = _rejection(logits[i], tok, draft_probs[i].tolist(), rows, sampling)
        out.accepted_len[i] = len(chain)
        out.best_path[i] = next(p for p, row in enumerate(rows) if row[: len(chain)] == chain)
        out.output_tokens[i, : len(chain)] = torch.tensor([tok[n] for n in chain[1:]] + [bonus])
    return out


def _greedy(logits: torch.Tensor, tok: list[int], rows: list[list[int]]) -> tuple[list[int], int]:
    # logits [T, V]; returns the accepted chain (root first) and the bonus token
    target = logits.float().argmax(dim=-1).tolist()  # [T]; first maximal index on ties
    best = [0]
    for row in rows:
        chain = [0]
        for node in row[1:]:
            if node < 0 or tok[node] != target[chain[-1]]:
                break
            chain.append(node)
        if len(chain) > len(best):  # strict: equal lengths keep the lowest path index
            best = chain
    return best, target[best[-1]]


def _target_probs(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    # logits [T, V] -> p [T, V] float64: softmax(logits / temperature) on the top-p nucleus, renormalised
    z = logits.double() / temperature  # [T, V]
    p = (z - z.amax(dim=-1, keepdim=True)).exp()  # (torch.softmax is as exact; this avoids a slow
    p = p / p.sum(dim=-1, keepdim=True)  # small-tensor CPU kernel: ms under thread contention)
    if top_p < 1:
        ranked = p.sort(dim=-1, descending=True).values  # [T, V]
        before = ranked.cumsum(-1) - ranked  # mass ranked ahead of each token
        kept = (before < top_p).sum(-1, keepdim=True).clamp(min=1)  # [T, 1]
        p = torch.where(p >= ranked.gather(-1, kept - 1), p, 0.0)  # ties with the last kept token stay
        p = p / p.sum(-1, keepdim=True)
    return p


def _children(rows: list[list[int]], chain: list[int]) -> list[int]:
    # one sequence's paths [P][D+1]: the next entries of the rows that hold the chain, in node order
    k = len(chain)
    return sorted({row[k] for row in rows if row[:k] == chain and len(row) > k and row[k] >= 0})


def _rejection(
    logits: torch.Tensor,
    tok: list[int],
    q: list[float],
    rows: list[list[int]],
    sampling: tuple[float, float, list[float]],
) -> tuple[list[int], int]:
    # logits [T, V]; sampling = (temperature, top_p, uniforms [D+1]); returns chain and bonus token
    temperature, top_p, u = sampling
    probs = _target_probs(logits, temperature, top_p)  # [T, V]
    vocab = probs.shape[-1]
    chain = [0]
    while True:
        p = probs[chain[-1]].clone()  # [V] the residual at the current node
        t = u[len(chain) - 1]  # the uniform of this node's depth
        for child in _children(rows, chain):
            known = 0 <= tok[child] < vocab  # (untrusted) a token outside the vocabulary has probability 0
            a = float(p[tok[child]]) / q[child] if known else 0.0
            if t < a:
                chain.append(child)
                break
            t -= a
            if known:
                p[tok[child]] = 0.0
        else:
            return chain, _inverse_cdf(p, t, fallback=int(logits[chain[-1]].float().argmax()))


def _inverse_cdf(p: torch.Tensor, t: float, fallback: int) -> int:
    # p [V] residual mass: the first token whose cumulative mass exceeds t. Rounding fallbacks
    # (unreachable in exact arithmetic): the last token with mass, then the node's argmax.
    hit = (p.cumsum(0) > t).nonzero()
    if len(hit):
        return int(hit[0])
    left = p.nonzero()
    return int(left[-1]) if len(left) else fallback
