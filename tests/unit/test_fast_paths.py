"""The decoding loop's fast paths against its reference step, for every method on the tiny fixture's ONNX Runtime
engines: `Decoder(..., fast_paths=False)` (the reference step alone: propose, one `engine.step`, update) and the
default (the fast paths of builder.speculative.fast_paths where they apply: lone plain steps and bursts, lone drafted
chains, plain batches, chain drafts through `step_chain`) give exactly the same tokens, accepted counts per step,
steps, finish reasons and loop totals — at batch 1 and in a batch of three with requests joining and leaving, plain
and drafting requests mixed, under a draft schedule, with stop tokens — and the fast paths were really taken (fewer
`engine.step` calls); every request's tokens also equal its plain greedy decoding (the oracle: speculation is
lossless; fp32 ONNX Runtime, where exact equality is the rule). tests/unit/test_batch1_paths.py holds each engine fast step to `step` (tokens and KV cache);
tests/unit/test_fixture_lossless.py holds the reference to HF greedy."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from builder.data.humaneval import heldout_prompts
from builder.recipe.loader import load_recipe
from builder.speculative.decoding import Decoder, DraftSchedule, Request
from builder.speculative.ngram.drafter import NgramDrafter, NgramFactory
from builder.speculative.protocols import (
    ChainProposing,
    ChainStepping,
    EmittedUpdates,
    GreedyBursting,
    PlainStepping,
    implements,
)
from builder.stages.decoders import build_decoder

REPO = Path(__file__).resolve().parents[2]
RECIPES = {
    "none": "tiny-llama3-none.yaml",
    "lookahead": "tiny-llama3-lookahead.yaml",
    "medusa": "tiny-llama3-medusa.yaml",
    "eagle-1": "tiny-llama3-eagle1.yaml",
    "eagle-2": "tiny-llama3-eagle2.yaml",
    "ngram": "tiny-llama3-ngram.yaml",
    "ngram-2": "tiny-llama3-lookahead.yaml",  # two candidates (trees): the lookahead engine's tree graph
}
NEW = 40


@pytest.fixture(scope="module", params=list(RECIPES))
def method(request) -> tuple[str, Any, Callable[[], Any]]:
    dec = build_decoder(load_recipe(REPO / "recipes" / RECIPES[request.param]), max_batch_size=3)
    make = dec.make_drafter if request.param != "ngram-2" else lambda: NgramDrafter(6, 3, 1, 2)
    return request.param, dec, make


def _decode(dec: Any, make: Callable[[], Any], fast: bool) -> tuple[list[tuple], list[int], int]:
    """Batch-1 runs and a batched run under a schedule; per request (tokens, accepted per step, steps, finish), the
    loops' totals, and the engine's `step` calls."""
    if isinstance(make, NgramFactory):
        make.reset()  # a shared pool: each side starts from an empty one
    engine = dec.engine
    calls = [0]
    step = engine.step

    def counted(*args: Any) -> Any:
        calls[0] += 1
        return step(*args)

    engine.step = counted  # (an instance attribute over the class's method, deleted below)
    try:
        prompts = [dec.tokenizer.encode(p).ids for p in heldout_prompts(5)]
        stop = Decoder(engine, fast_paths=False).run([Request(tuple(prompts[0]), NEW)])[0].token_ids[11]
        single = [Request(tuple(p), NEW) for p in prompts[:3]] + [Request(tuple(prompts[0]), NEW, stop_ids=(stop,))]
        batch = [
            Request(tuple(p), NEW + 20 if i == 1 else NEW - 6 * i, speculate=i != 1, stop_ids=(stop,) if i == 3 else ())
            for i, p in enumerate(prompts)
        ]  # requests join as others finish; the plain one (1) outlasts the drafting ones and ends alone
        gens, totals = [], []
        for reqs, schedule in [([r], None) for r in single] + [(batch, DraftSchedule([[1, 6], [2, 3], [3, 1]]))]:
            loop = Decoder(engine, make(), schedule, fast_paths=fast)
            assert (loop.fast is not None) == fast
            gens += loop.run(reqs)
            t = loop.totals
            totals += [t.sequence_steps, t.drafted, t.accepted, t.emitted, loop.timing.steps]
        plain = Decoder(engine, fast_paths=False).run([*single, *batch])  # the oracle: plain greedy, per request
        assert [g.token_ids for g in gens] == [g.token_ids for g in plain]
        return [(g.token_ids, g.accepted_per_step, g.steps, g.finish_reason) for g in gens], totals, calls[0]
    finally:
        del engine.step


def test_fast_paths_equal_the_reference_step(method) -> None:
    name, dec, make = method
    fast, fast_totals, fast_calls = _decode(dec, make, True)
    ref, ref_totals, ref_calls = _decode(dec, make, False)
    assert fast == ref, name
    assert fast_totals == ref_totals, name
    assert name == "none" or any(sum(a) for _, a, _, _ in ref), f"{name}: nothing accepted: no drafting compared"
    assert fast_calls < ref_calls, (name, fast_calls, ref_calls)  # the fast paths took steps away from `step`


def test_the_capabilities_the_fast_paths_see(method) -> None:
    """What `implements` reports for the fixture's engines and drafters: every ORT engine has the three fast steps;
    only the n-gram drafter learns from emitted tokens, and gives chains as tokens with one candidate."""
    name, dec, make = method
    assert all(implements(dec.engine, c) for c in (ChainStepping, GreedyBursting, PlainStepping))
    drafter = make()
    ngram = name.startswith("ngram")
    assert implements(drafter, EmittedUpdates) == implements(drafter, ChainProposing) == ngram
    assert not ngram or drafter.chains_only() == (name == "ngram")
    assert Decoder(dec.engine, drafter).fast.chains == (name == "ngram")  # type: ignore[union-attr]


def test_a_delegating_wrapper_has_only_what_it_defines() -> None:
    """`implements` judges the class: a wrapper passing unknown attributes on (`__getattr__`, as fault injection and
    taps do) does not take on its inner engine's fast steps, so the loop calls the wrapper's `step`; a subclass
    that sets a fast step to None opts out of it."""

    class Engine:
        def step_chain(self, seq: int, tokens: list[int]) -> list[int] | None:
            return None

        def step_plain(self, seqs: Any, roots: list[int]) -> list[int] | None:
            return None

    class Wrapper:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    class NoPlain(Engine):
        step_plain = None  # type: ignore[assignment]

    assert implements(Engine(), ChainStepping) and implements(Engine(), PlainStepping)
    assert not implements(Engine(), GreedyBursting)
    assert hasattr(Wrapper(Engine()), "step_chain") and not implements(Wrapper(Engine()), ChainStepping)
    assert implements(NoPlain(), ChainStepping) and not implements(NoPlain(), PlainStepping)
    assert not implements(None, ChainStepping)
