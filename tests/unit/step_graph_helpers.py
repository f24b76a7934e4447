"""Feeds and row-by-row checks shared by the step-graph export tests (test_export_target, test_export_eagle,
test_eagle3_export): the target graph's batched prefill feeds, and the draft graph's scenario — a run of
(h[i], t[i+1]) pairs per row, then tentative tree levels written after earlier tentative nodes (write_offset), each
node attending the committed pairs, its tentative ancestors and itself — checked row by row against the torch draft
(EAGLE-1's `EagleDraft` or EAGLE-3's `Eagle3Draft`: the same forward signature and KV cache) in fp32 and float64.
Tolerances: `tests.unit.test_export_harness`.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from tests.unit.test_export_harness import Session, assert_close, assert_close_picked, assert_ranked_like, f64


def prefill_feeds(prompts: list[list[int]]) -> dict[str, np.ndarray]:
    """The target graph's feeds for a batched prefill from slot 0: prompts right-padded, causal masks, each row
    verifying its last token (greedy inputs only; a sampling graph adds its own)."""
    B, T = len(prompts), max(len(p) for p in prompts)
    tokens = np.zeros((B, T), np.int64)
    for b, p in enumerate(prompts):
        tokens[b, : len(p)] = p
    lens = np.array([len(p) for p in prompts], np.int64)
    return dict(
        tokens=tokens,
        position_ids=np.tile(np.arange(T), (B, 1)),
        tree_mask=np.tile(np.tril(np.ones((T, T), bool)), (B, 1, 1)),
        past_len=np.zeros(B, np.int64),
        num_nodes=lens,
        verify_index=(lens - 1)[:, None],
        paths=np.zeros((B, 1, 1), np.int32),
    )


def logprobs(draft: Any, h: torch.Tensor) -> torch.Tensor:
    """The log-softmax of the draft's logits: what `topk_logprobs` holds when `draft.logits` spans the columns the
    graph ranks (EAGLE-3's head over its own vocabulary, EAGLE-1 without a draft vocabulary)."""
    return torch.log_softmax(draft.logits(h), dim=-1)


class DraftRows:
    """Per row of the batch: the reference drafts (fp32 "theirs", float64 the oracle) with their caches, the
    committed length, and per tentative node the set of tentative columns it attends (its ancestors and itself).
    `scores(draft, h)`: the log-probs the graph's top-K ranks, over the columns `topk_tokens` maps to."""

    def __init__(
        self, draft: Any, batch: int, cap: int, scores: Callable[[Any, torch.Tensor], torch.Tensor] = logprobs
    ) -> None:
        self.drafts = (draft, f64(draft))
        self.caches = [[d.new_cache(cap) for _ in range(batch)] for d in self.drafts]
        self.past = [0] * batch
        self.tentative: list[list[set[int]]] = [[] for _ in range(batch)]
        self.scores = scores


def draft_call(sess: Session, rows: DraftRows, new: list[dict], pick: list[list[int]] | None = None) -> dict:
    """One graph call; new[b] = dict(tokens, hidden [n, C], positions, anc: per new row the set of tentative columns
    it attends besides itself). A graph with `out_rows` is asked for pick[b] (the same count per row; default every
    row); the outputs then hold the picked rows, returned as "picked" [B, R] beside them. Every row is checked."""
    B, F = len(new), max(len(r["tokens"]) for r in new)
    wo = [len(t) for t in rows.tentative]
    U = max(w + F for w in wo)
    C = new[0]["hidden"].shape[1]
    feeds = dict(
        tokens=np.zeros((B, F), np.int64),
        hidden_in=np.zeros((B, F, C), np.float32),
        position_ids=np.zeros((B, F), np.int64),
        past_len=np.array(rows.past, np.int64),
        write_offset=np.array(wo, np.int64),
        num_new=np.array([len(r["tokens"]) for r in new], np.int64),
        tree_mask=np.zeros((B, F, U), bool),
    )
    if "out_rows" in [i.name for i in sess.sess.get_inputs()]:
        feeds["out_rows"] = np.array(pick if pick is not None else [list(range(F))] * B, np.int64)
    for b, r in enumerate(new):
        n = len(r["tokens"])
        feeds["tokens"][b, :n], feeds["hidden_in"][b, :n], feeds["position_ids"][b, :n] = (
            r["tokens"],
            r["hidden"],
            r["positions"],
        )
        for i in range(F):  # every row attends itself (padding rows too)
            feeds["tree_mask"][b, i, wo[b] + i] = True
        for i, anc in enumerate(r["anc"]):
            for col in anc:  # ancestors among the pairs of this call (pairs run) or earlier tentative nodes
                feeds["tree_mask"][b, i, col] = True
    out = sess.run(feeds)
    out["picked"] = feeds.get("out_rows", np.broadcast_to(np.arange(F), (B, F)))
    assert out["hidden_out"].shape[1] == out["picked"].shape[1]
    for b, r in enumerate(new):
        check_draft_row(sess, rows, b, r, feeds, out, wo[b])
    return out


def check_draft_row(sess: Session, rows: DraftRows, b: int, r: dict, feeds: dict, out: dict, wo: int) -> None:
    """Row b of one call against both references run over (cache[:past + wo] + the new rows) with the call's mask:
    hidden_out and top-K on the picked rows, the cache on all of them."""
    n, past = len(r["tokens"]), rows.past[b]
    start = past + wo
    mask = np.zeros((n, start + n), dtype=bool)  # over (cache[:start] + new)
    mask[:, :past] = True
    mask[:, past:] = feeds["tree_mask"][b, :n, : wo + n]
    results = []  # per reference: hidden_out [n, C], log-probs [n, columns ranked], K and V [L, KV, start + n, D]
    for draft, caches in zip(rows.drafts, rows.caches):
        with torch.no_grad():
            h = draft(
                torch.tensor([r["tokens"]]),
                torch.from_numpy(np.asarray(r["hidden"])).to(draft.dtype)[None],
                torch.tensor([r["positions"]]),
                torch.from_numpy(mask)[None],
                caches[b],
                start,
            )[0]
            logp = rows.scores(draft, h)
        kv = caches[b].k[:, 0, :, : start + n], caches[b].v[:, 0, :, : start + n]
        results.append([x.numpy() for x in (h, logp, *kv)])
    theirs, ref = results
    at = np.flatnonzero(out["picked"][b] < n)  # the outputs that hold real rows (not padding)
    sel = out["picked"][b][at]  # which rows they hold
    assert len(sel)
    assert_close(out["hidden_out"][b, at], theirs[0][sel], ref[0][sel], f"hidden_out row {b}")
    assert_close(sess.k[:, b, :, : start + n], theirs[2], ref[2], f"keys row {b}")
    assert_close(sess.v[:, b, :, : start + n], theirs[3], ref[3], f"values row {b}")
    ids = out["topk_tokens"][b, at]  # target token ids
    vocab = rows.drafts[0].vocab_ids
    if vocab is not None:  # a draft vocabulary: target ids -> its columns (ascending)
        v = vocab.numpy()
        assert np.isin(ids, v).all(), f"row {b}: drafted tokens outside the draft vocabulary"
        ids = np.searchsorted(v, ids)
    assert_ranked_like(ids, theirs[1][sel], ref[1][sel], f"topk_tokens row {b}")
    assert_close_picked(out["topk_logprobs"][b, at], ids, theirs[1][sel], ref[1][sel], f"topk_logprobs row {b}")


def draft_scenario(sess: Session, rows: DraftRows, pairs: tuple[int, ...], levels, seed: int) -> None:
    """pairs[b] pairs per row (a graph with out_rows asked for each row's last pair and its first: R = 2, as `extend`
    asks for the last alone), then levels[k][b] tentative nodes per row at depth k, each a child of a random node of
    the level before (reading its hidden_out, as EAGLE does). Inputs N(0, 1): fc(features) or EAGLE-1's features
    are RMS-normed data of unit scale."""
    cfg = rows.drafts[0].cfg
    B, C, V = len(pairs), cfg.hidden_size, cfg.vocab_size
    gen = np.random.default_rng(seed)
    new = [
        dict(
            tokens=gen.integers(0, V, n).tolist(),
            hidden=gen.standard_normal((n, C)).astype(np.float32),
            positions=list(range(n)),
            anc=[set(range(i)) for i in range(n)],
        )
        for n in pairs
    ]
    out = draft_call(sess, rows, new, [[n - 1, 0] for n in pairs])
    rows.past = list(pairs)  # the pairs are committed (written in place at slots 0..n-1)
    last = [int(np.flatnonzero(out["picked"][b] == n - 1)[0]) for b, n in enumerate(pairs)]
    hidden = [[out["hidden_out"][b, last[b]]] for b in range(B)]  # per tentative node; [0] = the last pair's
    depth: list[list[int]] = [[] for _ in range(B)]
    for level, counts in enumerate(levels):
        new = []
        for b, n in enumerate(counts):
            prev = [i for i, d in enumerate(depth[b]) if d == level - 1]  # the previous level's nodes
            parents = [int(gen.choice(prev)) if prev else -1 for _ in range(n)]
            new.append(
                dict(
                    tokens=gen.integers(0, V, n).tolist(),
                    hidden=np.stack([hidden[b][p + 1] for p in parents]),
                    positions=[rows.past[b] + level] * n,
                    anc=[set() if p < 0 else rows.tentative[b][p] for p in parents],
                )
            )
        out = draft_call(sess, rows, new)
        for b, r in enumerate(new):
            wo = len(rows.tentative[b])
            for i, anc in enumerate(r["anc"]):
                rows.tentative[b].append(anc | {wo + i})
                depth[b].append(level)
                hidden[b].append(out["hidden_out"][b, i])
