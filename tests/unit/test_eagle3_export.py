"""The EAGLE-3 graphs, run in ONNX Runtime, against the torch reference in float64 (and fp32 for the bound).

Target step graph with the draft's fc folded in (`builder.export.target.Features`): after a batched prefill of
prompts of different lengths and a step with a random tree per row, `hidden` must be
`Eagle3Draft.project(Llama.forward(features=aux).hidden)` — fc over the residual stream after the aux layers — and
`node_argmax` still the target's own greedy tokens (its LM head reads the final norm, not fc).

Draft step graph (`builder.export.eagle3`): a run of (h[i], t[i+1]) pairs per row (rows of different lengths), then
tentative tree levels written after earlier tentative nodes (write_offset), each node attending the committed pairs,
its tentative ancestors and itself, against `Eagle3Draft.forward` with its KV cache: `hidden_out`, the cache,
`topk_tokens` (the draft vocabulary's ranking mapped to target ids; exact unless at a near-tie) and
`topk_logprobs`. The draft's RoPE θ (10000) differs from the target's (500000), as upstream's 8B draft's does.

Tolerances: `tests.unit.test_export_harness` (ORT within K_ORT × the torch fp32 run's own error against float64).
The GPU form (bfloat16, `standard`) is rewritten into TensorRT's form and checked against TensorRT's support matrix.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from builder.errors import UserError
from builder.export.contract import Precision
from builder.export.eagle3 import build_eagle3, export_eagle3
from builder.export.target import Features, build_target, export_target
from builder.export.tensorrt import to_tensorrt, write_tensorrt
from builder.export.trt_schemas import operator_problems
from builder.model.llama import Llama
from builder.speculative.eagle3.draft_model import Eagle3Draft, random_draft
from tests.unit.step_graph_helpers import DraftRows, prefill_feeds
from tests.unit.step_graph_helpers import draft_scenario as run_draft_scenario
from tests.unit.test_export_harness import (
    Session,
    ancestors,
    assert_close,
    assert_ranked_like,
    f64,
    leaf_paths,
    pad_paths,
    random_parents,
    sequence_mask,
    tiny_target,
)

CAP, TOP_K, LAYERS = 64, 5, 4
AUX = (0, 2, 3)  # output-of-layer ids (not adjacent: a tap off by one layer is caught)
VARIANTS = ("standard", "ort")


def pair(seed: int, draft_vocab: int | None, narrow: bool = False) -> tuple[Llama, Eagle3Draft]:
    """A random 4-layer target (GQA 8/2, head_dim 16, Llama-3.1 RoPE θ 500000) and a random EAGLE-3 draft over it
    with RoPE θ 10000 (its own config) and, when given, a draft vocabulary of that many random tokens. `narrow`: the
    draft is 32 wide (2 heads of 16, its own embedding) over the 64-wide target, so fc is [32, 192]."""
    model = tiny_target(seed, scaling=True, tied=False, head_dim=16, layers=LAYERS)
    cfg = dataclasses.replace(model.cfg, rope_theta=10000.0, rope_scaling=None)
    if narrow:
        return model, narrow_draft(model, cfg, seed + 1, draft_vocab)
    draft = random_draft(
        cfg, AUX, draft_vocab=draft_vocab, seed=seed + 1, base_embed=model.embed_tokens.weight, std=0.15
    )
    return model, draft


def narrow_draft(model: Llama, cfg, seed: int, draft_vocab: int | None, aux=AUX) -> Eagle3Draft:
    """A random EAGLE-3 draft half as wide as `model` (its own embedding), weights N(0, 0.15), norms 1 ± 0.1."""
    small = dataclasses.replace(
        cfg, hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=16
    )
    g = torch.Generator().manual_seed(seed)
    vd = draft_vocab or cfg.vocab_size
    draft = Eagle3Draft(small, model.cfg.hidden_size, vd, aux)
    with torch.no_grad():
        for name, p in draft.named_parameters():
            p.copy_(
                (1.0 + 0.1 * torch.randn(p.shape, generator=g))
                if "norm" in name
                else 0.15 * torch.randn(p.shape, generator=g)
            )
    if vd < cfg.vocab_size:
        draft.set_vocab_ids(torch.randperm(cfg.vocab_size, generator=g)[:vd].sort().values)
    return draft.eval()


# -- the target step graph: `hidden` = fc(features) -----------------------------------------------------------------


def feature_pass(model: Llama, draft: Eagle3Draft, tokens: list[int], mask: torch.Tensor, positions: list[int]):
    """[logits [S, V], fc(features) [S, C]] of the reference (the model's dtype) over a whole sequence from slot 0."""
    with torch.no_grad():
        logits, feats = model(torch.tensor([tokens]), torch.tensor([positions]), mask[None], None, 0, AUX)
        out = [logits[0], draft.project(feats[0].to(draft.dtype))]
    return [x.double().numpy() if x.dtype == torch.bfloat16 else x.numpy() for x in out]  # (bfloat16: exact)


def check_target_call(sess: Session, refs, feeds: dict[str, np.ndarray], rows: list[dict]) -> None:
    out = sess.run(feeds)
    for b, r in enumerate(rows):
        n, past = len(r["tokens"]), r["past"]
        args = (r["seq"] + r["tokens"], sequence_mask(past, r["mask"]), list(range(past)) + r["positions"])
        theirs, ref = (feature_pass(m, d, *args) for m, d in refs)
        assert out["hidden"].shape[2] == refs[0][1].cfg.hidden_size  # the draft's width
        assert_close(out["hidden"][b, :n], theirs[1][past:], ref[1][past:], f"hidden row {b}")
        at = past + np.array(r["verify"])
        argmax = out["node_argmax"][b, : len(at)]
        assert_ranked_like(argmax[:, None], theirs[0][at], ref[0][at], f"node_argmax row {b}")


@pytest.mark.parametrize("narrow", [False, True])
@pytest.mark.parametrize("variant", VARIANTS)
def test_target_hidden_is_fc_of_the_aux_layer_outputs(variant: str, narrow: bool, tmp_path: Path) -> None:
    model, draft = pair(0, None, narrow)
    res = export_target(
        model,
        tmp_path / "t",
        variant=variant,
        mode="greedy",
        max_seq_len=CAP,
        features=Features(AUX, draft.fc.weight),
    )
    cfg = model.cfg
    sess = Session(res.ort, 2, LAYERS, cfg.num_key_value_heads, CAP, cfg.head_dim)
    refs = ((model, draft), (f64(model), f64(draft)))
    gen = np.random.default_rng(0)
    prompts = [gen.integers(0, cfg.vocab_size, n).tolist() for n in (7, 4)]
    B = 2
    feeds = prefill_feeds(prompts)
    lens = feeds["num_nodes"]
    rows = [
        dict(seq=[], past=0, tokens=p, mask=np.tril(np.ones((len(p), len(p)), bool)), positions=list(range(len(p))))
        for p in prompts
    ]
    for r in rows:
        r["verify"] = [len(r["tokens"]) - 1]
    check_target_call(sess, refs, feeds, rows)
    # a step: a random tree per row (5 and 3 nodes) after each prompt (the prompts' KV is in place at 0..n-1)
    trees = [random_parents(gen, n) for n in (5, 3)]
    T = 5
    paths = pad_paths([leaf_paths(p) for p in trees])
    feeds = dict(
        tokens=np.zeros((B, T), np.int64),
        position_ids=np.zeros((B, T), np.int64),
        tree_mask=np.tile(np.eye(T, dtype=bool), (B, 1, 1)),
        past_len=lens.copy(),
        num_nodes=np.array([len(p) for p in trees], np.int64),
        verify_index=np.tile(np.arange(T), (B, 1)),
        paths=paths,
    )
    rows = []
    for b, parents in enumerate(trees):
        n, past = len(parents), len(prompts[b])
        mask, depth = ancestors(parents)
        toks = gen.integers(0, cfg.vocab_size, n).tolist()
        feeds["tokens"][b, :n], feeds["position_ids"][b, :n] = toks, past + depth
        feeds["position_ids"][b, n:] = past
        feeds["tree_mask"][b, :n, :n] = mask
        rows.append(
            dict(seq=prompts[b], past=past, tokens=toks, mask=mask, positions=(past + depth).tolist(), verify=range(n))
        )
    check_target_call(sess, refs, feeds, rows)


def test_features_are_checked_against_the_target() -> None:
    model, draft = pair(1, None)
    kw = dict(variant="standard", mode="greedy", max_seq_len=CAP)
    with pytest.raises(UserError, match="distinct layers of the 4-layer"):
        build_target(model, features=Features((0, 1, 4), draft.fc.weight), **kw)
    with pytest.raises(UserError, match="fc is"):
        build_target(model, features=Features((0, 1), draft.fc.weight), **kw)
    with pytest.raises(ValueError, match="Medusa"):
        from builder.speculative.medusa.heads import MedusaHeads

        heads = MedusaHeads(2, 1, model.cfg.hidden_size, model.cfg.vocab_size)
        build_target(model, features=Features(AUX, draft.fc.weight), medusa=heads, medusa_topk=2, **kw)


# -- the draft step graph against Eagle3Draft.forward ----------------------------------------------------------------


def draft_scenario(draft: Eagle3Draft, variant: str, folder: Path, seed: int, pairs=(6, 3), levels=((1, 1), (2, 3))):
    """`step_graph_helpers.draft_scenario` over the exported draft graph: pairs[b] pairs per row, then levels[k][b]
    tentative nodes per row at depth k. `Eagle3Draft.logits` spans the draft vocabulary the graph ranks."""
    cfg = draft.cfg
    res = export_eagle3(draft, None, folder, variant=variant, top_k=TOP_K, max_seq_len=CAP)
    sess = Session(res.ort, len(pairs), 1, cfg.num_key_value_heads, CAP, cfg.head_dim)
    run_draft_scenario(sess, DraftRows(draft, len(pairs), CAP), pairs, levels, seed)
    return res


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("draft_vocab,narrow", [(None, False), (40, False), (40, True)])
def test_draft_graph_matches_eagle3_draft(variant: str, draft_vocab: int | None, narrow: bool, tmp_path: Path) -> None:
    _, draft = pair(2, draft_vocab, narrow)
    assert (draft.vocab_ids is None) == (draft_vocab is None)
    res = draft_scenario(draft, variant, tmp_path / "e", seed=3)
    assert list(res.outputs) == ["hidden_out", "topk_tokens", "topk_logprobs", "present_key_0", "present_value_0"]
    assert res.inputs[:7] == ("tokens", "hidden_in", "position_ids", "past_len", "write_offset", "num_new", "tree_mask")


def test_the_target_rope_would_be_wrong() -> None:
    """The oracle can fail: the same draft with the target's RoPE θ computes other keys (so a graph built from the
    target's tables would not pass `test_draft_graph_matches_eagle3_draft`)."""
    model, draft = pair(2, None)
    other = random_draft(model.cfg, AUX, seed=3, base_embed=model.embed_tokens.weight, std=0.15)
    assert not torch.equal(draft.inv_freq, other.inv_freq)
    n = 6
    outs = []
    for d in (draft, other):
        cache = d.new_cache(CAP)
        with torch.no_grad():
            d(
                torch.arange(n)[None],
                torch.ones(1, n, d.cfg.hidden_size),
                torch.arange(n)[None] + 20,
                torch.ones(n, n, dtype=torch.bool).tril()[None],
                cache,
                0,
            )
        outs.append(cache.k[0, 0, :, :n])
    assert float((outs[0] - outs[1]).abs().max()) > 1e-2


def test_top_k_beyond_the_draft_vocabulary_and_fp8_draft_linears_are_refused(tmp_path: Path) -> None:
    from builder.export.qdq import Fp8Spec

    _, draft = pair(4, 8)
    with pytest.raises(UserError, match="draft vocabulary"):
        build_eagle3(draft, variant="standard", top_k=9, max_seq_len=CAP)
    fake = Fp8Spec({"fc": object()})  # type: ignore[dict-item]
    with pytest.raises(UserError, match="unquantized"):
        export_eagle3(draft, None, tmp_path / "x", variant="standard", top_k=4, max_seq_len=CAP, fp8=fake)


# -- the GPU form ----------------------------------------------------------------------------------------------------


def test_gpu_forms_rewrite_into_what_tensorrt_parses(tmp_path: Path) -> None:
    """bfloat16 `standard` graphs of both sides: the TensorRT rewrite replaces every standard attention op, keeps
    the contract's inputs and outputs, and every node has the operator and types TensorRT 10.15 documents."""
    model, draft = pair(5, 40)
    bf16 = Precision("bfloat16", "bfloat16")
    export_target(
        model,
        tmp_path / "target-greedy",
        variant="standard",
        mode="greedy",
        max_seq_len=CAP,
        precision=bf16,
        features=Features(AUX, draft.fc.weight),
    )
    export_eagle3(draft, None, tmp_path / "eagle", variant="standard", top_k=TOP_K, max_seq_len=CAP, precision=bf16)
    import onnx

    for folder, stem, layers in (("target-greedy", "target", LAYERS), ("eagle", "eagle", 1)):
        canonical = onnx.load(str(tmp_path / folder / f"{stem}.onnx"), load_external_data=False)
        path = write_tensorrt(tmp_path / folder, stem)  # onnx.checker (full) inside
        trt = onnx.load(str(path), load_external_data=False)
        assert operator_problems(to_tensorrt(canonical)) == [], folder
        kinds = [n.op_type for n in trt.graph.node]
        assert kinds.count("Attention") == kinds.count("RotaryEmbedding") == layers
        assert not {"RMSNormalization", "Swish", "Slice"} & set(kinds)
        assert [i.name for i in trt.graph.input] == [i.name for i in canonical.graph.input]
        assert [o.name for o in trt.graph.output] == [o.name for o in canonical.graph.output]
        hidden = next(o for o in trt.graph.output if o.name == ("hidden" if stem == "target" else "hidden_out"))
        assert hidden.type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16


def test_gpu_forms_in_bfloat16_round_like_torch_in_bfloat16(tmp_path: Path) -> None:
    """The bfloat16 GPU forms, run by ONNX Runtime as their float32 lowering (which rounds every stored tensor to
    bfloat16): a 7-token prefill through the target graph (`hidden` = fc of the features) and the same pairs through
    the draft graph, against the torch references in bfloat16 and float64 on the same (bfloat16) weights — two-sided
    (`tests.unit.numerics.assert_rounds_like`: a graph computing in float32 would be too close and fail)."""
    from tests.unit.numerics import assert_rounds_like
    from tests.unit.test_export_harness import K_ORT

    model, draft = pair(6, 40)
    model, draft = model.to(torch.bfloat16), draft.to(torch.bfloat16)
    bf16 = Precision("bfloat16", "bfloat16")
    kw = dict(variant="standard", max_seq_len=CAP, precision=bf16)
    tres = export_target(model, tmp_path / "t", mode="greedy", features=Features(AUX, draft.fc.weight), **kw)
    dres = export_eagle3(draft, None, tmp_path / "e", top_k=TOP_K, **kw)
    cfg, n = model.cfg, 7
    gen = np.random.default_rng(2)
    tokens = gen.integers(0, cfg.vocab_size, n)
    causal = np.tril(np.ones((n, n), bool))[None]
    tsess = Session(tres.ort, 1, LAYERS, cfg.num_key_value_heads, CAP, cfg.head_dim)
    out = tsess.run(
        dict(
            tokens=tokens[None],
            position_ids=np.arange(n)[None],
            tree_mask=causal,
            past_len=np.zeros(1, np.int64),
            num_nodes=np.array([n]),
            verify_index=np.array([[n - 1]]),
            paths=np.zeros((1, 1, 1), np.int32),
        )
    )
    t = lambda a: torch.from_numpy(np.asarray(a, np.float64))  # noqa: E731
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    refs = [
        feature_pass(m, d, tokens.tolist(), mask, list(range(n))) for m, d in ((model, draft), (f64(model), f64(draft)))
    ]
    theirs, ref64 = (t(r[1]) for r in refs)
    assert_rounds_like(t(out["hidden"][0]), theirs, ref64, what="target hidden", dtype=torch.bfloat16, k=K_ORT)
    # the draft graph over those pairs: h[i] = the graph's own fc(features) (bfloat16 values), t[i+1]
    h = out["hidden"][0, : n - 1]
    dsess = Session(dres.ort, 1, 1, draft.cfg.num_key_value_heads, CAP, draft.cfg.head_dim)
    dout = dsess.run(
        dict(
            tokens=tokens[None, 1:],
            hidden_in=h[None],
            position_ids=np.arange(n - 1)[None],
            past_len=np.zeros(1, np.int64),
            write_offset=np.zeros(1, np.int64),
            num_new=np.array([n - 1]),
            tree_mask=causal[:, : n - 1, : n - 1],
        )
    )
    drefs = []
    for d in (draft, f64(draft)):
        with torch.no_grad():
            x = d(
                torch.from_numpy(tokens[1:])[None],
                torch.from_numpy(np.asarray(h, np.float32)).to(d.dtype)[None],
                torch.arange(n - 1)[None],
                mask[: n - 1, : n - 1][None],
            )[0]
        drefs.append(x.double())
    assert_rounds_like(t(dout["hidden_out"][0]), *drefs, what="draft hidden_out", dtype=torch.bfloat16, k=K_ORT)
