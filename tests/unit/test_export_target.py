"""The exported target step graph, run in ONNX Runtime, against the torch reference (float64).

A scenario: batched prefill of prompts of different lengths (right-padded), then steps with a random
tree per row (own node count, own shape, padding), rows at different past lengths. After each call,
per row: `hidden` and the cache contents against the reference run over the whole sequence (committed
tokens + the new nodes with the tree mask); `node_argmax`, TreeVerify's outputs and `medusa_topk`
against the reference's logits (exact unless at a near-tie, see the harness). The test commits the
accepted chain in the ORT caches itself (a gather, as the engine will), so later steps check it too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from builder.errors import UserError
from builder.export.target import export_target
from builder.speculative.medusa.heads import MedusaHeads
from devtools.verify_cases import Case, compare
from plugins.tree_verify.contract import DOMAIN, OP_TYPE, Mode
from plugins.tree_verify.reference import VerifyResult, tree_verify
from tests.unit.step_graph_helpers import prefill_feeds
from tests.unit.test_export_harness import (
    Session,
    ancestors,
    assert_close,
    assert_ranked_like,
    f64,
    leaf_paths,
    pad_paths,
    random_parents,
    randomize,
    reference_pass,
    sequence_mask,
    tiny_target,
)

CAP = 64
CONFIGS = {
    "llama31_untied_d16": dict(scaling=True, tied=False, head_dim=16),
    "plain_tied_d32": dict(scaling=False, tied=True, head_dim=32),
}
VARIANTS = ("standard", "ort")
MEDUSA_K = 4


@dataclass
class Call:
    """One row's part of a call: what the reference needs to recompute it."""

    past: int
    tokens: list[int]  # [T_b] new nodes' tokens
    mask: np.ndarray  # [T_b, T_b] tree mask
    positions: list[int]  # [T_b]
    verify: list[int]  # verify-node index -> node index
    paths: np.ndarray  # [P, W] over verify-node indices (padded as in the batch)


@dataclass
class Scenario:
    model: torch.nn.Module
    mode: str
    sess: Session
    gen: np.random.Generator
    medusa: MedusaHeads | None = None
    seq: list[list[int]] = field(default_factory=list)  # committed tokens per row
    root: list[int] = field(default_factory=list)  # next root token per row (the last bonus token)

    def __post_init__(self) -> None:
        self.ref = f64(self.model)
        self.heads = None if self.medusa is None else f64(self.medusa)


def _sampling(mode: str, batch: int, width: int, gen: np.random.Generator) -> dict[str, np.ndarray]:
    if mode == "greedy":
        return {}
    temperature = np.array([0.0, 0.8, 1.3, 0.5][:batch], np.float32)  # row 0 verifies greedily
    top_p = np.array([1.0, 0.9, 1.0, 0.7][:batch], np.float32)
    return dict(temperature=temperature, top_p=top_p, uniforms=gen.random((batch, width), dtype=np.float32))


def _prefill(sc: Scenario, prompts: list[list[int]]) -> None:
    feeds = {**prefill_feeds(prompts), **_sampling(sc.mode, len(prompts), 1, sc.gen)}
    calls = [
        Call(
            0,
            p,
            np.tril(np.ones((len(p), len(p)), bool)),
            list(range(len(p))),
            [len(p) - 1],
            np.zeros((1, 1), np.int32),
        )
        for p in prompts
    ]
    sc.seq = [[] for _ in prompts]
    accepted = _run_and_check(sc, feeds, calls)
    sc.seq, sc.root = prompts, [bonus for _, bonus in accepted]  # the whole prompt is committed


def _draft_tree(sc: Scenario, b: int, n: int) -> tuple[list[int], list[int]]:
    """A random n-node tree for row b and its tokens: each draft token is the reference's choice at
    its parent (argmax, or a sample in rejection mode) with probability 0.6, else uniform."""
    parents = random_parents(sc.gen, n)
    mask, depth = ancestors(parents)
    tokens = [sc.root[b]] + [0] * (n - 1)
    past = len(sc.seq[b])
    for d in range(1, int(depth.max()) + 1 if n > 1 else 1):
        logits, *_ = reference_pass(
            sc.ref, sc.seq[b] + tokens, sequence_mask(past, mask), list(range(past)) + (past + depth).tolist()
        )
        for i in np.flatnonzero(depth == d):
            z = logits[past + parents[i]]
            p = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
            guess = int(z.argmax()) if sc.mode == "greedy" else int(sc.gen.choice(len(z), p=p))
            tokens[i] = guess if sc.gen.random() < 0.6 else int(sc.gen.integers(0, len(z)))
    return parents, tokens


def _step(sc: Scenario, max_nodes: int, fresh: dict[int, list[int]] | None = None) -> None:
    """One call: a random tree per row, except rows in `fresh`, which start over with that prompt
    (past_len 0, a causal chain, verify-node 0 = its last token) in the same batch (in-flight batching)."""
    fresh = fresh or {}
    for b in fresh:
        sc.seq[b] = []
    B = len(sc.seq)
    trees = [
        ([-1] + list(range(len(fresh[b]) - 1)), fresh[b])
        if b in fresh
        else _draft_tree(sc, b, int(sc.gen.integers(1, max_nodes + 1)))
        for b in range(B)
    ]
    T = max(len(p) for p, _ in trees)
    paths = pad_paths([[[0]] if b in fresh else leaf_paths(p) for b, (p, _) in enumerate(trees)])  # [B, P, W]
    tokens, positions = np.zeros((B, T), np.int64), np.zeros((B, T), np.int64)
    tree_mask = np.tile(np.eye(T, dtype=bool), (B, 1, 1))  # padding nodes attend themselves
    verify_index = np.tile(np.arange(T), (B, 1))
    calls = []
    for b, (parents, toks) in enumerate(trees):
        n, past = len(parents), len(sc.seq[b])
        mask, depth = ancestors(parents)
        tokens[b, :n], positions[b, :n], positions[b, n:] = toks, past + depth, past
        tree_mask[b, :n, :n] = mask
        if b in fresh:  # verify the last prompt token; the other verify columns repeat node 0
            verify_index[b] = [n - 1] + [0] * (T - 1)
        calls.append(Call(past, toks, mask, (past + depth).tolist(), verify_index[b].tolist(), paths[b]))
    feeds = dict(
        tokens=tokens,
        position_ids=positions,
        tree_mask=tree_mask,
        past_len=np.array([len(s) for s in sc.seq], np.int64),
        num_nodes=np.array([len(p) for p, _ in trees], np.int64),
        verify_index=verify_index,
        paths=paths,
        **_sampling(sc.mode, B, paths.shape[2], sc.gen),
    )
    for b, (chain, bonus) in enumerate(_run_and_check(sc, feeds, calls)):
        if b in fresh:
            sc.seq[b], sc.root[b] = fresh[b], bonus  # the whole prompt is committed
        else:
            _commit(sc, b, calls[b], chain, bonus)


def _run_and_check(sc: Scenario, feeds: dict[str, np.ndarray], calls: list[Call]) -> list[tuple[list[int], int]]:
    """Run, check every row; returns per row the accepted chain (node indices, root first) and the bonus."""
    out, accepted = sc.sess.run(feeds), []
    for b, call in enumerate(calls):
        n, past = len(call.tokens), call.past
        args = (sc.seq[b] + call.tokens, sequence_mask(past, call.mask), list(range(past)) + call.positions)
        theirs, ref = reference_pass(sc.model, *args), reference_pass(sc.ref, *args)  # fp32, float64
        assert_close(out["hidden"][b, :n], theirs[1][past:], ref[1][past:], f"hidden row {b}")
        assert_close(sc.sess.k[:, b, :, : past + n], theirs[2], ref[2], f"keys row {b}")
        assert_close(sc.sess.v[:, b, :, : past + n], theirs[3], ref[3], f"values row {b}")
        rows = past + np.array([node for node in call.verify if node < n])  # verify nodes that are not padding
        argmax = out["node_argmax"][b, : len(rows)]
        assert_ranked_like(argmax[:, None], theirs[0][rows], ref[0][rows], f"node_argmax row {b}")
        got = (int(out["accepted_len"][b]), int(out["best_path"][b]), out["output_tokens"][b].tolist())
        _check_verify(sc, feeds, b, call, ref[0][rows], argmax, got)
        chain = [call.verify[j] for j in call.paths[got[1], : got[0]]]  # accepted nodes, root first
        if sc.heads is not None:
            with torch.no_grad():
                at = past + chain[-1]
                head32 = sc.medusa(torch.from_numpy(theirs[1][at])).numpy()  # [Hm, V]
                head64 = sc.heads(torch.from_numpy(ref[1][at])).numpy()
            assert_ranked_like(out["medusa_topk"][b], head32, head64, f"medusa_topk row {b}")
        accepted.append((chain, got[2][got[0] - 1]))
    return accepted


def _check_verify(
    sc: Scenario,
    feeds: dict[str, np.ndarray],
    b: int,
    call: Call,
    ref_v: np.ndarray,
    argmax: np.ndarray,
    got: tuple[int, int, list[int]],
) -> None:
    """TreeVerify's outputs: greedy rows equal the reference verification of one-hot logits at the graph's
    own node_argmax (which was checked against the reference above); rejection rows equal the reference
    verification of the fp64 logits, up to the contract's near-ties (devtools.verify_cases)."""
    tv = len(ref_v)
    tokens_v = torch.tensor([[call.tokens[call.verify[j]] for j in range(tv)]], dtype=torch.int32)
    paths = torch.from_numpy(np.ascontiguousarray(call.paths))[None]  # [1, P, W]
    greedy = sc.mode == "greedy" or float(feeds["temperature"][b]) == 0.0
    if greedy:
        onehot = torch.nn.functional.one_hot(torch.from_numpy(argmax), ref_v.shape[1]).double()[None]
        want = tree_verify(onehot, tokens_v, paths)
        assert got == (int(want.accepted_len[0]), int(want.best_path[0]), want.output_tokens[0].tolist()), b
        return
    width = paths.shape[2]
    case = Case(
        torch.from_numpy(ref_v)[None],
        tokens_v,
        paths,
        Mode.REJECTION,
        torch.from_numpy(feeds["temperature"][b : b + 1]),
        torch.from_numpy(feeds["top_p"][b : b + 1]),
        torch.from_numpy(feeds["uniforms"][b : b + 1, :width]),
        torch.ones(1, tv),
    )
    mine = VerifyResult(
        torch.tensor([got[0]], dtype=torch.int32),
        torch.tensor([got[1]], dtype=torch.int32),
        torch.tensor([got[2]], dtype=torch.int32),
    )
    result = compare(case, mine)
    assert not result.wrong, result.describe()


def _commit(sc: Scenario, b: int, call: Call, chain: list[int], bonus: int) -> None:
    """Keep the accepted chain's KV at slots past.. in order (gather), extend the row's sequence."""
    src = call.past + np.array(chain)
    dst = call.past + np.arange(len(chain))
    for buf in (sc.sess.k, sc.sess.v):
        buf[:, b, :, dst] = buf[:, b, :, src]  # (L, KV, n, D): fancy indexing copies the source first
    sc.seq[b] = sc.seq[b] + [call.tokens[node] for node in chain]
    sc.root[b] = bonus


def _scenario(
    model,
    variant: str,
    mode: str,
    tmp_path: Path,
    medusa: MedusaHeads | None = None,
    prompt_lens=(7, 12, 4, 1),
    steps: int = 4,
    max_nodes: int = 8,
    seed: int = 0,
    cap: int = CAP,
    restart: int | None = None,
) -> None:
    """Prefill, then `steps` tree steps; the longest row must stay within the cache (12 + steps·max_nodes +
    max_nodes ≤ cap). `restart`: at the second step that row starts over with a new prompt."""
    cfg = model.cfg
    res = export_target(
        model,
        tmp_path / "target",
        variant=variant,
        mode=mode,
        max_seq_len=cap,
        medusa=medusa,
        medusa_topk=None if medusa is None else MEDUSA_K,
    )
    sess = Session(res.ort, len(prompt_lens), cfg.num_hidden_layers, cfg.num_key_value_heads, cap, cfg.head_dim)
    sc = Scenario(model, mode, sess, np.random.default_rng(seed), medusa)
    prompts = [sc.gen.integers(0, cfg.vocab_size, n).tolist() for n in prompt_lens]
    _prefill(sc, prompts)
    for i in range(steps):
        fresh = {restart: sc.gen.integers(0, cfg.vocab_size, 10).tolist()} if i == 1 and restart is not None else {}
        _step(sc, max_nodes, fresh)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_greedy_prefill_and_tree_steps_match_the_reference(variant: str, config: str, tmp_path: Path) -> None:
    model = tiny_target(1, **CONFIGS[config])
    _scenario(model, variant, "greedy", tmp_path, seed=sorted(CONFIGS).index(config))


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_fresh_prompt_batched_with_tree_steps(variant: str, tmp_path: Path) -> None:
    """In-flight batching: one row prefills (past_len 0) in the same call as other rows' tree steps."""
    model = tiny_target(6, **CONFIGS["llama31_untied_d16"])
    _scenario(model, variant, "greedy", tmp_path, prompt_lens=(7, 12, 4), restart=1, seed=11)


@pytest.mark.parametrize("variant", VARIANTS)
def test_rejection_graph_matches_the_reference(variant: str, tmp_path: Path) -> None:
    model = tiny_target(2, **CONFIGS["llama31_untied_d16"])
    _scenario(model, variant, "rejection", tmp_path, prompt_lens=(7, 12, 4), seed=5)


@pytest.mark.parametrize("variant", VARIANTS)
def test_fused_medusa_topk_at_the_last_accepted_node(variant: str, tmp_path: Path) -> None:
    model = tiny_target(3, **CONFIGS["plain_tied_d32"])
    torch.manual_seed(4)
    heads = MedusaHeads(3, 2, model.cfg.hidden_size, model.cfg.vocab_size)  # 2 layers: the batched MatMul too
    randomize(heads)
    _scenario(model, variant, "greedy", tmp_path, medusa=heads, prompt_lens=(9, 5), seed=7)


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("mode", ["greedy", "rejection"])
@pytest.mark.parametrize("seed", range(10))
def test_sweep_seeds(variant: str, mode: str, seed: int, tmp_path: Path) -> None:
    config = sorted(CONFIGS)[seed % 2]
    model = tiny_target(100 + seed, **CONFIGS[config])
    _scenario(model, variant, mode, tmp_path, steps=8, max_nodes=12, seed=seed, cap=128)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("mode", ["greedy", "rejection"])
def test_files_io_and_node_counts(variant: str, mode: str, tmp_path: Path) -> None:
    model = tiny_target(0, **CONFIGS["llama31_untied_d16"])
    res = export_target(model, tmp_path / "t", variant=variant, mode=mode, max_seq_len=CAP)
    plain = ["target.plain.ort.onnx"] if (variant, mode) == ("ort", "greedy") else []  # method none's twin
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == sorted(
        ["export.json", "target.data", "target.onnx", "target.ort.onnx", *plain]
    )
    assert (res.plain is not None) == bool(plain)
    canonical = onnx.load(str(res.canonical), load_external_data=False)
    lowered = onnx.load(str(res.ort), load_external_data=False)
    assert sum(n.op_type == OP_TYPE and n.domain == DOMAIN for n in canonical.graph.node) == 1
    assert all(n.domain != DOMAIN for n in lowered.graph.node)
    sampling = ["temperature", "top_p", "uniforms"] if mode == "rejection" else []
    caches = [f"past_{kv}_{i}" for i in range(2) for kv in ("key", "value")]
    assert list(res.inputs) == [
        "tokens",
        "position_ids",
        "tree_mask",
        "past_len",
        "num_nodes",
        "verify_index",
        "paths",
        *sampling,
        *caches,
    ]
    assert list(res.outputs)[:5] == ["accepted_len", "best_path", "output_tokens", "node_argmax", "hidden"]
    per_layer = res.node_counts["ort"].per_layer
    assert len(per_layer) == 2 and per_layer[1] == {"standard": 23, "ort": 10}[variant]


def test_ort_variant_refuses_a_head_dim_groupqueryattention_cannot_run(tmp_path: Path) -> None:
    model = tiny_target(0, scaling=False, tied=False, head_dim=24)
    with pytest.raises(UserError, match="head_dim % 16"):
        export_target(model, tmp_path / "t", variant="ort", mode="greedy", max_seq_len=CAP)
    assert not (tmp_path / "t").exists()
    _scenario(model, "standard", "greedy", tmp_path, steps=1)  # the standard variant takes any head_dim
