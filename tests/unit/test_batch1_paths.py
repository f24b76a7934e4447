"""The fast steps of the ORT engine and the decoding loop's fast paths (builder.speculative.fast_paths), each against
the general path of the same engine class: the per-step batch-1 chain step (`BatchedTarget.step_chain`, builder.engines.
batched, taken by `Decoder.step`'s fast paths) against `step`, the burst (`BatchedTarget.decode_greedy`, taken by
`Decoder.run`) against one step at a time, and the plain batch (`BatchedTarget.step_plain`: every sequence's root, no
drafts) against `step` — tokens, accepted counts, the KV cache, stop tokens, streaming, batches, running out of room —
on the tree graph and the plain-steps graph. A method with no fast step (set to None in a subclass) is not taken
(`builder.speculative.protocols.implements`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from builder.export.target import export_target
from builder.speculative.protocols import SamplingBatch
from tests.unit.test_export_harness import tiny_target


def _greedy_spec(seed: int, tmp_path: Path):  # noqa: ANN202
    """A tiny target's greedy graphs (tree and plain-steps, capacity 96) as an ORT engine spec, and its config."""
    from builder.engines.ort.target import TargetSpec

    model = tiny_target(seed, scaling=True, tied=False, head_dim=16)
    res = export_target(model, tmp_path / "g", variant="ort", mode="greedy", max_seq_len=96)
    cfg = model.cfg
    return TargetSpec(
        res.ort,
        None,
        cfg.num_hidden_layers,
        cfg.num_key_value_heads,
        cfg.head_dim,
        cfg.hidden_size,
        cfg.vocab_size,
        96,
        None,
        res.plain,
    ), cfg


def _counting(shortcut: str) -> type:
    """OrtEngine whose `shortcut` (step_chain / step_plain) counts the calls it took (`taken`)."""
    from builder.engines.ort.target import OrtEngine

    def counted(self, *args):  # noqa: ANN001, ANN002, ANN202
        out = getattr(OrtEngine, shortcut)(self, *args)
        self.taken += out is not None
        return out

    return type(f"Counted_{shortcut}", (OrtEngine,), {"taken": 0, shortcut: counted})


def test_batch1_shortcut_equals_the_general_step_path(tmp_path: Path) -> None:
    """The batch-1 chain step (`BatchedTarget.step_chain`, taken by `Decoder.step` for the engine's only sequence
    when its draft is a chain; a drafter's chain as tokens, `propose_chain`, where it has one) against the general
    `step` path of the same engine class with the shortcut hidden:
    token for token, every step's accepted count and the KV cache written — plain decoding and n-gram chains, stop
    tokens included, on the tree graph (in-graph verdict) and the plain-steps graph (host verdict) — and it was
    really taken; with two sequences held every step goes through `step`."""
    from builder.engines.ort.target import OrtEngine
    from builder.speculative.decoding import Decoder, Request, generate
    from builder.speculative.ngram.drafter import NgramDrafter

    class General(OrtEngine):
        step_chain = None  # the loop then takes `step` for every step
        step_plain = None

    class Chains(NgramDrafter):  # counts the loop's calls of the drafts-as-tokens shortcut
        calls = 0

        def propose_chain(self, seq: int, root: int) -> list[int]:
            Chains.calls += 1
            return super().propose_chain(seq, root)

    Counted = _counting("step_chain")
    spec, cfg = _greedy_spec(7, tmp_path)
    gen = np.random.default_rng(5)
    prompts = [[int(t) for t in gen.integers(0, cfg.vocab_size, int(n))] for n in gen.integers(1, 30, 3)]
    prompts += [[3, 4, 5] * 5, [9, 9, 9, 9, 9, 8], [1, 2] * 7 + [3]]  # prompts that make the n-gram drafter draft
    for plain in (False, True):
        fast, slow = Counted(spec, 80, 2, plain_only=plain), General(spec, 80, 2, plain_only=plain)
        for p in prompts:
            for drafter in (None, lambda: Chains(6, 3, 1, 1)):
                a, b = (generate(e, p, 30, drafter and drafter()) for e in (fast, slow))
                assert (a.token_ids, a.accepted_per_step) == (b.token_ids, b.accepted_per_step)
                live = len(p) + len(a.token_ids) - 1
                assert np.array_equal(fast.kv.buf[:, :, 0, :, :live], slow.kv.buf[:, :, 0, :, :live])
            stop = generate(slow, p, 30).token_ids[7]  # a token the decode emits: it ends there
            a, b = (generate(e, p, 30, NgramDrafter(6, 3, 1, 1), stop_ids=[stop]) for e in (fast, slow))
            assert a.token_ids == b.token_ids and a.token_ids[-1] == stop and a.finish_reason == "stop"
        assert fast.taken > 100 and Chains.calls > 30, (fast.taken, Chains.calls)
        Chains.calls = 0
        runs = {
            e: Decoder(e, NgramDrafter(6, 3, 1, 1)).run(
                [Request(tuple(p), 20 + 5 * i) for i, p in enumerate(prompts[-2:])]
            )
            for e in (fast, slow)
        }
        assert [(g.token_ids, g.accepted_per_step) for g in runs[fast]] == [
            (g.token_ids, g.accepted_per_step) for g in runs[slow]
        ]
        ids, pre = fast.start(prompts[:2], SamplingBatch.all_greedy(2, 1))
        assert fast.step_chain(ids[0], [int(pre.tokens[0])]) is None  # two sequences held: `step` it is
        for i in ids:
            fast.release(i)


def test_batch1_burst_equals_one_step_at_a_time(tmp_path: Path) -> None:
    """`Decoder.run`'s burst (`BatchedTarget.decode_greedy`: a lone greedy plain sequence's steps back to back)
    against the same engine class stepping one step at a time through `step`: tokens, steps, finish reasons, the
    KV cache, stop tokens, the tokens streamed to `on_tokens` (in chunks of at most `STREAM_BURST`), a batch of two
    whose survivor finishes alone, and a decode that runs out of KV room (the same error after the same tokens);
    and the burst really ran (most tokens came from it)."""
    from builder.engines.ort.target import OrtEngine
    from builder.speculative.decoding import STREAM_BURST, Decoder, Request

    class General(OrtEngine):
        step_chain = None  # no batch-1 shortcut: every step goes through `step`
        decode_greedy = None
        step_plain = None

    class Counted(OrtEngine):
        burst_tokens = 0

        def decode_greedy(self, seq: int, token: int, max_tokens: int, stop_ids=()) -> list[int] | None:  # noqa: ANN001
            out = super().decode_greedy(seq, token, max_tokens, stop_ids)
            self.burst_tokens += 0 if out is None else len(out)
            return out

    spec, cfg = _greedy_spec(11, tmp_path)
    gen = np.random.default_rng(3)
    prompts = [[int(t) for t in gen.integers(0, cfg.vocab_size, int(n))] for n in gen.integers(1, 40, 4)]
    for plain in (False, True):
        fast, slow = Counted(spec, 95, 2, plain_only=plain), General(spec, 95, 2, plain_only=plain)

        def decode(e: OrtEngine, reqs: list[Request], stream: bool):  # noqa: ANN202
            chunks: list[tuple[int, list[int]]] = []
            gens = Decoder(e).run(reqs, (lambda i, t: chunks.append((i, list(t)))) if stream else None)
            return [(g.token_ids, g.steps, g.accepted_per_step, g.finish_reason) for g in gens], chunks

        for p in prompts:
            ref = Decoder(slow).run([Request(tuple(p), 40)])[0].token_ids
            stop = ref[9]  # a token the decode emits: it ends at its first occurrence
            for req in (Request(tuple(p), 40), Request(tuple(p), 40, stop_ids=(stop,)), Request(tuple(p), 1)):
                for stream in (False, True):
                    (a, ca), (b, cb) = decode(fast, [req], stream), decode(slow, [req], stream)
                    assert a == b
                    live = len(p) + len(a[0][0]) - 1
                    assert np.array_equal(fast.kv.buf[:, :, 0, :, :live], slow.kv.buf[:, :, 0, :, :live])
                    if stream:
                        assert [t for _, c in ca for t in c] == a[0][0] == [t for _, c in cb for t in c]
                        assert max(len(c) for _, c in ca) <= STREAM_BURST
            assert a[0][3] == "length" and b[0][0] == ref[:1]
        (a, _), (b, _) = (
            decode(e, [Request(tuple(prompts[0]), 12), Request(tuple(prompts[1]), 45)], False) for e in (fast, slow)
        )
        assert a == b  # two in flight (no burst), then the survivor alone (burst)
        assert fast.burst_tokens > 0.8 * 40 * len(prompts), fast.burst_tokens
        long = [int(t) for t in gen.integers(0, cfg.vocab_size, 80)]  # 80 + 30 > the 96 slots of KV
        seen: dict[OrtEngine, list[int]] = {}
        for e in (fast, slow):
            seen[e] = []
            with pytest.raises(ValueError, match="no room"):
                Decoder(e).run([Request(tuple(long), 30)], lambda _i, t, e=e: seen[e].extend(t))
            assert len(e.rows) == 0  # the failed request's slot was released
        assert seen[fast] == seen[slow] and len(seen[fast]) >= 96 - 80 - STREAM_BURST


def test_plain_batch_shortcut_equals_the_general_step_path(tmp_path: Path) -> None:
    """`BatchedTarget.step_plain` (taken by `Decoder.step` for a batch of greedy sequences none of which drafts)
    against the same engine class stepping through `step` with a root-only draft per row: every request's tokens,
    steps and finish reason, the KV cache of every row, stop tokens, streaming, requests that finish at different
    steps (their rows move, and the loop's order stops being the rows' order: `step` then), requests that join
    while others run, and n-gram drafting sequences beside plain ones (`step`); and the shortcut was really
    taken, on the tree graph and the plain-steps graph."""
    from builder.engines.ort.target import OrtEngine
    from builder.speculative.decoding import Decoder, Request
    from builder.speculative.ngram.drafter import NgramDrafter

    class General(OrtEngine):
        step_plain = None

    Counted = _counting("step_plain")
    spec, cfg = _greedy_spec(13, tmp_path)
    gen = np.random.default_rng(9)
    prompts = [[int(t) for t in gen.integers(0, cfg.vocab_size, int(n))] for n in gen.integers(1, 30, 6)]
    prompts += [[3, 4, 5] * 5, [1, 2] * 7 + [3]]
    for plain in (False, True):
        fast, slow = Counted(spec, 80, 4, plain_only=plain), General(spec, 80, 4, plain_only=plain)

        def decode(e: OrtEngine, reqs: list[Request], drafter=None):  # noqa: ANN001, ANN202
            chunks: list[tuple[int, list[int]]] = []
            gens = Decoder(e, drafter).run(reqs, lambda i, t: chunks.append((i, list(t))), burst=False)
            return [(g.token_ids, g.steps, g.accepted_per_step, g.finish_reason) for g in gens], chunks

        reqs = [Request(tuple(p), 6 + 5 * i) for i, p in enumerate(prompts)]  # 8 requests over 4 slots
        assert decode(fast, reqs) == decode(slow, reqs)
        stop = decode(slow, reqs[:1])[0][0][0][3]
        reqs[1] = Request(tuple(prompts[1]), 30, stop_ids=(stop,))
        reqs[2] = Request(tuple(prompts[0]), 30, stop_ids=(stop,))
        assert decode(fast, reqs) == decode(slow, reqs)
        (a, _), (b, _) = (decode(e, reqs[:3]) for e in (fast, slow))
        assert a == b
        for r in range(3):  # (the last decode's rows: 0..2, each request's prompt and output, less the newest)
            live = len(reqs[r].prompt) + len(a[r][0]) - 1
            assert np.array_equal(fast.kv.buf[:, :, r, :, :live], slow.kv.buf[:, :, r, :, :live])
        mixed = [Request(tuple(p), 20) for p in prompts[-4:]]  # n-gram drafting rows: `step` for every step
        assert decode(fast, mixed, NgramDrafter(6, 3, 1, 1)) == decode(slow, mixed, NgramDrafter(6, 3, 1, 1))
        assert fast.taken > 30, fast.taken


def test_plain_batch_shortcut_runs_out_of_room_where_step_does(tmp_path: Path) -> None:
    """`step_plain` keeps its batch's view (binding, lengths, the longest row) between its steps; `step` moves the
    rows' lengths under it. Two rows decoded to the end of the KV cache by `step_plain` with a `step` every third
    step, against `step` alone: the same tokens step by step, and `step_plain` refuses (None, nothing done) at the
    very step where `step` finds no room — on the tree graph and the plain-steps graph."""
    from builder.engines.ort.target import OrtEngine
    from builder.speculative.protocols import root_only

    spec, cfg = _greedy_spec(17, tmp_path)
    gen = np.random.default_rng(4)
    prompts = [[int(t) for t in gen.integers(0, cfg.vocab_size, n)] for n in (70, 41)]
    greedy = SamplingBatch.all_greedy(2, 1)

    def general(e: OrtEngine, ids: list[int], roots: list[int]) -> list[int]:
        return e.step(ids, [root_only(r) for r in roots], greedy).tokens[:, 0].tolist()  # type: ignore[no-any-return]

    for plain in (False, True):
        mixed, alone = OrtEngine(spec, 80, 4, plain_only=plain), OrtEngine(spec, 80, 4, plain_only=plain)
        ids_m, pre_m = mixed.start(prompts, greedy)
        ids_a, pre_a = alone.start(prompts, greedy)
        roots_m, roots_a = pre_m.tokens.tolist(), pre_a.tokens.tolist()
        assert roots_m == roots_a
        steps = 0
        while True:
            toks = mixed.step_plain(ids_m, roots_m) if steps % 3 else general(mixed, ids_m, roots_m)
            if toks is None:  # refused: `step` must find no room here, and so must the engine stepped by `step`
                with pytest.raises(ValueError, match="no room"):
                    general(mixed, ids_m, roots_m)
                with pytest.raises(ValueError, match="no room"):
                    general(alone, ids_a, roots_a)
                break
            roots_a = general(alone, ids_a, roots_a)
            assert toks == roots_a, steps
            roots_m, steps = toks, steps + 1
        assert steps == 96 - 70 and steps % 3, steps  # row 0 filled the cache; the refusal came from step_plain
        assert [mixed.committed_len(s) for s in ids_m] == [alone.committed_len(s) for s in ids_a] == [96, 41 + steps]
