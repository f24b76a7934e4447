"""`trtspec generate` / `profile-acceptance` on a random HF checkpoint with upstream-layout drafts.

Oracle: HF transformers greedy `generate` on the same checkpoint.
"""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from safetensors.torch import save_file

from builder.model.loader import load_model
from tests.unit.recipe_helpers import run
from tests.unit.speculative_models import make_hf_llama, random_eagle, random_medusa

CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "for i in range(10):\n    print(i)\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n",
] * 20


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    root = tmp_path_factory.mktemp("gen")
    base = make_hf_llama(root / "base", vocab=512, max_pos=4096, seed=3)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        CORPUS,
        trainers.BpeTrainer(
            vocab_size=300,
            special_tokens=["<pad>", "<s>", "</s>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    tok.save(str(base / "tokenizer.json"))
    model = load_model(base)
    heads = random_medusa(model, num_heads=4)
    (root / "medusa").mkdir()
    save_file(
        {k: v.contiguous() for k, v in heads.state_dict().items()}, str(root / "medusa" / "medusa_lm_head.safetensors")
    )
    (root / "medusa" / "config.json").write_text(json.dumps(heads.config_dict(str(base))))
    draft = random_eagle(model)
    (root / "eagle").mkdir()
    save_file({k: v.contiguous() for k, v in draft.state_dict().items()}, str(root / "eagle" / "model.safetensors"))
    (root / "eagle" / "config.json").write_text(json.dumps(draft.config_dict(1, 2, "float32")))
    return root


def recipe(root, speculative: dict | None = None, name: str = "r.yaml") -> str:
    data = {
        "model": {"checkpoint": str(root / "base"), "dtype": "fp32"},
        "target": {"device": "cpu"},
        "build": {"max_input_len": 1024, "max_seq_len": 2048},
    }
    if speculative:
        data["speculative"] = speculative
    path = root / name
    path.write_text(yaml.safe_dump(data))
    return str(path)


def hf_greedy(root, ids, n):
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(root / "base", torch_dtype=torch.float32)
    x = torch.tensor([ids])
    out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False)
    gen = out[0, len(ids) :].tolist()
    return gen[: gen.index(2) + 1] if 2 in gen else gen  # eos_token_id 2 ends both


SPECS = {
    "none": None,
    "lookahead": {"method": "lookahead", "window": 3, "ngram": 3, "verification_set": 2},
    "medusa": {"method": "medusa", "checkpoint": "medusa", "num_heads": 4, "tree": "mc_sim_7b_63"},
    "eagle": {
        "method": "eagle",
        "checkpoint": "eagle",
        "version": 2,
        "tree": {"type": "dynamic", "depth": 4, "top_k": 4, "total_nodes": 12},
    },
    "eagle1": {
        "method": "eagle",
        "checkpoint": "eagle",
        "version": 1,
        "tree": {"type": "static", "choices": "chain_4"},
    },
}


ENGINES = ["torch", "onnxruntime"]  # the last one also runs the other CLI tests


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("method", list(SPECS))
def test_generate_json_equals_hf_greedy(ckpt, method, engine):
    path = recipe(ckpt, SPECS[method], f"{method}.yaml")
    ids = [5, 17, 33, 101, 7]
    result = run(
        "generate",
        path,
        "--prompt-ids",
        ",".join(map(str, ids)),
        "--max-new-tokens",
        "40",
        "--json",
        "--engine",
        engine,
    )
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["engine"] == engine
    assert out["token_ids"] == hf_greedy(ckpt, ids, 40)
    assert out["steps"] == len(out["accepted_per_step"]) and out["text"] is not None


def test_set_model_checkpoint_and_method_override(ckpt, tmp_path):
    bogus = recipe(ckpt, SPECS["lookahead"])
    result = run(
        "generate",
        bogus,
        "--set",
        f"model.checkpoint={ckpt / 'base'}",
        "--method",
        "none",
        "--prompt-ids",
        "9,8,7",
        "--max-new-tokens",
        "12",
        "--json",
        "--engine",
        ENGINES[-1],
    )
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["token_ids"] == hf_greedy(ckpt, [9, 8, 7], 12)


def test_streamed_text_matches_tokens(ckpt):
    path = recipe(ckpt, SPECS["lookahead"])
    streamed = run("generate", path, "--prompt", "def add(a, b):", "--max-new-tokens", "20", "--engine", ENGINES[-1])
    as_json = run(
        "generate", path, "--prompt", "def add(a, b):", "--max-new-tokens", "20", "--json", "--engine", ENGINES[-1]
    )
    assert streamed.exit_code == 0 and as_json.exit_code == 0
    assert streamed.stdout.rstrip("\n") == json.loads(as_json.stdout)["text"]


def test_sampling_is_reproducible(ckpt):
    path = recipe(ckpt, SPECS["medusa"])
    args = [
        "generate",
        path,
        "--prompt-ids",
        "3,4,5",
        "--max-new-tokens",
        "24",
        "--temperature",
        "0.9",
        "--top-p",
        "0.95",
        "--json",
        "--engine",
        ENGINES[-1],
    ]
    a = json.loads(run(*args, "--seed", "1").stdout)["token_ids"]
    b = json.loads(run(*args, "--seed", "1").stdout)["token_ids"]
    c = json.loads(run(*args, "--seed", "2").stdout)["token_ids"]
    assert a == b and a != c


@pytest.mark.parametrize(
    "args,expect",
    [
        (["--prompt", "x", "--prompt-ids", "1"], "exactly one of --prompt"),
        (["--prompt-ids", "1,99999"], "[0, 512)"),
        (["--prompt-ids", "1,a"], "comma-separated integers"),
        (["--prompt-ids", "1", "--method", "medusa"], "configures 'lookahead'"),
        (["--prompt-ids", "1", "--max-new-tokens", "5000"], "exceeds build.max_seq_len"),
    ],
)
def test_generate_user_errors(ckpt, args, expect):
    result = run("generate", recipe(ckpt, SPECS["lookahead"]), *args, "--engine", ENGINES[-1])
    assert result.exit_code == 2, result.output
    assert expect in result.stderr and "Traceback" not in result.stderr


def test_missing_checkpoint_is_a_user_error(ckpt, tmp_path):
    path = recipe(ckpt)
    result = run(
        "generate", path, "--set", f"model.checkpoint={tmp_path / 'nope'}", "--prompt-ids", "1", "--engine", ENGINES[-1]
    )
    assert result.exit_code == 2 and "checkpoint missing" in result.stderr


def test_profile_acceptance_reports_every_method(ckpt, tmp_path):
    paths = [recipe(ckpt, SPECS[m], f"p-{m}.yaml") for m in ("medusa", "eagle")]
    out = tmp_path / "profile.json"
    result = run(
        "profile-acceptance",
        *paths,
        "--num-prompts",
        "2",
        "--max-new-tokens",
        "8",
        "-o",
        str(out),
        "--engine",
        ENGINES[-1],
    )
    assert result.exit_code == 0, result.stderr
    report = json.loads(out.read_text())
    assert [r["method"] for r in report["methods"]] == ["none", "lookahead(W=4,N=4,G=4)", "medusa", "eagle-2"]
    none = report["methods"][0]
    assert none["tau"] == 1.0 and none["accept_rate_by_depth"] == []
    for r in report["methods"]:
        assert r["tokens"] > 0 and r["tau"] >= 1.0
    assert "| medusa |" in result.stdout


def test_profile_acceptance_keeps_two_drafts_of_one_method_apart(ckpt, tmp_path):
    """Two recipe files of one method (e.g. a fixture's draft and one retrained) are two rows, never one silently
    dropped; one recipe file given twice is one row."""
    a, b = recipe(ckpt, SPECS["eagle"], "p-eagle-a.yaml"), recipe(ckpt, SPECS["eagle"], "p-eagle-b.yaml")
    out = tmp_path / "profile.json"
    args = ["--num-prompts", "1", "--max-new-tokens", "4", "-o", str(out), "--engine", "torch"]
    result = run("profile-acceptance", a, b, a, *args)
    assert result.exit_code == 0, result.stderr
    methods = [r["method"] for r in json.loads(out.read_text())["methods"]]
    assert methods == ["none", "lookahead(W=4,N=4,G=4)", "eagle-2", "eagle-2 [p-eagle-b]"]
