"""The exported EAGLE draft step graph, run in ONNX Runtime, against `EagleDraft.forward` with its KV
cache (float64). Per row: a run of (h[i], t[i+1]) pairs (rows of different lengths, right-padded),
then tentative tree levels written after earlier tentative nodes (write_offset), each new node
attending the committed pairs, its tentative ancestors and itself. Compared: `hidden_out`, the cache
contents, `topk_tokens` (exact unless at a near-tie) and `topk_logprobs`. The `ort` graph picks its output
rows (`out_rows`): the pairs call asks each row for its last pair and its first (R = 2, as `extend` asks for
the last alone), the levels for every row; the reference still runs every row, so the picked rows are
compared with the reference's rows of those indices and the cache with all of them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from builder.export.eagle import export_eagle
from builder.model.config import LlamaConfig
from builder.speculative.eagle.draft_model import EagleDraft
from tests.unit.model_utils import LLAMA3_SCALING, hf_config
from tests.unit.step_graph_helpers import DraftRows, draft_scenario
from tests.unit.test_export_harness import Session, randomize

CAP = 64
TOP_K = 5


def eagle_draft_pair(seed: int, layers: int, fc_bias: bool) -> tuple[EagleDraft, torch.Tensor]:
    hf = hf_config(
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=16,
        rope_theta=500000.0,
        rope_scaling=LLAMA3_SCALING,
        num_hidden_layers=layers,
    )
    cfg = LlamaConfig.from_hf_dict(hf.to_dict())
    torch.manual_seed(seed)
    draft = EagleDraft(cfg, fc_bias=fc_bias).eval()
    randomize(draft, std=0.1)  # hidden_out ~ N(0, 1) for N(0, 1) inputs: log-probs spread over a few tokens
    lm_head = 0.2 * torch.randn(cfg.vocab_size, cfg.hidden_size)  # [V, C] the target's
    draft.set_lm_head(lm_head)
    return draft, lm_head


def over_draft_vocab(draft: EagleDraft, h: torch.Tensor) -> torch.Tensor:
    """`EagleDraft.logits` spans the target's vocabulary; with a draft vocabulary the graph's top-K ranks the
    log-softmax over its tokens' columns only."""
    logits = draft.logits(h)
    return torch.log_softmax(logits if draft.vocab_ids is None else logits[:, draft.vocab_ids], dim=-1)


def _scenario(
    draft: EagleDraft,
    lm_head: torch.Tensor,
    variant: str,
    tmp_path: Path,
    pairs=(6, 3),
    levels=((1, 1), (2, 3), (3, 1)),
    seed: int = 0,
) -> None:
    """`step_graph_helpers.draft_scenario` over the exported graph (module docstring)."""
    cfg = draft.cfg
    res = export_eagle(draft, lm_head, tmp_path / "eagle", variant=variant, top_k=TOP_K, max_seq_len=CAP)
    sess = Session(res.ort, len(pairs), cfg.num_hidden_layers, cfg.num_key_value_heads, CAP, cfg.head_dim)
    draft_scenario(sess, DraftRows(draft, len(pairs), CAP, over_draft_vocab), pairs, levels, seed)


@pytest.mark.parametrize("variant", ["standard", "ort"])
@pytest.mark.parametrize("layers", [1, 2])
def test_pairs_then_tentative_levels_match_eagle_draft(variant: str, layers: int, tmp_path: Path) -> None:
    draft, lm_head = eagle_draft_pair(layers, layers, fc_bias=layers == 1)
    _scenario(draft, lm_head, variant, tmp_path, seed=layers)


@pytest.mark.parametrize("variant", ["standard", "ort"])
def test_draft_vocabulary_levels_match_eagle_draft_over_those_tokens(variant: str, tmp_path: Path) -> None:
    """`set_draft_vocab`: the graph's LM head keeps a random third of the rows; its top-K must be the
    reference's ranking of those columns (log-softmax over them only), mapped back to target token ids."""
    draft, lm_head = eagle_draft_pair(5, 1, fc_bias=True)
    V = draft.cfg.vocab_size
    draft.set_draft_vocab(np.sort(np.random.default_rng(5).choice(V, V // 3, replace=False)))
    _scenario(draft, lm_head, variant, tmp_path, seed=5)
    with pytest.raises(ValueError, match="ascending"):
        draft.set_draft_vocab([3, 2])
    with pytest.raises(Exception, match="draft vocabulary"):
        draft.set_draft_vocab([0, 1, 2])
        export_eagle(draft, lm_head, tmp_path / "small", variant=variant, top_k=TOP_K, max_seq_len=CAP)


@pytest.mark.parametrize("variant", ["standard", "ort"])
def test_files_and_io(variant: str, tmp_path: Path) -> None:
    draft, lm_head = eagle_draft_pair(0, 1, fc_bias=True)
    res = export_eagle(draft, lm_head, tmp_path / "e", variant=variant, top_k=TOP_K, max_seq_len=CAP)
    assert list(res.inputs) == [
        "tokens",
        "hidden_in",
        "position_ids",
        "past_len",
        "write_offset",
        "num_new",
        "tree_mask",
        *(["out_rows"] if variant == "ort" else []),
        "past_key_0",
        "past_value_0",
    ]
    assert list(res.outputs) == ["hidden_out", "topk_tokens", "topk_logprobs", "present_key_0", "present_value_0"]
    model = onnx.load(str(res.ort), load_external_data=False)
    assert len(model.graph.node) == res.node_counts["ort"].total
    # layer 0: no input norm; the ort graph's last layer gathers its picked rows (Unsqueeze + 2 GatherND)
    assert res.node_counts["ort"].per_layer == ({"standard": 21, "ort": 12}[variant],)
    assert dataclasses.asdict(res.node_counts["ort"]) == dataclasses.asdict(res.node_counts["canonical"])


def test_eagle_net_picking_rows_answers_as_the_all_rows_graph(tmp_path: Path) -> None:
    """`OrtEagleNet` over the `ort` graph (picks its output rows: an extend asks for each row's last pair) against
    the same net over the graph without `out_rows` (every row out, the host picks): extends of several pairs and
    expands whose tree masks change between calls on the same binding — read-only ones for the first net (its host
    skips re-copying a read-only mask its binding already holds, and must notice a different one), writeable copies
    (always copied) for the second — alone and in a batch of two."""
    from builder.engines.ort.eagle import OrtEagleNet

    draft, lm_head = eagle_draft_pair(3, 1, fc_bias=True)
    cfg = draft.cfg
    nets = []
    for pick in (True, False):
        res = export_eagle(
            draft, lm_head, tmp_path / str(pick), variant="ort", top_k=TOP_K, max_seq_len=CAP, pick_rows=pick
        )
        nets.append(
            OrtEagleNet(
                res.ort,
                layers=1,
                kv_heads=cfg.num_key_value_heads,
                head_dim=cfg.head_dim,
                hidden_size=cfg.hidden_size,
                top_k=TOP_K,
                capacity=CAP,
                max_batch_size=2,
            )
        )
    assert [n.pick_rows for n in nets] == [True, False]
    gen = np.random.default_rng(0)
    eye, tril = np.eye(2, dtype=bool)[None], np.tril(np.ones((2, 2), bool))[None]
    for m in (eye, tril):
        m.flags.writeable = False

    def same(a, b) -> None:
        np.testing.assert_allclose(a.hidden, b.hidden, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(a.topk_tokens, b.topk_tokens)
        np.testing.assert_allclose(a.topk_logprobs, b.topk_logprobs, rtol=1e-5, atol=1e-5)

    for seqs in ([7], [8, 9]):
        b = len(seqs)
        for n in nets:
            n.start(seqs)
        for step, num in enumerate(([5] * b, [3, 1][:b], [4, 2][:b])):
            tokens = gen.integers(0, cfg.vocab_size, (b, max(num)))
            hidden = gen.standard_normal((b, max(num), cfg.hidden_size)).astype(np.float32)
            outs = [n.extend(seqs, tokens, hidden, np.array(num)) for n in nets]
            same(*outs)
            assert outs[0].hidden.shape == (b, 1, cfg.hidden_size)
            pos = np.stack([n.committed_lens(seqs) for n in nets])[0][:, None] + np.array([[0, 0]])
            for mask in (eye, tril, tril, eye)[step:]:  # the same binding (F 2, U 2), masks changing
                toks = gen.integers(0, cfg.vocab_size, (b, 2))
                hid = gen.standard_normal((b, 2, cfg.hidden_size)).astype(np.float32)
                full = np.ascontiguousarray(np.broadcast_to(mask, (b, 2, 2)))
                full.flags.writeable = False
                given = full if b > 1 else mask  # read-only for the picking net, a writeable copy for the other
                masks = (given, given.copy())
                same(*[n.expand(seqs, toks, hid, pos, 0, m) for n, m in zip(nets, masks)])
        for n in nets:
            for s in seqs:
                n.release(s)
