"""`trtspec train-draft` on an EAGLE-1/2 recipe (builder/train/eagle1.py): our EAGLE-1 draft on the loop EAGLE-3 uses.

Oracles:
* the loss against the fixture factory's EAGLE-1 loss (`builder.train.eagle._loss`, written apart from it) on rows
  without padding, at the factory's decay;
* padding: a padded row's loss equals the loss of the same row cut before its padding (the draft is causal, so the
  valid positions' outputs are the same), computed with no mask at all;
* the written draft through our strict loader (keys, shapes, the target's embedding) and two runs bit-identical.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from click.testing import CliRunner

from builder.cli import cli
from builder.model.config import LlamaConfig

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "tiny-llama3-eagle1.yaml"
SMALL = (  # a few seconds: 24 prompts, 16 target tokens each, 48-token rows
    "draft_training.generate_responses=true",
    "draft_training.num_samples=24",
    "draft_training.seq_len=48",
    "draft_training.response_tokens=16",
    "draft_training.batch=4",
    "draft_training.checkpoint_every=2",
)


def _cfg(V: int = 96, C: int = 32) -> LlamaConfig:
    return LlamaConfig(V, C, 64, 1, 4, 2, C // 4, 1e-5, 10000.0, None, False, 256)


def _draft_and_rows(B: int = 2, L: int = 14):
    from builder.speculative.eagle.draft_model import EagleDraft

    torch.manual_seed(0)
    cfg = _cfg()
    draft = EagleDraft(cfg, fc_bias=False)
    lm_head = torch.randn(cfg.vocab_size, cfg.hidden_size) * 0.3
    draft.set_lm_head(lm_head)
    tokens = torch.randint(0, cfg.vocab_size, (B, L))
    hidden = torch.randn(B, L, cfg.hidden_size)
    return draft, lm_head, tokens, hidden


def test_loss_equals_the_factory_loss_without_padding() -> None:
    from builder.train.eagle import _loss, unroll
    from builder.train.eagle1 import level_losses

    draft, lm_head, tokens, hidden = _draft_and_rows()
    outs = unroll(draft, tokens, hidden, 3)
    ours, accs = level_losses(outs, hidden, torch.ones_like(tokens, dtype=torch.bool), lm_head, 0.1, 0.8)
    theirs = _loss(outs, hidden, lm_head, 0.1)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=0.0)  # float32 sums in another order
    assert len(accs) == 3 and all(0.0 <= a <= 1.0 for a in accs)


def test_padding_is_left_out_of_the_loss() -> None:
    from builder.train.eagle import unroll
    from builder.train.eagle1 import level_losses

    draft, lm_head, tokens, hidden = _draft_and_rows(B=1, L=14)
    keep = 9
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[:, :keep] = True
    padded, _ = level_losses(unroll(draft, tokens, hidden, 3), hidden, mask, lm_head, 0.1, 0.9)
    t, h = tokens[:, :keep], hidden[:, :keep]
    cut, _ = level_losses(unroll(draft, t, h, 3), h, torch.ones_like(t, dtype=torch.bool), lm_head, 0.1, 0.9)
    torch.testing.assert_close(padded, cut, rtol=1e-5, atol=0.0)
    hidden[:, keep:] += 100.0  # what sits under the padding moves nothing
    moved, _ = level_losses(unroll(draft, tokens, hidden, 3), hidden, mask, lm_head, 0.1, 0.9)
    torch.testing.assert_close(moved, padded, rtol=1e-5, atol=0.0)


def _train(out: Path, steps: int) -> tuple[int, str]:
    args = ["train-draft", str(RECIPE), "--out", str(out), "--steps", str(steps), "--device", "cpu"]
    args += ["--threads", str(torch.get_num_threads()), *[a for s in SMALL for a in ("--set", s)]]
    res = CliRunner().invoke(cli, args, catch_exceptions=False)
    return res.exit_code, res.output


def test_writes_safeailab_eagle1_draft_reproducibly(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    from builder.model.loader import load_model
    from builder.speculative.eagle.draft_model import load_eagle

    for name in ("a", "b"):
        code, output = _train(tmp_path / name, 4)
        assert code == 0, output
    a, b = load_file(str(tmp_path / "a" / "model.safetensors")), load_file(str(tmp_path / "b" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert "fc.weight" in a and "fc.bias" not in a and "layers.0.self_attn.q_proj.weight" in a
    rec = json.loads((tmp_path / "a" / "training.json").read_text())
    assert rec["method"] == "eagle" and rec["steps"] == 4 and len(rec["final_accuracy"]) == 3  # TTT levels
    cfg = json.loads((tmp_path / "a" / "config.json").read_text())
    assert cfg["bias"] is False and cfg["num_hidden_layers"] == 1
    target = load_model(REPO / "tests" / "fixtures" / "tiny-llama3" / "base")
    draft = load_eagle(tmp_path / "a", target.embed_tokens.weight, target.lm_head.weight)  # strict
    assert draft.cfg.intermediate_size == target.cfg.intermediate_size  # the target's layer shape


def test_config_json_keeps_a_head_dim_that_is_not_hidden_over_heads(tmp_path: Path) -> None:
    """The regime fixture's layer shape (hidden 256, 32 heads of 32): a config.json without head_dim reads back as
    hidden / heads and the strict loader refuses the draft's own k_proj (the first regime run found it)."""
    from safetensors.torch import save_file

    from builder.speculative.eagle.draft_model import EagleDraft, load_eagle

    cfg = LlamaConfig(96, 32, 64, 1, 4, 2, 16, 1e-5, 10000.0, None, False, 256)  # head_dim 16, not 32 / 4
    draft = EagleDraft(cfg, fc_bias=False)
    save_file({k: t.contiguous() for k, t in draft.state_dict().items()}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(draft.config_dict(0, 1, "float32")))
    back = load_eagle(tmp_path, draft.embed_tokens.weight)
    assert back.cfg.head_dim == 16
    assert all(torch.equal(a, b) for a, b in zip(draft.state_dict().values(), back.state_dict().values()))
