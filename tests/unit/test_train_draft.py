"""`trtspec train-draft` (builder/train/): EAGLE-3 drafts trained with NVIDIA modelopt, written in SafeAILab's layout.

Oracles:
* modelopt's own draft forward (its `_eagle_forward`: fc, the draft layer with its pre-hook, norm, LM head) against
  our `Eagle3Draft` read from modelopt's own export, in float64 after training steps that moved every norm away
  from 1: equal up to HF's float32 RoPE (the one float32 step on the path: |Δangle| ≤ T · 2^-24 rad). modelopt's
  unpatched layer is shown to compute hidden_norm(input_layernorm(h)) (an oracle built from our draft's modules) —
  far from SafeAILab's math — which is why the trainer patches it (builder/train/eagle3.py docstring).
* two runs from one seed are bit-identical; a run killed with SIGKILL after a checkpoint and restarted ends
  bit-identical to an uninterrupted one (same host, same thread count);
* a brute-force count for the draft vocabulary, a brute-force check that the data order is a permutation per epoch;
* the trained tiny fixture draft against a random one through the torch reference decoding loop (lossless both).
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from builder.cli import cli
from builder.recipe.draft_training import DraftTraining
from tests.unit.speculative_models import make_hf_llama

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "tiny-llama3-eagle3.yaml"
SMALL = (  # a few seconds: 24 prompts, 16 target tokens each, 48-token rows
    "draft_training.num_samples=24",
    "draft_training.seq_len=48",
    "draft_training.response_tokens=16",
    "draft_training.batch=4",
    "draft_training.checkpoint_every=2",
    "draft_training.draft_vocab_size=256",
)


def _train(out: Path, steps: int, *extra: str) -> tuple[int, str]:
    sets = [a for s in SMALL for a in ("--set", s)]
    args = ["train-draft", str(RECIPE), "--out", str(out), "--steps", str(steps), "--device", "cpu"]
    args += ["--threads", str(torch.get_num_threads()), *sets, *extra]
    res = CliRunner().invoke(cli, args, catch_exceptions=False)
    return res.exit_code, res.output


def _tensors(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def _assert_same(a: Path, b: Path) -> None:
    ta, tb = _tensors(a), _tensors(b)
    assert ta.keys() == tb.keys()
    for k in ta:
        assert torch.equal(ta[k], tb[k]), k


# -- the command --


@pytest.fixture(scope="module")
def short_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("train") / "a"
    code, output = _train(out, 6)
    assert code == 0, output
    return out


def test_writes_safeailab_layout_with_record(short_run: Path) -> None:
    from builder.model.loader import load_model
    from builder.speculative.eagle3.draft_model import load_eagle3

    keys = set(_tensors(short_run))
    assert {"fc.weight", "midlayer.hidden_norm.weight", "lm_head.weight", "d2t", "t2d"} <= keys
    assert not any(k.startswith("layers.") for k in keys)
    rec = json.loads((short_run / "training.json").read_text())
    assert rec["steps"] == 6 and rec["draft_vocab_size"] == 256 and not rec["resumed"]
    assert rec["inputs"]["draft"] == {"aux_layers": [0, 1, 2]} and len(rec["final_accuracy"]) == 3  # TTT steps
    target = load_model(REPO / "tests" / "fixtures" / "tiny-llama3" / "base")
    draft = load_eagle3(short_run, target.embed_tokens.weight, 4)  # our strict reader
    assert draft.aux_layers == (0, 1, 2) and draft.draft_vocab_size == 256
    assert not (short_run.parent / ".a.train").exists()  # the work folder is gone once the draft is written


def test_two_runs_bit_identical_and_up_to_date(short_run: Path, tmp_path: Path) -> None:
    code, output = _train(tmp_path / "b", 6)
    assert code == 0, output
    _assert_same(short_run, tmp_path / "b")
    key = json.loads((short_run / "training.json").read_text())["key"]
    assert json.loads((tmp_path / "b" / "training.json").read_text())["key"] == key
    before = (tmp_path / "b" / "model.safetensors").stat().st_mtime_ns
    code, output = _train(tmp_path / "b", 6)  # same key: nothing to do
    assert code == 0 and "up to date" in output
    assert (tmp_path / "b" / "model.safetensors").stat().st_mtime_ns == before


def test_kill9_then_resume_equals_uninterrupted(tmp_path: Path) -> None:
    steps = 40
    out = tmp_path / "killed"
    work = tmp_path / ".killed.train"
    sets = [a for s in SMALL for a in ("--set", s)]
    cmd = [sys.executable, "-m", "builder.cli", "train-draft", str(RECIPE), "--out", str(out), "--steps", str(steps)]
    cmd += ["--device", "cpu", "--threads", str(torch.get_num_threads()), "--quiet", *sets]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (work / "checkpoint.pt").exists():
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline, "no checkpoint within 120 s"
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not out.exists()  # nothing half-written
    done_before = torch.load(work / "checkpoint.pt", weights_only=True)["step"]
    assert 0 < done_before < steps
    code, output = _train(out, steps)
    assert code == 0, output
    assert json.loads((out / "training.json").read_text())["resumed"] is True
    code, output = _train(tmp_path / "straight", steps)
    assert code == 0, output
    _assert_same(out, tmp_path / "straight")


@pytest.mark.parametrize(
    "recipe, sets, field",
    [
        ("tiny-llama3-none.yaml", (), "speculative.method"),
        ("tiny-llama3-lookahead.yaml", (), "speculative.method"),  # no draft weights
        ("tiny-llama3-eagle1.yaml", (), "draft_training.draft_vocab_size"),  # EAGLE-1 reads the target's LM head
        ("tiny-llama3-eagle3.yaml", ("draft_training.source=no-such-file.jsonl",), "draft_training.source"),
        ("tiny-llama3-eagle3.yaml", ("speculative.aux_layers=[0, 0, 1]",), "speculative.aux_layers"),
        ("tiny-llama3-eagle3.yaml", ("speculative.aux_layers=[0, 1, 4]",), "speculative.aux_layers"),
        ("tiny-llama3-eagle3.yaml", ("draft_training.draft_vocab_size=5000",), "draft_training.draft_vocab_size"),
        ("tiny-llama3-eagle3.yaml", ("draft_training.response_tokens=300",), "draft_training"),
    ],
)
def test_bad_input_exits_2_naming_the_field(recipe: str, sets: tuple[str, ...], field: str, tmp_path: Path) -> None:
    args = ["train-draft", str(REPO / "recipes" / recipe), "--out", str(tmp_path / "d"), "--steps", "1"]
    res = CliRunner().invoke(cli, args + [a for s in (*SMALL, *sets) for a in ("--set", s)])  # small if it ran
    assert res.exit_code == 2, res.output
    assert field in res.output, res.output
    assert "Traceback" not in res.output
    assert not (tmp_path / "d").exists()


def test_bad_jsonl_line_exits_2(tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text('{"text": "def f():\\n    return 1\\n"}\n{"neither": 1}\n', encoding="utf-8")
    args = ["train-draft", str(RECIPE), "--out", str(tmp_path / "d"), "--set", f"draft_training.source={data}"]
    res = CliRunner().invoke(cli, args + ["--set", "draft_training.generate_responses=false"])
    assert res.exit_code == 2, res.output
    assert "draft_training.source" in res.output and f"{data}:2" in res.output
    assert not (tmp_path / "d").exists()


# -- the math: modelopt's draft forward vs our Eagle3Draft --


def _modelopt_pair(tmp_path: Path, reference_math: bool):
    """A random 4-layer HF Llama converted by modelopt, trained 3 steps at a large learning rate (so every norm
    weight leaves 1), exported by modelopt (tmp_path / "export"), then in float64; and our target model on the same
    weights."""
    from transformers import AutoModelForCausalLM

    from builder.model.loader import load_model
    from builder.train import eagle3

    path = make_hf_llama(tmp_path / "target", vocab=512, hidden=64, layers=4, heads=4, kv_heads=2, std=0.1)
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    run = DraftTraining(seed=3, ttt_steps=2, lr=0.05)
    vocab_ids = torch.arange(0, 512, 2)  # a draft vocabulary of 256: d2t is not all zero
    eagle3.convert(model, run, (0, 1, 2), vocab_ids, reference_math=reference_math)
    model.train()
    params = eagle3.trainable(model)
    opt = torch.optim.Adam(params.values(), lr=run.lr)
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        tokens = torch.randint(0, 512, (2, 24), generator=gen)
        loss, _ = eagle3.loss_fn(model)(tokens, torch.ones_like(tokens, dtype=torch.bool))
        opt.zero_grad()
        loss.backward()
        opt.step()
    w = model.eagle_module.layers[0].input_layernorm.weight
    assert (w - 1).abs().max() > 0.05  # the case where the two maths part
    eagle3.export_modelopt(model, tmp_path / "export")  # modelopt's own export (float32, layers.0.* names)
    model = model.double().eval()  # the same float32 values, exactly
    return model, load_model(path).to(torch.float64)


def _inputs(target, T: int = 12):
    from builder.model.llama import causal_mask

    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 512, (2, T + 1), generator=gen)
    pos = torch.arange(T + 1).expand(2, T + 1)
    _, feats = target(tokens, pos, causal_mask(T + 1, batch=2), features=(0, 1, 2))  # (2, T+1, 3·64)
    return tokens, feats


def _rope_tol(x: torch.Tensor, T: int) -> float:
    """HF's rotary embedding runs in float32 even in a float64 model: angles off by ≤ T · 2^-24 rad, which moves
    q·k and so every activation by about that much relative to the activations' scale (a few ulp of float32 on
    top, 16× margin)."""
    return 16 * (T * 2.0**-24 + 2.0**-23) * x.detach().abs().max().item()


def test_modelopt_aux_states_are_our_output_of_layer_features(tmp_path: Path) -> None:
    from builder.train import eagle3

    model, target = _modelopt_pair(tmp_path, True)
    tokens, feats = _inputs(target)
    ours = eagle3.modelopt_aux_states(model, tokens)  # modelopt's forward hooks on layers 0, 1, 2
    assert ours.shape == feats.shape
    assert (ours - feats).abs().max() <= _rope_tol(feats, tokens.shape[1])


def test_our_draft_from_modelopt_export_reproduces_modelopt_forward(tmp_path: Path) -> None:
    from builder.model.llama import causal_mask
    from builder.speculative.eagle3.draft_model import load_eagle3
    from builder.train import eagle3

    model, target = _modelopt_pair(tmp_path, True)
    tokens, feats = _inputs(target)
    T = tokens.shape[1] - 1
    x_mo, logits_mo = eagle3.modelopt_draft_step(model, tokens[:, 1:], feats[:, :T])  # pairs (h[i], t[i+1])
    assert json.loads((tmp_path / "export" / "config.json").read_text())["eagle_config"][
        "eagle_aux_hidden_state_layer_ids"
    ] == [0, 1, 2]
    draft = load_eagle3(tmp_path / "export", target.embed_tokens.weight, 4, dtype=torch.float64)
    pos = torch.arange(T).expand(2, T)
    x = draft(tokens[:, 1:], feats[:, :T], pos, causal_mask(T, batch=2))
    assert (x - x_mo).abs().max() <= _rope_tol(x_mo, T)
    assert (draft.logits(x) - logits_mo).abs().max() <= _rope_tol(logits_mo, T)


def test_modelopt_unpatched_layer_double_norms_h(tmp_path: Path) -> None:
    """modelopt 0.47 as shipped: hidden_norm(input_layernorm(h)) — equal to an oracle with that double norm, and far
    from SafeAILab's hidden_norm(h) (builder/train/eagle3.py docstring, file:line there)."""
    from builder.model.llama import causal_mask
    from builder.speculative.eagle3.draft_model import load_eagle3
    from builder.train import eagle3

    model, target = _modelopt_pair(tmp_path, False)
    tokens, feats = _inputs(target)
    T = tokens.shape[1] - 1
    x_mo, _ = eagle3.modelopt_draft_step(model, tokens[:, 1:], feats[:, :T])
    draft = load_eagle3(tmp_path / "export", target.embed_tokens.weight, 4, dtype=torch.float64)
    pos, mask = torch.arange(T).expand(2, T), causal_mask(T, batch=2)
    single = draft(tokens[:, 1:], feats[:, :T], pos, mask)
    layer = draft.midlayer
    layer.hidden_norm = torch.nn.Sequential(copy.deepcopy(layer.input_layernorm), layer.hidden_norm)
    double = draft(tokens[:, 1:], feats[:, :T], pos, mask)
    tol = _rope_tol(x_mo, T)
    assert (double - x_mo).abs().max() <= tol
    assert (single - x_mo).abs().max() > 1000 * tol


# -- the data --


def test_rows_at_is_a_permutation_per_epoch_and_a_function_of_step() -> None:
    from builder.train.draft_data import TrainingSet

    n, batch = 10, 4
    data = TrainingSet(torch.zeros(n, 3, dtype=torch.int64), torch.ones(n, 3, dtype=torch.bool))
    flat = torch.cat([data.rows_at(s, batch, 7) for s in range(10)]).tolist()  # 40 draws = 4 epochs
    for e in range(4):
        assert sorted(flat[e * n : (e + 1) * n]) == list(range(n))
    assert torch.equal(data.rows_at(6, batch, 7), TrainingSet(data.tokens, data.mask).rows_at(6, batch, 7))
    assert not torch.equal(data.rows_at(0, batch, 7), data.rows_at(0, batch, 8))


def test_frequent_ids_brute_force() -> None:
    from builder.train.draft_data import TrainingSet, frequent_ids

    gen = torch.Generator().manual_seed(0)
    tokens = (torch.rand(20, 30, generator=gen) ** 3 * 50).long()  # skewed counts over 50 ids
    mask = torch.rand(20, 30, generator=gen) > 0.2
    got = frequent_ids(TrainingSet(tokens, mask), 12, 60, keep=(59,)).tolist()
    counts = {i: int(((tokens == i) & mask).sum()) for i in range(60)}
    ranked = sorted((i for i in range(60) if i != 59), key=lambda i: (-counts[i], i))[:11]
    assert got == sorted(ranked + [59])


def test_jsonl_shapes(tmp_path: Path) -> None:
    from builder.train.draft_data import examples

    f = tmp_path / "d.jsonl"
    rows = [
        {"text": "plain"},
        {"prompt": "Q?", "response": " A."},
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]},
        {"conversations": [{"from": "human", "value": "x"}, {"from": "gpt", "value": "y"}]},
    ]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    as_text = [e.text for e in examples(str(f), tmp_path, prompts=False)]
    assert as_text == ["plain", "Q? A.", "user: hi\nassistant: hello\n", "human: x\ngpt: y\n"]
    as_prompts = [(e.text, e.is_prompt) for e in examples(str(f), tmp_path, prompts=True)]
    assert as_prompts == [("plain", False), ("Q?", True), ("user: hi\nassistant: ", True), ("human: x\ngpt: ", True)]


# -- the fixture's draft --


def test_trained_tiny_draft_accepts_more_than_a_random_one() -> None:
    from tokenizers import Tokenizer

    from builder.data.humaneval import heldout_prompts
    from builder.engines.torch_eagle import TorchEagleNet
    from builder.engines.torch_engine import TorchEngine
    from builder.model.loader import load_model
    from builder.speculative.decoding import generate
    from builder.speculative.eagle.drafter import DynamicSpec, EagleDrafter
    from builder.speculative.eagle3.draft_model import load_eagle3, random_draft
    from devtools.fixture.eagle3 import draft_dir, ensure_eagle3_fixture

    ensure_eagle3_fixture("tiny")  # made by scripts/setup.sh: a key check here
    base = REPO / "tests" / "fixtures" / "tiny-llama3" / "base"
    target = load_model(base)
    tok = Tokenizer.from_file(str(base / "tokenizer.json"))
    prompts = [tok.encode(p).ids for p in heldout_prompts(3)]  # HumanEval: text the draft never trained on
    aux = (0, 1, 2)
    trained = load_eagle3(draft_dir("tiny"), target.embed_tokens.weight, 4)
    rand = random_draft(target.cfg, aux, draft_vocab=1024, base_embed=target.embed_tokens.weight)
    tau = {}
    for name, draft in (("trained", trained), ("random", rand)):
        steps = emitted = 0
        for p in prompts:
            plain = generate(TorchEngine(target, 512), p, 48)
            out = generate(
                TorchEngine(target, 512, features=aux),
                p,
                48,
                EagleDrafter(TorchEagleNet(draft, 3, 512 + 64, 1), DynamicSpec(5, 3, 12)),
            )
            assert out.token_ids == plain.token_ids  # lossless
            steps, emitted = steps + out.steps, emitted + out.steps + sum(out.accepted_per_step)
        tau[name] = emitted / steps
    print(f"tau {tau}")
    assert tau["random"] < 1.2 < 2.0 < tau["trained"], tau


# -- Medusa heads --


def test_modelopt_medusa_loss_is_heads_k_plus_2_cross_entropy(tmp_path: Path) -> None:
    """modelopt's Medusa loss on our shifted labels = Σ_k 0.2 · 0.8^k · CE(head k at t, token t + k + 2), computed
    here by brute force with our MedusaHeads on the target's final hidden state: the convention and the layout
    match (`builder.train.medusa_modelopt`)."""
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM

    from builder.speculative.medusa.heads import MedusaHeads
    from builder.train import medusa_modelopt

    path = make_hf_llama(tmp_path / "target", vocab=128, hidden=32, layers=2, heads=4, kv_heads=2)
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float64)
    K = 3
    medusa_modelopt.convert(model, DraftTraining(seed=1), K, 1)
    with torch.no_grad():  # heads that are not the identity + the LM head
        for p in model.medusa_heads.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel()), dtype=p.dtype))
    model.eval()
    tokens = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(tokens, dtype=torch.bool)
    mask[1, 12:] = False  # right padding on one row
    loss, _ = medusa_modelopt.loss_fn(model)(tokens, mask)
    heads = MedusaHeads(K, 1, 32, 128).double()
    heads.load_state_dict({k.removeprefix("medusa_heads."): v for k, v in model.state_dict().items() if "medusa" in k})
    with torch.no_grad():
        hidden = model.model(input_ids=tokens, attention_mask=mask.long()).last_hidden_state  # (B, L, C) after norm
        want = torch.zeros((), dtype=torch.float64)
        for k, logits in enumerate(heads(hidden)):  # (B, L, V) each
            pairs = [(b, t) for b in range(2) for t in range(16 - k - 2) if mask[b, t + k + 2]]
            ce = torch.stack([F.cross_entropy(logits[b, t], tokens[b, t + k + 2]) for b, t in pairs]).mean()
            want = want + 0.2 * 0.8**k * ce
    assert abs(loss.item() - want.item()) <= 1e-12 * max(1.0, want.item())


def test_train_medusa_heads_writes_fasterdecoding_layout(tmp_path: Path) -> None:
    from builder.speculative.medusa.heads import load_medusa

    sets = [a for s in SMALL if "draft_vocab" not in s for a in ("--set", s)]
    args = ["train-draft", str(REPO / "recipes" / "tiny-llama3-medusa.yaml"), "--out", str(tmp_path / "m")]
    args += ["--steps", "4", "--device", "cpu", "--threads", str(torch.get_num_threads()), *sets]
    args += ["--set", "draft_training.generate_responses=true"]
    res = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    heads = load_medusa(tmp_path / "m", hidden_size=256, vocab_size=4096)  # our strict reader
    assert heads.num_heads == 5
    rec = json.loads((tmp_path / "m" / "training.json").read_text())
    assert rec["accuracy_of"] == "head" and len(rec["final_accuracy"]) == 5
    assert rec["inputs"]["draft"] == {"num_heads": 5, "num_layers": 1}
