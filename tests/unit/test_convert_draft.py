"""`trtspec convert-draft` asks the method registry, never a method's name: what a folder holds comes from the
methods' draft layouts (`DraftCheckpoint.layout`), the strict check from their `check_folder`, the `--kind` choices
and the refusal of a method without a draft checkpoint from `Method.draft`.

Upstream's pickles are the ones test_published_drafts writes (its `pickled` fixture: built like upstream's modules).
Oracles: the fixture's own tensors (bit-equal after the round trip), and the file names upstream uses.
"""

from __future__ import annotations

import shutil

import torch

from builder.model.loader import load_model
from builder.speculative import registry
from builder.speculative.eagle.draft_model import load_eagle
from tests.unit.recipe_helpers import run
from tests.unit.test_published_drafts import FIX, RECIPES, pickled, target  # noqa: F401 (pickled, target: fixtures)


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key


def test_a_lone_pytorch_model_bin_is_told_apart_by_its_keys(pickled, target, tmp_path):
    """pytorch_model.bin is both EAGLE-1's draft file and a single-file target's: the same conversion, checked
    afterwards as the target when it holds the target's embedding key, else as the draft."""
    for role, out in (("base", "t"), ("eagle", "e")):
        result = run("convert-draft", str(pickled[role]), "--out", str(tmp_path / out), "--allow-pickle")
        assert result.exit_code == 0, result.output
    same(load_model(tmp_path / "t").state_dict(), target.state_dict())
    embed, head = target.embed_tokens.weight, target.lm_head.weight
    same(load_eagle(tmp_path / "e", embed, head).state_dict(), load_eagle(FIX / "eagle", embed, head).state_dict())
    # --kind names what the folder holds: the target's loader passes, an EAGLE draft's check refuses a target
    ok = run("convert-draft", str(pickled["base"]), "--kind", "model", "--out", str(tmp_path / "m"), "--allow-pickle")
    assert ok.exit_code == 0, ok.output
    bad = run("convert-draft", str(pickled["base"]), "--kind", "eagle", "--out", str(tmp_path / "x"), "--allow-pickle")
    assert bad.exit_code == 2 and "Traceback" not in bad.stderr and not (tmp_path / "x").exists()


def test_kinds_and_refusals_come_from_the_registry(tmp_path):
    with_draft = [name for name, m in registry.methods().items() if m.draft is not None]
    assert with_draft[:2] == ["medusa", "eagle"]  # the built-in methods with weights of their own
    assert f"[auto|model|{'|'.join(with_draft)}]" in run("convert-draft", "--help").output
    none = run("convert-draft", str(RECIPES / "tiny-llama3-ngram.yaml"), "--allow-pickle")
    assert none.exit_code == 2 and "speculative.method ngram has no draft checkpoint" in none.stderr
    assert f"(allowed: {', '.join(with_draft)})" in none.stderr
    empty = tmp_path / "empty"
    shutil.copytree(FIX / "eagle", empty)  # safetensors only: nothing pickled to convert
    nothing = run("convert-draft", str(empty))
    assert nothing.exit_code == 2 and (
        "no medusa_lm_head.pt, pytorch_model.bin or pytorch_model.bin.index.json without a safetensors file beside it"
        in nothing.stderr
    )
