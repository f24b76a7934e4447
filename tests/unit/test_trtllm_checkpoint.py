"""The TensorRT-LLM checkpoint writer, proven by reading every conversion back (no TensorRT-LLM here).

Oracles: (1) the reassembled fp32 weights equal HF transformers' exactly, for every tp ∈ {1, 2, 4} ×
pp ∈ {1, 2} (EAGLE: pp 1, upstream refuses pp > 1); (2) every method (none, Medusa, EAGLE-1 static tree,
EAGLE-2 dynamic, Lookahead) decoded through the torch reference built from the reassembled checkpoint
equals HF greedy token for token (near-ties excused only as `test_lossless.assert_lossless` proves them),
on the trained tiny fixture (8 q / 2 kv heads: tp 4 duplicates KV heads) and on a random unseen Llama
with one KV head, a padded vocabulary, Llama 3.1 RoPE scaling and a sharded index; (4) bad input is a UserError.
(3) upstream's own rules, written as data and checked against the raw rank files, and the rank files' format
are in `test_trtllm_checkpoint_layout.py`; the shared sources and conversions in `trtllm_ckpt_helpers.py`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from builder.errors import UserError
from builder.trtllm.checkpoint import CheckpointRequest, convert_checkpoint, read_checkpoint
from tests.unit.trtllm_ckpt_helpers import FIX, NEW, SPLITS, converted, hf, prompts_and_refs, request, sources

# ---------------------------------------------------------------- (1) weights equal HF's exactly


@pytest.mark.parametrize("which", ["fixture", "random"])
@pytest.mark.parametrize("tp,pp", SPLITS)
def test_reassembled_weights_equal_hf_exactly(which, tp, pp):
    from builder.model.loader import load_model
    from builder.speculative.eagle.draft_model import load_eagle
    from builder.speculative.medusa.heads import load_medusa

    hf_state = hf(which)[0].state_dict()
    for method in ("medusa", "eagle1") if pp == 1 else ("medusa",):
        got = read_checkpoint(converted(which, tp, pp, method)[0])
        ours = got.model.state_dict()
        assert set(ours) == {k.removeprefix("model.") for k in hf_state}
        for k, v in hf_state.items():
            assert torch.equal(ours[k.removeprefix("model.")], v), (method, k)
        base, medusa, eagle = sources(which)
        if method == "medusa":
            ref = load_medusa(medusa).state_dict()
            assert all(torch.equal(got.medusa.state_dict()[k], v) for k, v in ref.items())
        else:
            target = load_model(base)
            ref = load_eagle(eagle, target.embed_tokens.weight, target.lm_head.weight).state_dict()
            mine = got.eagle.state_dict()
            assert all(torch.equal(mine[k], v) for k, v in ref.items() if k in mine), "EAGLE draft differs"


# ---------------------------------------------------------------- (2) every method decodes like HF greedy


def engine_and_drafter(got, method: str):
    from builder.engines.torch_eagle import TorchEagleNet
    from builder.engines.torch_engine import TorchEngine
    from builder.speculative.choices import load_choices
    from builder.speculative.eagle.drafter import DynamicSpec, EagleDrafter
    from builder.speculative.eagle.tree import static_tree
    from builder.speculative.lookahead.drafter import LookaheadDrafter
    from builder.speculative.medusa.drafter import MedusaDrafter
    from builder.speculative.tree import tree_from_choices

    choices = load_choices("tiny_medusa_12")
    if method == "medusa":
        tree = tree_from_choices(choices)
        top_k = int(tree.rank.max()) + 1
        return TorchEngine(got.model, 128, medusa=got.medusa, medusa_topk=top_k), lambda: MedusaDrafter(tree)
    engine = TorchEngine(got.model, 128)
    if method == "lookahead":
        return engine, lambda: LookaheadDrafter(4, 4, 4)
    if method == "none":
        return engine, lambda: None
    shape = static_tree(choices) if method == "eagle1" else DynamicSpec(depth=5, top_k=3, total_nodes=12)
    top_k = int(shape.rank.max()) + 1 if method == "eagle1" else 3
    net = TorchEagleNet(got.eagle, top_k, 128 + 64)
    return engine, lambda: EagleDrafter(net, shape)


METHODS = ["none", "medusa", "eagle1", "eagle2", "lookahead"]


@pytest.mark.parametrize("which", ["fixture", "random"])
@pytest.mark.parametrize("tp,pp", SPLITS)
@pytest.mark.parametrize("method", METHODS)
def test_every_method_decodes_like_hf_greedy(which, tp, pp, method):
    from builder.speculative.decoding import generate
    from tests.unit.test_lossless import assert_lossless

    if method.startswith("eagle") and pp > 1:
        pytest.skip("EAGLE has no pipeline parallelism upstream (refusal tested below)")
    got = read_checkpoint(converted(which, tp, pp, method)[0])
    engine, make = engine_and_drafter(got, method)
    prompts, refs = prompts_and_refs(which)
    for p, ref in zip(prompts, refs):
        out = generate(engine, p, NEW, make())
        assert_lossless(hf(which), p, ref, out.token_ids, f"{which} {method} tp{tp} pp{pp}")


def test_trained_drafts_accept_through_the_converted_checkpoint():
    """A draft wired wrong stays lossless but stops accepting: the fixture's trained drafts must still accept."""
    from builder.speculative.decoding import generate

    for method in ("medusa", "eagle1", "eagle2"):
        got = read_checkpoint(converted("fixture", 2, 1, method)[0])
        engine, make = engine_and_drafter(got, method)
        steps = tokens = 0
        for p in prompts_and_refs("fixture")[0]:
            g = generate(engine, p, NEW, make())
            steps, tokens = steps + g.steps, tokens + len(g.token_ids) - 1
        assert tokens / steps > 1.2, f"{method}: τ = {tokens / steps:.2f}"


# ---------------------------------------------------------------- (4) bad input


def _copy_fixture(tmp_path: Path) -> Path:
    dst = tmp_path / "base"
    shutil.copytree(FIX / "base", dst)
    return dst


@pytest.mark.parametrize(
    "tp,pp,field,match",
    [
        (3, 1, "parallelism.tp", "does not split"),
        (16, 1, "parallelism.tp", "num_attention_heads"),
        (1, 5, "parallelism.pp", "exceeds"),
    ],
)
def test_bad_parallelism_is_a_user_error(tmp_path, tp, pp, field, match):
    with pytest.raises(UserError, match=match) as e:
        convert_checkpoint(CheckpointRequest(FIX / "base", tp, pp, "float32", "none"), tmp_path / "out")
    assert e.value.field == field and (field != "parallelism.tp" or "1, 2, 4" in str(e.value.allowed))
    assert not (tmp_path / "out").exists()


def test_missing_or_wrong_draft_is_a_user_error(tmp_path):
    base = FIX / "base"
    with pytest.raises(UserError, match="draft checkpoint") as e:
        convert_checkpoint(CheckpointRequest(base, 1, 1, "float32", "medusa", max_draft_len=12), tmp_path / "a")
    assert e.value.field == "draft_dir"
    with pytest.raises(UserError, match="no config.json") as e:
        convert_checkpoint(
            CheckpointRequest(
                base,
                1,
                1,
                "float32",
                "eagle",
                draft_dir=tmp_path / "nope",
                max_draft_len=8,
                num_eagle_layers=2,
                max_non_leaves_per_layer=2,
            ),
            tmp_path / "b",
        )
    with pytest.raises(UserError, match="pipeline parallelism") as e:
        convert_checkpoint(request("fixture", 1, 2, "eagle1"), tmp_path / "c")
    assert e.value.field == "parallelism.pp"
    with pytest.raises(UserError, match="dtype") as e:
        convert_checkpoint(CheckpointRequest(base, 1, 1, "int8", "none"), tmp_path / "d")
    assert "bfloat16" in str(e.value.allowed)
    with pytest.raises(UserError, match="medusa_num_heads"):
        convert_checkpoint(request("fixture", 1, 1, "medusa", medusa_num_heads=9), tmp_path / "e")
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no temporary folder left behind


@pytest.mark.parametrize("what", ["base", "medusa"])
def test_truncated_safetensors_is_a_user_error_naming_the_file(tmp_path, what):
    src = FIX / what
    dst = tmp_path / what
    shutil.copytree(src, dst)
    file = dst / ("model.safetensors" if what == "base" else "medusa_lm_head.safetensors")
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])
    if what == "base":
        req = CheckpointRequest(dst, 1, 1, "float32", "none")
    else:
        req = CheckpointRequest(FIX / "base", 1, 1, "float32", "medusa", draft_dir=dst, max_draft_len=12)
    with pytest.raises(UserError, match="truncated") as e:
        convert_checkpoint(req, tmp_path / "out")
    assert e.value.location == str(file)
    assert not (tmp_path / "out").exists() and not any(p.name.startswith(".out") for p in tmp_path.iterdir())


def test_output_folder_must_be_empty(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("x")
    with pytest.raises(UserError, match="not empty"):
        convert_checkpoint(CheckpointRequest(FIX / "base", 1, 1, "float32", "none"), tmp_path / "out")
