"""The engine stage's step-cost curve (`builder.engines.step_curve`) on an EAGLE engine of a tiny vocabulary.

Issue 38: the draft graph's timing fed token ids drawn from [0, 100), which ONNX Runtime's Gather refuses for a
vocabulary under 100, so building such an EAGLE engine crashed in its curve timing. Here a random 64-token target
with a random EAGLE draft is built through the real stages up to its engine; the build must finish with the draft
graph's expand and extend tables in engine.json, and every token id the timing feeds must lie in the vocabulary
(recorded from the draft net's own inputs).
"""

from __future__ import annotations

import json

import numpy as np
import yaml
from safetensors.torch import save_file

from builder.model.loader import load_model
from builder.recipe.loader import load_recipe
from builder.stages.runner import build
from tests.unit.speculative_models import make_hf_llama, random_eagle

VOCAB = 64


def tiny_vocab_eagle(root):
    """A random 64-token Llama, a WordLevel tokenizer over its ids, a random EAGLE-1 draft, and a cpu recipe."""
    from tokenizers import Tokenizer, models

    base = make_hf_llama(root / "base", vocab=VOCAB, hidden=64, layers=2, max_pos=1024, seed=5)
    vocab = {f"t{i}": i for i in range(VOCAB)}
    Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0")).save(str(base / "tokenizer.json"))
    draft = random_eagle(load_model(base))
    (root / "eagle").mkdir()
    save_file({k: v.contiguous() for k, v in draft.state_dict().items()}, str(root / "eagle" / "model.safetensors"))
    (root / "eagle" / "config.json").write_text(json.dumps(draft.config_dict(1, 2, "float32")))
    recipe = {
        "model": {"checkpoint": str(base), "dtype": "fp32"},
        "target": {"device": "cpu"},
        "build": {"max_input_len": 64, "max_seq_len": 512, "max_batch_size": 2},
        "speculative": {
            "method": "eagle",
            "checkpoint": "eagle",
            "version": 1,
            "tree": {"type": "static", "choices": "chain_4"},
        },
    }
    (root / "r.yaml").write_text(yaml.safe_dump(recipe))
    return root / "r.yaml"


def test_an_eagle_engine_of_a_vocabulary_under_100_times_its_draft_graph(tmp_path, monkeypatch):
    from builder.engines.ort.eagle import OrtEagleNet

    seen: list[np.ndarray] = []
    real_extend, real_expand = OrtEagleNet.extend, OrtEagleNet.expand

    def extend(self, seqs, tokens, *rest, **kw):  # noqa: ANN001 - records the ids, then the real call
        seen.append(np.asarray(tokens))
        return real_extend(self, seqs, tokens, *rest, **kw)

    def expand(self, seqs, tokens, *rest, **kw):  # noqa: ANN001
        seen.append(np.asarray(tokens))
        return real_expand(self, seqs, tokens, *rest, **kw)

    monkeypatch.setattr(OrtEagleNet, "extend", extend)
    monkeypatch.setattr(OrtEagleNet, "expand", expand)
    loaded = load_recipe(tiny_vocab_eagle(tmp_path))
    folder = build(loaded, tmp_path / "cache", until="engine").folder("engine")
    curve = json.loads((folder / "engine.json").read_text())["step_curve"]
    assert curve["expand"]["1"] and curve["extend"]["1"] and curve["expand"]["2"] and curve["extend"]["2"]
    assert all(v > 0 for table in ("expand", "extend") for row in curve[table].values() for v in row.values())
    assert seen and all(0 <= int(t.min()) and int(t.max()) < VOCAB for t in seen)
