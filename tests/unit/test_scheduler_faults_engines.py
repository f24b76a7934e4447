"""Every failure path of the engines and the decoding loop under the scheduler, without a server: the batched
engine (ONNX Runtime), `check_paths`, the decoding loop's drafter and engine failures, and the torch reference
engine.

Faults come from `triton_repo.faults.FaultyEngine` (the real engine until armed; then the next call fails as
an engine failure would) or, for the ONNX Runtime engine itself, from a binding whose run raises once. After
every fault the outputs must equal plain greedy decoding on a clean engine (the oracle), and no slot or
KV row may be left behind. The scheduler's own failure paths are in `test_scheduler_faults.py`; the shared
fixtures and fakes in `scheduler_fakes.py`.
"""

from __future__ import annotations

import numpy as np
import pytest

from builder.recipe.loader import load_recipe
from builder.speculative.decoding import Decoder, EngineBroken
from builder.speculative.protocols import Draft, SamplingBatch, check_paths, root_only
from builder.stages.decoders import build_decoder
from tests.unit.scheduler_fakes import RECIPE, give_back, reqs, tiny, want  # noqa: F401 (module-scoped fixtures)
from triton_repo.faults import FaultyEngine

# -- the batched engine -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ort(tmp_path_factory):
    return build_decoder(load_recipe(str(RECIPE)), engine="onnxruntime", max_batch_size=3)


class _RunFailsOnce:
    """The engine's binding cache, except that the next binding's run raises (an ONNX Runtime failure)."""

    def __init__(self, inner) -> None:
        self.inner, self.armed = inner, True

    def get(self, key, build):
        bound = self.inner.get(key, build)
        outer = self

        class Failing:
            x, y = bound.x, bound.y

            def run(self) -> None:
                if outer.armed:
                    outer.armed = False
                    raise RuntimeError("onnxruntime: run failed")
                bound.run()

        return Failing()


def test_a_failing_prefill_gives_its_rows_back(ort, want, reqs):
    engine = ort.engine
    first = Decoder(engine)
    kept = first.add([reqs[0]])[0]
    engine._bound, engine._last = _RunFailsOnce(engine._bound), ((), None)
    with pytest.raises(RuntimeError, match="run failed"):
        engine.start([list(reqs[1].prompt), list(reqs[2].prompt)], SamplingBatch.all_greedy(2, 1))
    assert len(engine.rows) == 1 and engine.committed[1:].tolist() == [0, 0]  # rows added before the failure: gone
    engine._bound = engine._bound.inner
    got = Decoder.__new__(Decoder)  # the same decoder goes on: the kept sequence and two new ones
    del got
    for s in first.add([reqs[1], reqs[2]], 1):
        pass
    done = {}
    while first.active:
        for s in first.step():
            done[s.index] = s.gen.token_ids
    done[kept.index] = kept.gen.token_ids
    assert [done[i] for i in range(3)] == want[:3]
    assert len(engine.rows) == 0


def test_the_engine_refuses_bad_paths_before_any_kv_moves(ort, want, reqs):
    engine = ort.engine
    dec = Decoder(engine)
    seq = dec.add([reqs[3]])[0]
    root = seq.gen.token_ids[-1]
    good = root_only(root)
    bad = Draft(
        np.array([root, 5, 6], np.int64),
        np.tril(np.ones((3, 3), bool)),
        np.array([0, 1, 2]),
        np.array([[0, 2, -1]], np.int32),
    )  # node 2 sits at depth 2, not 1
    committed = engine.committed_len(seq.id)
    with pytest.raises(ValueError, match="depth"):
        engine.step([seq.id], [bad], SamplingBatch.all_greedy(1, 3))
    assert engine.committed_len(seq.id) == committed
    assert engine.step([seq.id], [good], SamplingBatch.all_greedy(1, 1)).emitted(0) == [want[3][1]]
    engine.release(seq.id)


CHAIN = np.tril(np.ones((3, 3), bool))  # root -> a -> b
BAD_PATHS = {
    "first node not the root": (CHAIN, [0, 1, 2], [[1, 2, -1]], "root"),
    "index past the tree": (CHAIN, [0, 1, 2], [[0, 1, 3]], "node indices"),
    "below -1": (CHAIN, [0, 1, 2], [[0, -2, -1]], "node indices"),
    "node after padding": (CHAIN, [0, 1, 2], [[0, -1, 2]], "padding"),
    "skips a level": (CHAIN, [0, 1, 2], [[0, 2, -1]], "depth"),
    "not an ancestor": (
        np.array([[1, 0, 0], [1, 1, 0], [1, 0, 1]], bool),
        [0, 1, 1],
        [[0, 1, -1], [0, 2, -1], [0, 1, 2]],
        "depth",
    ),
    "attends a node off the path": (
        np.array([[1, 0, 0], [1, 1, 0], [1, 1, 1]], bool),
        [0, 1, 1],
        [[0, 2, -1]],
        "exactly",
    ),
    "misses an ancestor": (np.array([[1, 0, 0], [1, 1, 0], [0, 1, 1]], bool), [0, 1, 2], [[0, 1, 2]], "exactly"),
}


@pytest.mark.parametrize("case", list(BAD_PATHS))
def test_check_paths_refuses(case):
    mask, depth, paths, needle = BAD_PATHS[case]
    d = Draft(np.array([1, 2, 3], np.int64), np.array(mask), np.array(depth, np.int64), np.array(paths, np.int32))
    with pytest.raises(ValueError, match=needle):
        check_paths(d)


def test_check_paths_accepts_trees_lookahead_branches_and_dtypes():
    tree = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], bool)  # root; a, b; a -> c
    check_paths(
        Draft(np.arange(4, dtype=np.int64), tree, np.array([0, 1, 1, 2]), np.array([[0, 1, 3], [0, 2, -1]], np.int32))
    )
    check_paths(root_only(7))
    with pytest.raises(ValueError, match="int32"):
        check_paths(Draft(np.arange(4, dtype=np.int64), tree, np.array([0, 1, 1, 2]), np.array([[0, 1, 3]], np.int64)))


# -- the decoding loop ----------------------------------------------------------------------------------


def test_a_drafter_failing_at_start_releases_the_engine_sequences(tiny, reqs, want):
    class Refusing:
        def __init__(self, inner) -> None:
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def start(self, *a):
            raise RuntimeError("drafter refused the prompt")

    dec = Decoder(tiny.engine, Refusing(tiny.make_drafter()))
    with pytest.raises(RuntimeError, match="refused"):
        dec.add(reqs[:2])
    assert dec.rows_in_use == 0 and dec.active == []
    assert Decoder(tiny.engine, tiny.make_drafter()).run(reqs[:2])[1].token_ids == want[1]


def test_a_failing_step_ends_and_releases_every_active_sequence(tiny, reqs, want):
    faulty = FaultyEngine(tiny.engine)
    dec = Decoder(faulty, tiny.make_drafter())
    seqs = dec.add(reqs[:3])
    faulty.arm("step")
    with pytest.raises(RuntimeError, match="decoding step failed"):
        dec.step()
    assert dec.active == [] and dec.rows_in_use == 0 and all(s.gen.finish_reason == "error" for s in seqs)
    assert [g.token_ids for g in dec.run(reqs[:3])] == want[:3]  # the same decoder carries on, exact


def test_a_failing_release_is_a_broken_engine(tiny, reqs):
    faulty = FaultyEngine(tiny.engine)
    dec = Decoder(faulty, tiny.make_drafter())
    dec.add(reqs[:1])
    faulty.arm("engine")
    with pytest.raises(EngineBroken, match="releasing sequence"):
        dec.step()
    give_back(tiny)  # (the wrapped engine itself is fine)


def test_the_torch_reference_engine_gives_back_rows_and_caches_of_a_failing_prefill(tmp_path):
    """The oracle engine keeps the same promise as the batched ones: a prefill that raises leaves nothing."""
    from builder.engines.torch_engine import TorchEngine
    from builder.model.loader import load_model
    from tests.unit.speculative_models import make_hf_llama

    engine = TorchEngine(load_model(make_hf_llama(tmp_path / "m")), max_seq_len=64, max_batch_size=2)
    free, forward = len(engine._free), engine.model.forward
    calls = {"n": 0}

    def fail_second(*args, **kwargs):  # the second prompt of the batch fails mid-prefill
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("injected prefill failure")
        return forward(*args, **kwargs)

    engine.model.forward = fail_second
    with pytest.raises(RuntimeError, match="injected"):
        engine.start([[5, 6, 7], [8, 9]], SamplingBatch.all_greedy(2, 4))
    engine.model.forward = forward
    assert len(engine.rows) == 0 and len(engine._free) == free
    ids, _ = engine.start([[5, 6, 7], [8, 9]], SamplingBatch.all_greedy(2, 4))  # both slots usable again
    assert len(ids) == 2
